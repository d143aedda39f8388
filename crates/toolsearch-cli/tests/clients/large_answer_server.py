"""An MCP server on the official Python SDK (MCPServer, formerly FastMCP) whose tool answers with
as much text as asked, for the gateway's tests of answers larger than one message may be. Over
stdio.

    python large_answer_server.py

- `large_text(megabytes)`: text of that many million bytes, in lines `line 000001 ...`;
- `echo(text)`: the text back, to show the server still answers after a large answer.
"""

from mcp.server.mcpserver import MCPServer

server = MCPServer("large-answer-test-server")

LINE = "line {:06d} lorem ipsum dolor sit amet, consectetur adipiscing elit\n"


# Text content only: with structured output the SDK would send the text twice.
@server.tool(structured_output=False)
def large_text(megabytes: float) -> str:
    """Answers with text of `megabytes` million bytes."""
    size = int(megabytes * 1_000_000)
    one = len(LINE.format(0))
    text = "".join(LINE.format(i) for i in range(size // one + 1))
    return text[:size]


@server.tool(structured_output=False)
def echo(text: str) -> str:
    """Answers with `text`."""
    return text


if __name__ == "__main__":
    server.run("stdio")
