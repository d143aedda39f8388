"""An MCP server on the official Python SDK (MCPServer) over the legacy HTTP+SSE transport of
2024-11-05 (events at /sse, messages posted to /messages/), for the gateway's test of a call
cancelled on the way. It listens on a free port of 127.0.0.1 and prints the port on stdout.

    python sse_server.py

- `wait(seconds)`: waits that long and answers `waited`; a wait cancelled by its client is
  counted;
- `wait_for_cancel()`: waits (at most 10 s) until a wait was cancelled, then answers
  `cancelled: N`; `none cancelled` otherwise.
"""

import asyncio
import socket

import uvicorn
from mcp.server.mcpserver import MCPServer

server = MCPServer("sse-test-server")
cancelled = {"count": 0}
seen = asyncio.Event()


@server.tool(structured_output=False)
async def wait(seconds: float) -> str:
    """Waits that many seconds."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        cancelled["count"] += 1
        seen.set()
        raise
    return "waited"


@server.tool(structured_output=False)
async def wait_for_cancel() -> str:
    """Waits until a wait was cancelled."""
    try:
        await asyncio.wait_for(seen.wait(), timeout=10)
    except asyncio.TimeoutError:
        return "none cancelled"
    return f"cancelled: {cancelled['count']}"


async def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    # Listening before the port is told: a client that connects at once queues in the backlog.
    sock.listen(128)
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(server.sse_app(host="127.0.0.1"), log_level="warning")
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
