"""Drives the gateway with the official Python SDK client over one or more concurrent sessions and prints
what happened as JSON; for the large-output tests, where a handle from one call feeds the next.

    python offload_client.py --plan PLAN_JSON --stdio COMMAND [ARG ...]
    python offload_client.py --plan PLAN_JSON --url http://127.0.0.1:PORT/mcp

PLAN_JSON is a list of steps run in order. Each may name a "session" (default "a"); a session is opened
on first use and stays open until a "close" step, so two sessions can be open at once (over HTTP).
Over HTTP, the step that opens a session may give a "token": every request of that session then
carries "Authorization: Bearer TOKEN"; and a "mode": "legacy" (the default: the initialize
handshake and a session) or "auto" (protocol 2026-07-28 when the server offers it: no session).
    {"op": "list"}                                  -> {"names": [...], "tools": {name: tool}, "instructions": "...", "protocol": "..."}
    {"op": "call", "name": N, "arguments": {...}, "save": V}
        -> {"is_error": b, "text": "...", "json": ..., "structured": ..., "content": [...]}
           With "save", the result's structuredContent.offloaded.handle is kept as $V: any argument
           string "$V" in a later step is replaced by it.
    {"op": "close"}                                 -> {"closed": session}
    {"op": "prompts"}                               -> {"names": [...]}
    {"op": "resources"}                             -> {"uris": [...]}
    {"op": "read", "uri": U}                        -> {"contents": [...]} or {"error": "...", "code": c}
    {"op": "get_prompt", "name": N, "arguments": {...}}
                                                    -> {"messages": [...]} or {"error": "...", "code": c}
    {"op": "sleep", "seconds": S}                   -> {"slept": S}
    {"op": "join"}                                  -> {"joined": n}: waits for the background steps
A step with "background": true starts and the plan goes on at once; its result takes its place in
"steps" when a "join" step has waited for it.
The output is one JSON object: {"steps": [...]} on stdout.
"""

import argparse
import asyncio
import json
import os
import sys

from mcp import Client, StdioServerParameters
from plan_values import substitute
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

GUARD_SECONDS = 120


def dump(model):
    if hasattr(model, "model_dump"):
        return model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return model


def call_summary(result):
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    text = "\n".join(texts)
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    return {
        "is_error": bool(result.is_error),
        "text": text,
        "json": parsed,
        "structured": result.structured_content,
        "content": [dump(c) for c in result.content],
    }


class Session:
    """One client session in its own task: the SDK's cancel scopes must be entered and left in one
    task, so sessions opened and closed in any order each get theirs."""

    def __init__(self, server, token=None, mode="legacy"):
        self.queue = asyncio.Queue()
        self.mode = mode
        self.task = asyncio.create_task(self.run(server, token))

    async def run(self, server, token):
        if token is None:
            await self.serve(server)
            return
        if not isinstance(server, str):
            raise ValueError("a session token needs --url (HTTP)")
        headers = {"Authorization": f"Bearer {token}"}
        async with create_mcp_http_client(headers=headers) as http:
            await self.serve(streamable_http_client(server, http_client=http))

    async def serve(self, server):
        # mode="legacy" (the default): the initialize handshake, as most of today's clients do.
        async with Client(server, mode=self.mode, cache=None) as client:
            # What desktop clients do after initialize: list the tools once, then act.
            await client.list_tools(cache_mode="refresh")
            while True:
                work, done = await self.queue.get()
                if work is None:
                    done.set_result(None)
                    return
                try:
                    done.set_result(await work(client))
                except Exception as e:  # handed to the step that asked
                    done.set_exception(e)

    async def do(self, work):
        done = asyncio.get_running_loop().create_future()
        await self.queue.put((work, done))
        await asyncio.wait({done, self.task}, return_when=asyncio.FIRST_COMPLETED)
        if not done.done():
            # The session task ended first: it failed to connect or lost the connection.
            self.task.result()
            raise RuntimeError("the session ended before answering")
        return done.result()

    async def close(self):
        if not self.task.done():
            await self.do(None)
        await self.task


