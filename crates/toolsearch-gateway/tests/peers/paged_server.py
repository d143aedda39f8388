"""A small MCP server on the official Python SDK (low-level API), used by the gateway's tests.

- tools/list answers in pages of two, so a client must follow nextCursor;
- `add_tool` adds a tool named by its argument `x` and sends notifications/tools/list_changed;
- `slow` waits until it is cancelled; `counts` reports how many `slow` calls started and how many
  were cancelled (through notifications/cancelled);
- the other tools echo their argument `x` as text and as structured content.

Run with the venv of scripts/install-test-peers.sh: .test-peers/venv/bin/python paged_server.py
"""

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

PAGE = 2
STATE = {"tools": [f"tool_{i}" for i in range(5)], "started": 0, "cancelled": 0}
FIXED = ["add_tool", "slow", "counts"]


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
        counts = {"started": STATE["started"], "cancelled": STATE["cancelled"]}
        return text(f"{counts}", structured=counts)
    if name in STATE["tools"]:
        if args.get("x") == "fail":
            return text(f"{name} failed as asked", is_error=True)
        return text(f"{name}: {args.get('x', '')}", structured={"tool": name, "x": args.get("x")})
    raise ValueError(f"unknown tool {name}")


server = Server("paged-test-server", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, options)


if __name__ == "__main__":
    anyio.run(main)
