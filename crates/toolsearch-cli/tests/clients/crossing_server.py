"""An MCP server on the official Python SDK (MCPServer, formerly FastMCP) that logs and asks the
client for sampling, for the gateway's tests of what reaches a session from outside its scope.
Over stdio.

    python crossing_server.py

- `chatty(text)`: logs `text` at info level, then answers `text`;
- `sample_later()`: starts a task that, once `wait_for_sampling` runs, sends
  `sampling/createMessage` on the connection (as a server that ignores the call's cancellation
  would), then waits for ever: its caller's call times out first;
- `wait_for_sampling()`: lets that task ask, waits for the outcome and answers it: `sampled: TEXT`
  (the client's answer) or `refused: ERROR` (the error the server got instead).
"""

import asyncio

from mcp import types
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("crossing-test-server")

# Set by `wait_for_sampling`; the pending request goes out only then.
waiting = asyncio.Event()
outcome = {}
decided = asyncio.Event()
# Background tasks are kept here so that they are not collected mid-flight.
tasks = set()


@server.tool(structured_output=False)
async def chatty(text: str, ctx: Context) -> str:
    """Logs `text` at info level, then answers it."""
    await ctx.info(text)
    return text


async def ask(session):
    await waiting.wait()
    try:
        result = await session.create_message(
            messages=[
                types.SamplingMessage(
                    role="user", content=types.TextContent(type="text", text="private prompt")
                )
            ],
            max_tokens=16,
        )
        content = result.content
        outcome["text"] = f"sampled: {getattr(content, 'text', content)}"
    except Exception as e:  # the gateway's refusal, as the server sees it
        outcome["text"] = f"refused: {e}"
    decided.set()


@server.tool(structured_output=False)
async def sample_later(ctx: Context) -> str:
    """Asks for sampling once `wait_for_sampling` runs; never answers itself."""
    task = asyncio.get_running_loop().create_task(ask(ctx.session))
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    await asyncio.sleep(3600)
    return "never"


@server.tool(structured_output=False)
async def wait_for_sampling() -> str:
    """Lets the pending sampling request go out and answers what became of it."""
    waiting.set()
    try:
        await asyncio.wait_for(decided.wait(), 60)
    except asyncio.TimeoutError:
        return "no outcome: nothing was asked"
    return outcome["text"]


if __name__ == "__main__":
    server.run("stdio")
