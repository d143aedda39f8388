"""Captures the catalog of tests/data/everyday: the tools/list of the servers examples/gateway.toml
runs (everything, memory, filesystem) plus mcp-server-time and mcp-server-fetch, as the
evaluation format reads it (an array of MCP tools, each with its `server`).

    python scripts/capture-everyday-catalog.py > tests/data/everyday/tools.json

Run it with a Python that has the MCP SDK (`mcp`), `mcp-server-time` and `mcp-server-fetch`
installed (the versions below); the npm servers start through `npx -y` at the versions the
example config pins. Each server is started over stdio, listed once, and stopped. The output is
sorted by server, then in each server's own order, so a capture of the same versions gives the
same file.
"""

import asyncio
import json
import sys
import tempfile

from mcp import Client, StdioServerParameters

# The versions the set was captured from: examples/gateway.toml's, and the PyPI servers'.
NPM_VERSION = "2026.8.31"
PYPI_VERSIONS = {"mcp-server-time": "2026.10.19", "mcp-server-fetch": "2026.10.24"}


def servers(folder):
    npx = lambda package: ("npx", ["-y", f"@modelcontextprotocol/{package}@{NPM_VERSION}"])
    command, args = npx("server-filesystem")
    return [
        ("everything", *npx("server-everything")),
        ("memory", *npx("server-memory")),
        # The filesystem server serves one folder, as in the example config.
        ("filesystem", command, args + [folder]),
        ("time", sys.executable, ["-m", "mcp_server_time"]),
        ("fetch", sys.executable, ["-m", "mcp_server_fetch"]),
    ]


def check_versions():
    from importlib.metadata import version

    for package, wanted in PYPI_VERSIONS.items():
        found = version(package)
        if found != wanted:
            sys.exit(f"{package} is {found}; install {package}=={wanted} to capture the same catalog")


async def list_tools(command, args):
    params = StdioServerParameters(command=command, args=args)
    async with Client(params, mode="legacy", cache=None) as client:
        result = await client.list_tools(cache_mode="refresh")
        return [tool.model_dump(by_alias=True, exclude_none=True) for tool in result.tools]


async def main():
    check_versions()
    catalog = []
    with tempfile.TemporaryDirectory() as folder:
        for server, command, args in servers(folder):
            tools = await list_tools(command, args)
            print(f"{server}: {len(tools)} tools", file=sys.stderr)
            for tool in tools:
                # Only what a tools/list entry describes; `_meta` and `execution` are not read.
                kept = {k: tool[k] for k in ("name", "title", "description", "inputSchema", "annotations") if k in tool}
                catalog.append({**kept, "server": server})
    json.dump(catalog, sys.stdout, indent=1, ensure_ascii=False)
    print()


if __name__ == "__main__":
    asyncio.run(main())
