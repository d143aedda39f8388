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
import json
import os
import statistics
import sys
import tempfile
import threading
import time

from bench_gateway_common import LARGE_TEXT_TOOL, Session, large_text, start_gateway
from bench_gateway_common import serve_raw as serve_raw_stdio

VERBS = ["create", "list", "update", "delete", "export"]


def serve_raw(count):
    """A bare stdio MCP server: `count` generated tools and `large_text`."""
    tools = [{"name": f"{VERBS[i % len(VERBS)]}_record_{i:05d}",
              "description": f"{VERBS[i % len(VERBS)]} one record of table {i}",
              "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}}
             for i in range(count)]
    tools.append(LARGE_TEXT_TOOL)
    serve_raw_stdio("bench-stall", tools, lambda _id, arguments: {
        "content": [{"type": "text", "text": large_text(int(arguments.get("megabytes", 1) * 1_000_000))}]})


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


def run_case(case, args, endpoint):
    a, b = Session(endpoint, "bench-stall"), Session(endpoint, "bench-stall")
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
    gateway, endpoint = start_gateway(args.binary, config)
    try:
        cases = ["unknown-name", "add-tool", "search-output"] if args.case == "all" else [args.case]
        for case in cases:
            run_case(case, args, endpoint)
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)


if __name__ == "__main__":
    main()
