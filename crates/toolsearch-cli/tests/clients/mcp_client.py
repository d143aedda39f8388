"""Drives an MCP server with the official Python SDK client and prints what happened as JSON.

    python mcp_client.py --plan PLAN_JSON --stdio COMMAND [ARG ...]
    python mcp_client.py --plan PLAN_JSON --url http://127.0.0.1:PORT/mcp [--token TOKEN]
    python mcp_client.py --plan PLAN_JSON --replicas URL0,URL1,...
With --replicas, one session spans several gateways: its standalone GET stream is opened on URL0,
and every POST (and the DELETE) goes to the replica a "route" step chose (URL0 at first).
With --token, every request over --url carries "Authorization: Bearer TOKEN".

PLAN_JSON is a list of steps, each run in order on one session:
    {"op": "list"}                                 -> {"names": [...], "tools": {name: tool}}
    {"op": "call", "name": N, "arguments": {...}}  -> {"is_error": b, "text": "...", "json": ..., "structured": ...}
           With "save": V, the result's structuredContent.offloaded.handle is kept as $V: any argument
           string "$V" in a later call is replaced by it.
    {"op": "call_until_ok", "name": N, "arguments": {...}}
                                                   -> the first successful call (retried; hang guard only)
    {"op": "call_checked", "name": N, "arguments": {...}}
                                                   -> a call whose structured content is validated
                                                      (jsonschema) against the tool's outputSchema:
                                                      the call's summary plus {"output_schema": ...,
                                                      "schema_errors": [...]}
    {"op": "prompts"}                              -> {"names": [...], "prompts": {name: prompt}}
    {"op": "get_prompt", "name": N, "arguments": {...}}
                                                   -> {"messages": [...]} or {"error": "...", "code": c}
    {"op": "wait_list_changed"}                    -> {"list_changed": count} once at least one arrived
    {"op": "complete", "prompt": N, "argument": {"name": A, "value": V}, "context": {...}}
                                                   -> {"values": [...]} or {"error": "...", "code": c}
    {"op": "wait_prompts_changed"}                 -> {"prompts_changed": count} once a prompts/list_changed arrived
    {"op": "list_changed"}                         -> {"list_changed": count} now (after a ping round trip)
    {"op": "resources"}                            -> {"uris": [...], "resources": {uri: resource}}
    {"op": "templates"}                            -> {"templates": [uriTemplate, ...]}
    {"op": "read", "uri": U}                       -> {"contents": [...]} or {"error": "...", "code": c}
    {"op": "subscribe" | "unsubscribe", "uri": U}  -> {"ok": true} or {"error": "...", "code": c}
    {"op": "wait_resources_changed"}               -> {"resources_changed": count} once a resources/list_changed arrived
    {"op": "wait_updated", "uri": U, "since_mark": b?}
                                                   -> {"updated": [uri, ...]} once U was reported updated (after the last
                                                      mark_updates, with since_mark)
    {"op": "mark_updates"}                         -> {"marked": n}: the updates so far
    {"op": "complete_resource", "uri": U, "argument": {"name": A, "value": V}}
                                                   -> {"values": [...]} or {"error": "...", "code": c}
    {"op": "set_level", "level": L}                -> {"ok": true}
    {"op": "logs"}                                 -> {"logs": [...]}: the log messages so far (after a ping round trip)
    {"op": "wait_log", "contains": S}              -> {"logs": [...]} once a log message whose data contains S arrived
    {"op": "call_progress", "name": N, "arguments": {...}}
                                                   -> the call's summary plus {"progress": [[progress, total, message], ...]}
    {"op": "asked"}                                -> {"asked": [...]}: the server's requests this client answered
                                                      (or saw cancelled: {"method", "cancelled": true})
    {"op": "wait_cancelled"}                       -> {"asked": [...]} once a request was seen cancelled
    {"op": "kill_pidfile", "path": P}              -> {"killed": pid}
    {"op": "route", "to": I}                       -> {"route": I}: the next requests go to --replicas' URL I
    {"op": "touch" | "rm", "path": P}              -> creates or removes a file (the fault tests' switch)
    {"op": "wait_file", "path": P}                 -> {"waited": P} once the file exists (another client's "touch")
Like desktop clients, it lists the tools once after initialize, before the plan's first step
(unless "client" says "no_initial_list": true).
PLAN_JSON may also be {"client": {...}, "steps": [...]}, where "client" turns on what the client
offers the server: "sampling": TEXT (answers sampling/createMessage with TEXT), "elicitation":
{CONTENT} (accepts elicitation/create with CONTENT), "elicitation": "hang" (never answers, and
records the request's cancellation), "roots": [{"uri": U, "name": N}, ...].
The output is one JSON object: {"initialize": {...}, "steps": [...]} on stdout.
"""

