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
import json
import os
import statistics
import sys
import tempfile
import time

from bench_gateway_common import LARGE_TEXT_TOOL, Session, answer_of, large_text, start_gateway
from bench_gateway_common import serve_raw as serve_raw_stdio

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "..", "crates", "toolsearch-cli", "tests", "clients", "large_answer_server.py")


def memory(pid):
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return {key: fields[key].strip() for key in ("VmHWM", "VmRSS")}


def serve_raw():
    """A bare stdio MCP server with one tool, `large_text`, whose answers are prepared once per size."""
    answers = {}

    def call(request_id, arguments):
        size = int(arguments["megabytes"] * 1_000_000)
        if size not in answers:
            answers[size] = json.dumps({"content": [{"type": "text", "text": large_text(size)}]})
        # Written as prepared: the time measured is the gateway's, not this server's encoding.
        sys.stdout.write(f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},"result":{answers[size]}}}\n')
        sys.stdout.flush()

    serve_raw_stdio("bench-large-answer", [LARGE_TEXT_TOOL], call)


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
    gateway, endpoint = start_gateway(args.binary, config)
    try:
        session = Session(endpoint, "bench-large-answer")
        print(f"gateway pid {gateway.pid}, before: {memory(gateway.pid)}")
        times = []
        for run in range(1, args.runs + 1):
            call = {"jsonrpc": "2.0", "id": run, "method": "tools/call", "params": {
                "name": "call_tool",
                "arguments": {"name": "large___large_text", "arguments": {"megabytes": args.megabytes}},
            }}
            start = time.perf_counter()
            _, body = session.post(call)
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
