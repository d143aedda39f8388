"""An MCP server on the official Python SDK (low-level API) that gives up on its own request to
the client: its tool `ask_briefly` sends `elicitation/create` with a one-second limit, after which
the SDK sends `notifications/cancelled` for it, and the tool answers "no answer". Over stdio.

    python elicit_server.py
"""

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


async def list_tools(ctx, params):
    return types.ListToolsResult(
        tools=[
            types.Tool(
                name="ask_briefly",
                description="Asks the user for a name, waiting one second.",
                input_schema={"type": "object", "properties": {}},
            )
        ]
    )


async def call_tool(ctx, params):
    request = types.ElicitRequest(
        params=types.ElicitRequestFormParams(message="Your name?", requested_schema=SCHEMA)
    )
    try:
        result = await ctx.session.send_request(request, types.ElicitResult, request_read_timeout_seconds=1.0)
        text = f"answered: {result.action}"
    except Exception as e:  # the limit passed: the SDK has cancelled the request
        text = f"no answer: {type(e).__name__}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


server = Server("elicit-test-server", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    options = server.create_initialization_options(NotificationOptions())
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, options)


if __name__ == "__main__":
    anyio.run(main)