import argparse
import asyncio
import json
import os
import signal
import sys

import jsonschema

import httpx2
from mcp import Client, StdioServerParameters
from plan_values import substitute
from mcp.client.streamable_http import streamable_http_client
from mcp import types

GUARD_SECONDS = 120


class Recorder:
    def __init__(self):
        self.list_changed = 0
        self.prompts_changed = 0
        self.errors = []
        self.event = asyncio.Event()
        self.prompts_event = asyncio.Event()
        self.updated = []
        self.mark = 0
        self.resources_changed = 0
        self.logs = []
        self.asked = []
        self.changed = asyncio.Event()

    async def on_log(self, params):
        self.logs.append(dump(params))
        self.changed.set()

    async def wait_for(self, predicate):
        while not predicate():
            self.changed.clear()
            await self.changed.wait()

    async def __call__(self, message):
        if isinstance(message, Exception):
            self.errors.append(repr(message))
            return
        root = getattr(message, "root", message)
        if isinstance(root, types.ToolListChangedNotification) or getattr(root, "method", None) == "notifications/tools/list_changed":
            self.list_changed += 1
            self.event.set()
        prompts_type = getattr(types, "PromptListChangedNotification", ())
        if isinstance(root, prompts_type) or getattr(root, "method", None) == "notifications/prompts/list_changed":
            self.prompts_changed += 1
            self.prompts_event.set()
        if getattr(root, "method", None) == "notifications/resources/list_changed":
            self.resources_changed += 1
            self.changed.set()
        if getattr(root, "method", None) == "notifications/resources/updated":
            self.updated.append(str(root.params.uri))
            self.changed.set()


def client_callbacks(recorder, offers):
    """The callbacks that make the client offer sampling, elicitation and roots, as asked."""
    callbacks = {}
    if "sampling" in offers:
        async def sampling(context, params):
            recorder.asked.append({"method": "sampling/createMessage", "params": dump(params)})
            return types.CreateMessageResult(
                role="assistant",
                content=types.TextContent(type="text", text=offers["sampling"]),
                model="test-model",
            )
        callbacks["sampling_callback"] = sampling
    if "elicitation" in offers:
        async def elicitation(context, params):
            asked = {"method": "elicitation/create", "params": dump(params)}
            recorder.asked.append(asked)
            if offers["elicitation"] == "hang":
                try:
                    await asyncio.sleep(GUARD_SECONDS)
                except BaseException:  # the server cancelled its request
                    asked["cancelled"] = True
                    recorder.changed.set()
                    raise
            return types.ElicitResult(action="accept", content=offers["elicitation"])
        callbacks["elicitation_callback"] = elicitation
    if "roots" in offers:
        async def roots(context):
            recorder.asked.append({"method": "roots/list"})
            return types.ListRootsResult(roots=[types.Root(**r) for r in offers["roots"]])
        callbacks["list_roots_callback"] = roots
    return callbacks


def mcp_error(e):
    error = getattr(e, "error", None)
    return {"error": str(e), "code": getattr(error, "code", None)}


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


SAVED = {}


