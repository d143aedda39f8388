"""A small MCP server on the official Python SDK (low-level API), used by the gateway's tests.

- tools/list answers in pages of two, so a client must follow nextCursor;
- `add_tool` adds a tool named by its argument `x` and sends notifications/tools/list_changed;
- `slow` waits until it is cancelled; `counts` reports how many `slow` calls started and how many
  were cancelled (through notifications/cancelled), and how many `poll` calls started;
- `poll` (over HTTP) sends progress, closes its answer's SSE stream, then sends more progress and
  answers: the client has to resume the stream (GET with Last-Event-ID) to read the answer;
- the other tools echo their argument `x` as text and as structured content.

Run with the venv of scripts/install-test-peers.sh: .test-peers/venv/bin/python paged_server.py
over stdio, or `paged_server.py http PORT` over Streamable HTTP at http://127.0.0.1:PORT/mcp
(with an in-memory event store, so that streams can be resumed).
"""

import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import EventMessage, EventStore

PAGE = 2
STATE = {"tools": [f"tool_{i}" for i in range(5)], "started": 0, "cancelled": 0, "polls": 0}
FIXED = ["add_tool", "slow", "counts", "poll"]


def tool(name):
    return types.Tool(
        name=name,
        description=f"Test tool {name}",
        input_schema={"type": "object", "properties": {"x": {"type": "string", "description": "a value"}}},
    )


def text(value, structured=None, is_error=False):
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=value)],
        structured_content=structured,
        is_error=is_error,
    )


async def list_tools(ctx, params):
    cursor = params.cursor if params is not None else None
    start = int(cursor) if cursor else 0
    names = STATE["tools"] + FIXED
    page = names[start : start + PAGE]
    next_cursor = str(start + PAGE) if start + PAGE < len(names) else None
    return types.ListToolsResult(tools=[tool(n) for n in page], next_cursor=next_cursor)


async def call_tool(ctx, params):
    args = params.arguments or {}
    name = params.name
    if name == "add_tool":
        new = args.get("x", "added")
        STATE["tools"].append(new)
        await ctx.session.send_tool_list_changed()
        return text(f"added {new}")
    if name == "slow":
        STATE["started"] += 1
        try:
            await anyio.sleep(3600)
        except anyio.get_cancelled_exc_class():
            STATE["cancelled"] += 1
            raise
        return text("slow finished")
    if name == "counts":
        counts = {"started": STATE["started"], "cancelled": STATE["cancelled"], "polls": STATE["polls"]}
        return text(f"{counts}", structured=counts)
    if name == "poll":
        STATE["polls"] += 1
        token = progress_token(ctx)
        if token is not None:
            await ctx.session.send_progress_notification(token, 1, 2, related_request_id=ctx.request_id)
        if ctx.close_sse_stream is None:
            return text("poll needs Streamable HTTP with an event store", is_error=True)
        await ctx.close_sse_stream()
        await anyio.sleep(0.3)
        if token is not None:
            await ctx.session.send_progress_notification(token, 2, 2, related_request_id=ctx.request_id)
        return text("polled")
    if name in STATE["tools"]:
        if args.get("x") == "fail":
            return text(f"{name} failed as asked", is_error=True)
        return text(f"{name}: {args.get('x', '')}", structured={"tool": name, "x": args.get("x")})
    raise ValueError(f"unknown tool {name}")


def progress_token(ctx):
    meta = ctx.meta
    if meta is None:
        return None
    if isinstance(meta, dict):
        return meta.get("progressToken", meta.get("progress_token"))
    return getattr(meta, "progress_token", None)


class MemoryEventStore(EventStore):
    """Every event of every stream, kept for the life of the process."""

    def __init__(self):
        self.events = []

    async def store_event(self, stream_id, message):
        event_id = str(len(self.events) + 1)
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id, send_callback):
        index = next((i for i, (event_id, _, _) in enumerate(self.events) if event_id == last_event_id), None)
        if index is None:
            return None
        stream = self.events[index][1]
        for event_id, stream_id, message in self.events[index + 1 :]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


server = Server("paged-test-server", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, options)


async def main_http(port):
    import uvicorn
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    manager = StreamableHTTPSessionManager(app=server, event_store=MemoryEventStore(), retry_interval=100)

    async def app(scope, receive, send):
        await manager.handle_request(scope, receive, send)

    async with manager.run():
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
        await uvicorn.Server(config).serve()


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        anyio.run(main_http, int(sys.argv[2]))
    else:
        anyio.run(main)