class Sessions:
    def __init__(self, server):
        self.server = server
        self.open = {}

    def get(self, name, token=None, mode="legacy"):
        if name not in self.open:
            self.open[name] = Session(self.server, token, mode)
        return self.open[name]

    async def close(self, name):
        await self.open.pop(name).close()

    async def close_all(self):
        for name in list(self.open):
            await self.close(name)


async def run_step(sessions, saved, step):
    op = step["op"]
    session = step.get("session", "a")
    if op == "close":
        await sessions.close(session)
        return {"closed": session}
    worker = sessions.get(session, step.get("token"), step.get("mode", "legacy"))
    if op == "list":

        async def list_tools(client):
            result = await client.list_tools(cache_mode="refresh")
            return {
                "names": [t.name for t in result.tools],
                "tools": {t.name: dump(t) for t in result.tools},
                "instructions": client.instructions,
                "protocol": client.protocol_version,
            }

        return await worker.do(list_tools)
    if op == "call":
        arguments = substitute(step.get("arguments", {}), saved)

        async def call(client):
            return call_summary(await client.call_tool(step["name"], arguments))

        summary = await worker.do(call)
        if "save" in step:
            structured = summary["structured"] or {}
            handle = (structured.get("offloaded") or {}).get("handle")
            if handle is None:
                raise ValueError(f"step {step!r} returned no offloaded handle: {summary['text'][:500]}")
            saved[step["save"]] = handle
        return summary
    if op == "prompts":

        async def list_prompts(client):
            result = await client.list_prompts()
            return {"names": [p.name for p in result.prompts]}

        return await worker.do(list_prompts)
    if op == "get_prompt":

        async def get_prompt(client):
            try:
                result = await client.get_prompt(step["name"], step.get("arguments"))
            except Exception as e:  # an MCP error answer: reported, the session goes on
                error = getattr(e, "error", None)
                return {"error": str(e), "code": getattr(error, "code", None)}
            return {"messages": [dump(m) for m in result.messages]}

        return await worker.do(get_prompt)
    if op == "resources":

        async def list_resources(client):
            result = await client.list_resources()
            return {"uris": [str(r.uri) for r in result.resources]}

        return await worker.do(list_resources)
    if op == "read":

        async def read(client):
            try:
                result = await client.read_resource(step["uri"])
            except Exception as e:  # an MCP error answer: reported, the session goes on
                error = getattr(e, "error", None)
                return {"error": str(e), "code": getattr(error, "code", None)}
            return {"contents": [dump(c) for c in result.contents]}

        return await worker.do(read)
    raise ValueError(f"unknown step {op!r}")


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--plan", required=True)
    parser.add_argument("--url")
    parser.add_argument("--stdio", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    plan = json.loads(args.plan)
    if args.url:
        server = args.url
    elif args.stdio:
        server = StdioServerParameters(command=args.stdio[0], args=args.stdio[1:], env=dict(os.environ))
    else:
        parser.error("give --url or --stdio")
    sessions = Sessions(server)
    saved = {}
    out = {"steps": []}
    background = []
    try:
        for step in plan:
            if step.get("background"):
                background.append((len(out["steps"]), asyncio.create_task(run_step(sessions, saved, step))))
                out["steps"].append({"background": True})
            elif step["op"] == "join":
                for index, task in background:
                    out["steps"][index] = await task
                out["steps"].append({"joined": len(background)})
                background = []
            elif step["op"] == "sleep":
                await asyncio.sleep(step["seconds"])
                out["steps"].append({"slept": step["seconds"]})
            else:
                out["steps"].append(await run_step(sessions, saved, step))
    finally:
        await sessions.close_all()
    out["saved"] = saved
    print(json.dumps(out))


def leaf_errors(error):
    """The innermost errors of an exception group (a TaskGroup wraps the one that matters)."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaf_errors(inner)]
    return [f"{type(error).__name__}: {error}"]


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(), GUARD_SECONDS))
    except Exception as e:  # reported as JSON so the Rust test shows why
        print(json.dumps({"fatal": f"{type(e).__name__}: {e}", "causes": leaf_errors(e)}))
        sys.exit(1)