async def run_step(client, recorder, step):
    op = step["op"]
    if op == "list":
        result = await client.list_tools(cache_mode="refresh")
        return {"names": [t.name for t in result.tools], "tools": {t.name: dump(t) for t in result.tools}}
    if op == "call":
        result = await client.call_tool(step["name"], substitute(step.get("arguments", {}), SAVED))
        summary = call_summary(result)
        if "save" in step:
            SAVED[step["save"]] = ((result.structured_content or {}).get("offloaded") or {}).get("handle")
        return summary
    if op == "call_checked":
        listed = await client.list_tools(cache_mode="refresh")
        tool = next(t for t in listed.tools if t.name == step["name"])
        schema = dump(tool).get("outputSchema")
        result = await client.call_tool(step["name"], step.get("arguments", {}))
        summary = call_summary(result)
        summary["output_schema"] = schema
        validator = jsonschema.Draft202012Validator(schema or {})
        summary["schema_errors"] = [e.message for e in validator.iter_errors(result.structured_content)]
        return summary
    if op == "call_until_ok":
        attempts = 0
        last = None
        while True:
            attempts += 1
            result = await client.call_tool(step["name"], step.get("arguments", {}))
            last = call_summary(result)
            if not last["is_error"]:
                last["attempts"] = attempts
                return last
            await asyncio.sleep(0.5)
    if op == "prompts":
        result = await client.list_prompts()
        return {"names": [p.name for p in result.prompts], "prompts": {p.name: dump(p) for p in result.prompts}}
    if op == "get_prompt":
        try:
            result = await client.get_prompt(step["name"], step.get("arguments"))
        except Exception as e:  # an MCP error answer: reported, the session goes on
            error = getattr(e, "error", None)
            return {"error": str(e), "code": getattr(error, "code", None)}
        return {"messages": [dump(m) for m in result.messages]}
    if op == "complete":
        ref = types.PromptReference(name=step["prompt"])
        try:
            result = await client.complete(ref, step["argument"], step.get("context"))
        except Exception as e:  # an MCP error answer: reported, the session goes on
            error = getattr(e, "error", None)
            return {"error": str(e), "code": getattr(error, "code", None)}
        return {"values": result.completion.values}
    if op == "wait_prompts_changed":
        await recorder.prompts_event.wait()
        return {"prompts_changed": recorder.prompts_changed}
    if op == "wait_list_changed":
        await recorder.event.wait()
        return {"list_changed": recorder.list_changed}
    if op == "list_changed":
        await client.send_ping()
        return {"list_changed": recorder.list_changed}
    if op == "resources":
        result = await client.list_resources()
        return {"uris": [str(r.uri) for r in result.resources], "resources": {str(r.uri): dump(r) for r in result.resources}}
    if op == "templates":
        result = await client.list_resource_templates()
        return {"templates": [t.uri_template for t in result.resource_templates]}
    if op == "read":
        try:
            result = await client.read_resource(step["uri"])
        except Exception as e:  # an MCP error answer: reported, the session goes on
            return mcp_error(e)
        return {"contents": [dump(c) for c in result.contents]}
    if op in ("subscribe", "unsubscribe"):
        try:
            if op == "subscribe":
                await client.subscribe_resource(step["uri"])
            else:
                await client.unsubscribe_resource(step["uri"])
        except Exception as e:  # an MCP error answer: reported, the session goes on
            return mcp_error(e)
        return {"ok": True}
    if op == "wait_resources_changed":
        await recorder.wait_for(lambda: recorder.resources_changed > 0)
        return {"resources_changed": recorder.resources_changed}
    if op == "mark_updates":
        recorder.mark = len(recorder.updated)
        return {"marked": recorder.mark}
    if op == "wait_updated":
        # With "since_mark": an update that came after the last mark_updates.
        await recorder.wait_for(lambda: step["uri"] in (recorder.updated[recorder.mark:] if step.get("since_mark") else recorder.updated))
        return {"updated": list(recorder.updated)}
    if op == "complete_resource":
        ref = types.ResourceTemplateReference(uri=step["uri"])
        try:
            result = await client.complete(ref, step["argument"])
        except Exception as e:  # an MCP error answer: reported, the session goes on
            return mcp_error(e)
        return {"values": result.completion.values}
    if op == "set_level":
        await client.set_logging_level(step["level"])
        return {"ok": True}
    if op == "logs":
        await client.send_ping()
        return {"logs": list(recorder.logs)}
    if op == "wait_log":
        await recorder.wait_for(lambda: any(step["contains"] in json.dumps(l) for l in recorder.logs))
        return {"logs": list(recorder.logs)}
    if op == "call_progress":
        progress = []

        async def on_progress(value, total, message):
            progress.append([value, total, message])

        result = await client.call_tool(step["name"], step.get("arguments", {}), progress_callback=on_progress)
        summary = call_summary(result)
        summary["progress"] = progress
        return summary
    if op == "asked":
        return {"asked": list(recorder.asked)}
    if op == "wait_cancelled":
        await recorder.wait_for(lambda: any(a.get("cancelled") for a in recorder.asked))
        return {"asked": list(recorder.asked)}
    if op == "route":
        ROUTER.post_to = step["to"]
        return {"route": step["to"]}
    if op == "kill_pidfile":
        with open(step["path"]) as f:
            pid = int(f.read().strip())
        os.kill(pid, signal.SIGKILL)
        return {"killed": pid}
    if op == "touch":
        open(step["path"], "w").close()
        return {"touched": step["path"]}
    if op == "rm":
        os.remove(step["path"])
        return {"removed": step["path"]}
    if op == "wait_file":
        while not os.path.exists(step["path"]):
            await asyncio.sleep(0.05)
        return {"waited": step["path"]}
    raise ValueError(f"unknown step {op!r}")


