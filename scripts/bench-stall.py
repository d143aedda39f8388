#!/usr/bin/env python3
"""How much one session's heavy request delays another session's ping: `toolsearch serve --http`
(preset `add`, no model) in front of a bare stdio MCP server that lists N generated tools and
answers `large_text` with N million bytes; session A sends one kind of heavy request again and
again while session B pings in a loop on its own connection. Standard library only.

    python3 scripts/bench-stall.py --binary target/release/toolsearch \\
        [--tools 5000] [--case unknown-name|add-tool|search-output|all] [--chars 300000] \\
        [--megabytes 12] [--pattern "lorem elit"] [--mode words|regex] [--requests 5]

Cases (session A):
- `unknown-name`: `tools/call` of an unknown tool whose name is `--chars` characters long;
- `add-tool`: `add_tool` with one name of 50,000 characters;
- `search-output`: `search_large_output` of `--pattern` (`--mode`, by default the words
  "lorem elit", on every line) over a stored output of `--megabytes` MB.

For each case prints B's ping round trips while A is idle (baseline) and while A's requests run
(p50, p99, max), the delay (max while busy minus the baseline's p50), and A's answers' times and
first words.
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

VERBS = ["create", "list", "update", "delete", "export"]


def serve_raw(count):
    """A bare stdio MCP server: `count` generated tools and `large_text`."""
    tools = [{"name": f"{VERBS[i % len(VERBS)]}_record_{i:05d}",
              "description": f"{VERBS[i % len(VERBS)]} one record of table {i}",
              "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}}
             for i in range(count)]
    tools.append({"name": "large_text", "description": "Answers with N million bytes of text",
                  "inputSchema": {"type": "object", "properties": {"megabytes": {"type": "number"}}}})
    line = "line {:06d} lorem ipsum dolor sit amet, consectetur adipiscing elit\n"
    for raw in sys.stdin:
        message = json.loads(raw)
        request_id, method = message.get("id"), message.get("method")
        if request_id is None:
            continue
        if method == "initialize":
            result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                      "serverInfo": {"name": "bench-stall", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": tools}
        elif method == "tools/call":
            size = int(message["params"]["arguments"].get("megabytes", 1) * 1_000_000)
            text = "".join(line.format(i) for i in range(size // len(line.format(0)) + 1))[:size]
            result = {"content": [{"type": "text", "text": text}]}
        else:
            result = {}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n")
        sys.stdout.flush()


def answer_of(body):
    """The JSON-RPC message of a JSON body or of the last `data:` line of an SSE body."""
    text = body.decode()
    if text.lstrip().startswith("{"):
        return json.loads(text)
    data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    return json.loads([d for d in data if d][-1])


class Session:
    """One MCP session over its own keep-alive connection."""

    def __init__(self, host, port, path):
        self.conn = http.client.HTTPConnection(host, port)
        self.path = path
        self.headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        self.next_id = 1
        response, _ = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bench-stall", "version": "1"}}})
        self.headers["Mcp-Session-Id"] = response.getheader("Mcp-Session-Id")
        self.headers["MCP-Protocol-Version"] = "2025-11-25"
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, message):
        self.conn.request("POST", self.path, body=json.dumps(message).encode(), headers=self.headers)
        response = self.conn.getresponse()
        body = response.read()
        if response.status >= 300:
            sys.exit(f"{message.get('method')}: HTTP {response.status}: {body[:300]!r}")
        return response, body

    def request(self, method, params=None):
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        _, body = self.post(message)
        return answer_of(body)

    def call(self, name, arguments):
        return self.request("tools/call", {"name": name, "arguments": arguments})


def pings(session, stop, out):
    while not stop.is_set():
        start = time.perf_counter()
        session.request("ping")
        out.append(time.perf_counter() - start)


def summary(times):
    if not times:
        return {"n": 0, "p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    ordered = sorted(times)
    p = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000
    return {"n": len(ordered), "p50_ms": round(p(0.5), 2), "p99_ms": round(p(0.99), 2),
            "max_ms": round(ordered[-1] * 1000, 2)}


def run_case(case, args, host, port, path):
    a, b = Session(host, port, path), Session(host, port, path)
    if case == "unknown-name":
        prefix = "create_record_"
        heavy = lambda: a.call(prefix + "x" * max(0, args.chars - len(prefix)), {})
    elif case == "add-tool":
        heavy = lambda: a.call("add_tool", {"names": ["a" * 50_000]})
    else:
        stored = a.call("stall___large_text", {"megabytes": args.megabytes})["result"]
        handle = stored["structuredContent"]["offloaded"]["handle"]
        heavy = lambda: a.call("search_large_output",
                               {"handle": handle, "pattern": args.pattern, "mode": args.mode})
    baseline = []
    stop = threading.Event()
    pinger = threading.Thread(target=pings, args=(b, stop, baseline))
    pinger.start()
    time.sleep(1.0)
    stop.set()
    pinger.join()
    busy, answers = [], []
    stop = threading.Event()
    pinger = threading.Thread(target=pings, args=(b, stop, busy))
    pinger.start()
    for _ in range(args.requests):
        start = time.perf_counter()
        answer = heavy()
        elapsed = time.perf_counter() - start
        result = answer.get("result") or {}
        text = (result.get("content") or [{}])[0].get("text", "") or json.dumps(answer.get("error"))
        answers.append((elapsed, text[:100]))
    time.sleep(0.2)
    stop.set()
    pinger.join()
    base, during = summary(baseline), summary(busy)
    print(f"{case}: ping idle {base}; ping while A's requests run {during}; "
          f"delay (max - idle p50) {during['max_ms'] - base['p50_ms']:.2f} ms")
    print(f"  A: median {statistics.median(t for t, _ in answers) * 1000:.1f} ms over {len(answers)} "
          f"requests; answer: {answers[0][1]!r}")


def main():
    if "--serve-raw" in sys.argv:
        serve_raw(int(sys.argv[sys.argv.index("--serve-raw") + 1]))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--tools", type=int, default=5000)
    parser.add_argument("--case", choices=["unknown-name", "add-tool", "search-output", "all"], default="all")
    parser.add_argument("--chars", type=int, default=300_000)
    parser.add_argument("--megabytes", type=float, default=12)
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--pattern", default="lorem elit", help="for `search-output`")
    parser.add_argument("--mode", choices=["words", "regex"], default="words", help="for `search-output`")
    args = parser.parse_args()

    folder = tempfile.mkdtemp(prefix="bench-stall-")
    config = os.path.join(folder, "gateway.toml")
    with open(config, "w") as out:
        out.write(
            f"[mcpServers.stall]\ncommand = {json.dumps(sys.executable)}\n"
            f"args = {json.dumps([os.path.abspath(__file__), '--serve-raw', str(args.tools)])}\n\n"
            "[toolSearch]\npreset = \"add\"\ncallTimeoutSecs = 300\n\n"
            # No model: its indexing would take the cores the measurement needs.
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
        cases = ["unknown-name", "add-tool", "search-output"] if args.case == "all" else [args.case]
        for case in cases:
            run_case(case, args, split.hostname, split.port, split.path)
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)


if __name__ == "__main__":
    main()
