"""An MCP server on the official Python SDK (low-level API) that serves the tools of a JSON file
(an array of MCP tool definitions) exactly as written, so that a test can put the same catalog
behind the gateway and in front of the CLI. Calls answer with their arguments as text.

    python catalog_server.py TOOLS_JSON
"""

import json
import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

with open(sys.argv[1]) as f:
    TOOLS = [
        types.Tool(name=t["name"], description=t.get("description"), input_schema=t["inputSchema"])
        for t in json.load(f)
    ]


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params):
    text = json.dumps({"tool": params.name, "arguments": params.arguments or {}})
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


server = Server("catalog-test-server", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    options = server.create_initialization_options(NotificationOptions())
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, options)


if __name__ == "__main__":
    anyio.run(main)