class Router(httpx2.AsyncBaseTransport):
    """Sends the standalone GET stream to the first replica and every other request to the one a
    "route" step chose, whatever URL the SDK asked for."""

    def __init__(self, urls):
        self.urls = [httpx2.URL(u) for u in urls]
        self.post_to = 0
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request):
        target = self.urls[0] if request.method == "GET" else self.urls[self.post_to]
        request.url = request.url.copy_with(host=target.host, port=target.port)
        request.headers["Host"] = f"{target.host}:{target.port}"
        return await self.inner.handle_async_request(request)

    async def aclose(self):
        await self.inner.aclose()


ROUTER = None


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--plan", required=True)
    parser.add_argument("--url")
    parser.add_argument("--replicas")
    parser.add_argument("--token")
    parser.add_argument("--stdio", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    plan = json.loads(args.plan)
    offers = {}
    if isinstance(plan, dict):
        offers = plan.get("client", {})
        plan = plan["steps"]
    http = None
    if args.replicas:
        global ROUTER
        urls = args.replicas.split(",")
        ROUTER = Router(urls)
        http = httpx2.AsyncClient(
            transport=ROUTER, timeout=httpx2.Timeout(30.0, read=300.0)
        )
        server = streamable_http_client(urls[0], http_client=http)
    elif args.url and args.token:
        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {args.token}"},
            timeout=httpx2.Timeout(30.0, read=300.0),
        )
        server = streamable_http_client(args.url, http_client=http)
    elif args.url:
        server = args.url
    elif args.stdio:
        server = StdioServerParameters(command=args.stdio[0], args=args.stdio[1:], env=dict(os.environ))
    else:
        parser.error("give --url or --stdio")
    recorder = Recorder()
    out = {"steps": []}
    # mode="legacy": the initialize handshake, as today's MCP clients do.
    async with Client(
        server,
        mode="legacy",
        message_handler=recorder,
        logging_callback=recorder.on_log,
        cache=None,
        **client_callbacks(recorder, offers),
    ) as client:
        caps = client.server_capabilities
        out["initialize"] = {
            "protocol_version": client.protocol_version,
            "server_info": dump(client.server_info) if client.server_info else None,
            "capabilities": dump(caps),
            "instructions": client.instructions,
        }
        if not offers.get("no_initial_list"):
            # What desktop clients do after initialize: list the tools once, then act.
            await client.list_tools(cache_mode="refresh")
        for step in plan:
            out["steps"].append(await run_step(client, recorder, step))
    out["transport_errors"] = recorder.errors
    if http is not None:
        await http.aclose()
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
