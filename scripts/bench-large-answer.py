#!/usr/bin/env python3
"""How long a large upstream answer takes through the gateway, and what the gateway's memory peaks
at: `toolsearch serve --http` in front of a stdio server whose `large_text` answers with N million
bytes of text, one MCP session over HTTP, `tools/call` of `large_text` timed from the post to the
end of the gateway's answer (an offloaded result, or the error for an answer over the 64 MiB the
gateway reads). Standard library only.

    python3 scripts/bench-large-answer.py --binary target/release/toolsearch \\
        [--upstream raw|sdk] [--python .test-peers/venv/bin/python] [--megabytes 50] [--runs 5]

`--upstream raw` (the default) is this script as a bare stdio MCP server that writes an answer
it prepared once, so the time is the gateway's; `sdk` is tests/clients/large_answer_server.py on
the official Python SDK (with `--python`, a Python that has it), which itself takes seconds to
write 50 MB.

Prints one line per run and the median; then the gateway's peak resident memory (VmHWM) and its
resident memory at the end (VmRSS), from /proc (Linux).
"""

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "..", "crates", "toolsearch-cli", "tests", "clients", "large_answer_server.py")


def post(conn, path, headers, message):
    conn.request("POST", path, body=json.dumps(message).encode(), headers=headers)
    response = conn.getresponse()
    body = response.read()
    if response.status >= 300:
        sys.exit(f"{message.get('method')}: HTTP {response.status}: {body[:500]!r}")
    return response, body


def answer_of(body):
    """The JSON-RPC message of a JSON body or of the last `data:` line of an SSE body."""
    text = body.decode()
    if text.lstrip().startswith("{"):
        return json.loads(text)
    data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    return json.loads([d for d in data if d][-1])


def memory(pid):
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return {key: fields[key].strip() for key in ("VmHWM", "VmRSS")}


def serve_raw():
    """A bare stdio MCP server with one tool, `large_text`, whose answers are prepared once per size."""
    lines = {}
    line = "line {:06d} lorem ipsum dolor sit amet, consectetur adipiscing elit\n"
    for raw in sys.stdin:
        message = json.loads(raw)
        request_id, method = message.get("id"), message.get("method")
        if request_id is None:
            continue
        if method == "initialize":
            result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                      "serverInfo": {"name": "bench-large-answer", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [{"name": "large_text", "description": "Answers with N million bytes of text",
                                 "inputSchema": {"type": "object", "properties": {"megabytes": {"type": "number"}}}}]}
        elif method == "tools/call":
            size = int(message["params"]["arguments"]["megabytes"] * 1_000_000)
            if size not in lines:
                text = "".join(line.format(i) for i in range(size // len(line.format(0)) + 1))[:size]
                lines[size] = json.dumps({"content": [{"type": "text", "text": text}]})
            sys.stdout.write(f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},"result":{lines[size]}}}\n')
            sys.stdout.flush()
            continue
        else:
            result = {}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n")
        sys.stdout.flush()


def main():
    if "--serve-raw" in sys.argv:
        serve_raw()
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--upstream", choices=["raw", "sdk"], default="raw")
    parser.add_argument("--python", default=sys.executable, help="for `sdk`: a Python with the MCP SDK")
    parser.add_argument("--megabytes", type=float, default=50)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if args.upstream == "raw":
        command, server_args = sys.executable, [os.path.abspath(__file__), "--serve-raw"]
    else:
        command, server_args = os.path.abspath(args.python), [os.path.abspath(SERVER)]

    folder = tempfile.mkdtemp(prefix="bench-large-answer-")
    config = os.path.join(folder, "gateway.toml")
    with open(config, "w") as out:
        out.write(
            f"[mcpServers.large]\ncommand = {json.dumps(command)}\nargs = {json.dumps(server_args)}\n\n"
            "[toolSearch]\ncallTimeoutSecs = 300\n\n"
            # No model: the memory figures are the answer's alone.
            "[toolSearch.semantic]\nenabled = false\n"
        )
    gateway = subprocess.Popen(
        [args.binary, "serve", "--config", config, "--http", "127.0.0.1:0", "--wait-for-upstreams"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        url = None
        for line in gateway.stderr:
            found = re.search(r"listening on (http://\S+)", line)
            if found:
                url = found.group(1)
                break
        if url is None:
            sys.exit("the gateway exited without listening")
        threading.Thread(target=lambda: [None for _ in gateway.stderr], daemon=True).start()
        split = urllib.parse.urlsplit(url if url.rstrip("/").endswith("/mcp") else url.rstrip("/") + "/mcp")
        conn = http.client.HTTPConnection(split.hostname, split.port)
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        response, _ = post(conn, split.path, headers, {
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "bench-large-answer", "version": "1"}},
        })
        headers["Mcp-Session-Id"] = response.getheader("Mcp-Session-Id")
        headers["MCP-Protocol-Version"] = "2025-11-25"
        post(conn, split.path, headers, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        print(f"gateway pid {gateway.pid}, before: {memory(gateway.pid)}")
        times = []
        for run in range(1, args.runs + 1):
            call = {"jsonrpc": "2.0", "id": run, "method": "tools/call", "params": {
                "name": "call_tool",
                "arguments": {"name": "large___large_text", "arguments": {"megabytes": args.megabytes}},
            }}
            start = time.perf_counter()
            _, body = post(conn, split.path, headers, call)
            elapsed = time.perf_counter() - start
            result = answer_of(body).get("result", {})
            offloaded = (result.get("structuredContent") or {}).get("offloaded")
            said = (f"offloaded as {offloaded['handle']}, {offloaded['bytes']} bytes kept"
                    if offloaded else (result.get("content") or [{}])[0].get("text", "")[:160])
            print(f"run {run}: {elapsed:.3f} s; {said}")
            times.append(elapsed)
        print(f"median {statistics.median(times):.3f} s over {len(times)} runs of {args.megabytes} MB")
        print(f"gateway memory: {memory(gateway.pid)}")
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)


if __name__ == "__main__":
    main()
