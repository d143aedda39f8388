#!/usr/bin/env python3
"""One MCP session over one kept-alive HTTP connection: `initialize`, then N `search_tools` calls
one after the other; prints the calls per second. Standard library only.

    python3 scripts/bench-mcp-http.py --url http://127.0.0.1:8787/mcp [--calls 200] [--query "echo"]

The gateway must expose `search_tools` (preset `search`, and a catalog above `toolSearch.threshold`).
"""

import argparse
import http.client
import json
import sys
import time
import urllib.parse


def post(conn, path, headers, message):
    conn.request("POST", path, body=json.dumps(message).encode(), headers=headers)
    response = conn.getresponse()
    body = response.read().decode()
    if response.status >= 300:
        sys.exit(f"{message.get('method')}: HTTP {response.status}: {body}")
    return response, body


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--query", default="echo back a message")
    args = parser.parse_args()
    url = urllib.parse.urlsplit(args.url)
    conn = http.client.HTTPConnection(url.hostname, url.port)
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    response, _ = post(conn, url.path, headers, {
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}},
    })
    headers["Mcp-Session-Id"] = response.getheader("mcp-session-id")
    headers["Mcp-Protocol-Version"] = "2025-11-25"
    post(conn, url.path, headers, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    call = {"jsonrpc": "2.0", "method": "tools/call",
            "params": {"name": "search_tools", "arguments": {"query": args.query}}}
    # One call before timing, so that the connection and the session are warm.
    post(conn, url.path, headers, dict(call, id=1))
    started = time.perf_counter()
    for i in range(args.calls):
        _, body = post(conn, url.path, headers, dict(call, id=i + 2))
        if '"result"' not in body:
            sys.exit(f"search_tools failed: {body}")
    elapsed = time.perf_counter() - started
    print(f"{args.calls} search_tools calls on one kept-alive connection: "
          f"{args.calls / elapsed:.1f} calls/s ({1000 * elapsed / args.calls:.2f} ms per call)")


if __name__ == "__main__":
    main()
