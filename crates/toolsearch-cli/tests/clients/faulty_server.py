"""An MCP server on the official Python SDK (low-level API) whose tool list holds bad definitions
beside good ones, for the gateway's fault tests.

- good tools: `sibling_alpha`, `sibling_beta` (echo their argument `x`), `deep_result` (answers
  with structured content nested 250 levels, about as deep as the SDK writes);
- bad tools: one with an empty name, a second `sibling_alpha`, `deep_schema` (an input schema
  nested 200 levels), and `evil<U+202E>txt` (a right-to-left override in its name).

Run with the venv of scripts/install-test-peers.sh: .test-peers/venv/bin/python faulty_server.py

Over stdio by default. `--http sse` or `--http json` serves it over Streamable HTTP instead, at
/mcp on a free port of 127.0.0.1 (answers as SSE streams, or as single JSON bodies), and prints
the port on stdout. `--without-deep-schema` leaves the tool with the deep schema out.
"""

import socket
import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

FLAT = {"type": "object", "properties": {"x": {"type": "string", "description": "a value"}}}


def nested(levels):
    value = {"type": "string"}
    for _ in range(levels - 1):
        value = {"type": "object", "properties": {"a": value}}
    return value


def deep_value(levels):
    value = "bottom"
    for _ in range(levels):
        value = {"a": value}
    return value


def tool(name, description, schema=FLAT):
    return types.Tool(name=name, description=description, input_schema=schema)


TOOLS = [
    tool("sibling_alpha", "First good sibling: echoes a value"),
    tool("", "A tool without a name"),
    tool("sibling_alpha", "A second definition under the same name"),
    tool("deep_schema", "A tool whose schema nests too deep", nested(100)),
    tool("evil\u202etxt", "A tool whose name reorders text"),
    tool("sibling_beta", "Second good sibling: echoes a value"),
    tool("deep_result", "Answers with a result nested 250 levels"),
]


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params):
    args = params.arguments or {}
    if params.name == "deep_result":
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="deep")],
            structured_content=deep_value(250),
        )
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.name}: {args.get('x', '')}")])


server = Server("faulty-test-server", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def main_http(json_response):
    import uvicorn

    app = server.streamable_http_app(json_response=json_response)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    # Listening before the port is told: a client that connects at once queues in the backlog
    # instead of being refused while the server starts.
    sock.listen(128)
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(app, log_level="warning")
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    if "--without-deep-schema" in sys.argv:
        TOOLS[:] = [t for t in TOOLS if t.name != "deep_schema"]
    if "--http" in sys.argv:
        mode = sys.argv[sys.argv.index("--http") + 1]
        if mode not in ("sse", "json"):
            sys.exit(f"--http takes sse or json, not {mode!r}")
        anyio.run(main_http, mode == "json")
    else:
        anyio.run(main)
