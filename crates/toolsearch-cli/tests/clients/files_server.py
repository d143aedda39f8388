"""An MCP file server on the official Python SDK (MCPServer, formerly FastMCP) that trusts the
paths it is asked for, as many file servers do: it lists `file:///public/a.txt` and
`file:///secret/key.txt`, offers the template `file:///public/{+path}` (with the SDK's traversal
checks turned off), and for a read of the template decodes the path, takes `\\` as `/`, normalises
it (`..` and all) and serves whatever file the result names, `/secret/key.txt` included. Subscribes
and completions (of the template's `path`) are answered too. Over stdio.

    python files_server.py
"""

import posixpath
from urllib.parse import unquote

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resources.templates import ResourceSecurity

FILES = {
    "/public/a.txt": "public text A",
    "/public/b.txt": "public text B",
    "/secret/key.txt": "SECRET-KEY-4242",
}

server = MCPServer("files-test-server")


def served(path):
    """The file a path names once decoded and normalised, as a trusting server resolves it."""
    path = unquote(path).replace("\\", "/")
    return FILES.get(posixpath.normpath(path), None)


@server.resource("file:///public/a.txt", name="a.txt")
def public_a() -> str:
    return FILES["/public/a.txt"]


@server.resource("file:///secret/key.txt", name="key.txt")
def secret_key() -> str:
    return FILES["/secret/key.txt"]


@server.resource(
    "file:///public/{+path}",
    name="public file",
    security=ResourceSecurity(reject_path_traversal=False, reject_absolute_paths=False),
)
def public_file(path: str) -> str:
    text = served("/public/" + path)
    if text is None:
        raise ValueError(f"no such file: /public/{path}")
    return text


@server.completion()
async def complete(ref, argument, context):
    from mcp_types import Completion

    names = [name.removeprefix("/public/") for name in FILES if name.startswith("/public/")]
    return Completion(values=[n for n in names if n.startswith(argument.value)])


if __name__ == "__main__":
    server.run("stdio")
