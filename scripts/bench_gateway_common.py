"""What scripts/bench-large-answer.py and scripts/bench-stall.py share: a gateway started on a free
loopback port, an MCP session over one keep-alive connection, and a bare stdio MCP server whose
`large_text` tool answers with N million bytes. Standard library only."""

import http.client
import json
import re
import subprocess
import sys
import threading
import urllib.parse

LARGE_TEXT_TOOL = {"name": "large_text", "description": "Answers with N million bytes of text",
                   "inputSchema": {"type": "object", "properties": {"megabytes": {"type": "number"}}}}
_LINE = "line {:06d} lorem ipsum dolor sit amet, consectetur adipiscing elit\n"


def large_text(size):
    """`size` bytes of numbered lines."""
    return "".join(_LINE.format(i) for i in range(size // len(_LINE.format(0)) + 1))[:size]


def serve_raw(name, tools, call):
    """A bare stdio MCP server named `name` listing `tools`; `call(request_id, arguments)` writes a
    `tools/call` answer line itself, or returns a result to be written."""
    for raw in sys.stdin:
        message = json.loads(raw)
        request_id, method = message.get("id"), message.get("method")
        if request_id is None:
            continue
        if method == "initialize":
            result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                      "serverInfo": {"name": name, "version": "1"}}
        elif method == "tools/list":
            result = {"tools": tools}
        elif method == "tools/call":
            result = call(request_id, message["params"].get("arguments") or {})
            if result is None:
                continue
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


def start_gateway(binary, config):
    """`binary serve --config config` on a free loopback port, its upstreams ready; the process and
    the (host, port, path) of its MCP endpoint. Its stderr is drained on a thread."""
    gateway = subprocess.Popen(
        [binary, "serve", "--config", config, "--http", "127.0.0.1:0", "--wait-for-upstreams"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    url = None
    for line in gateway.stderr:
        found = re.search(r"listening on (http://\S+)", line)
        if found:
            url = found.group(1)
            break
    if url is None:
        gateway.wait()
        sys.exit("the gateway exited without listening")
    threading.Thread(target=lambda: [None for _ in gateway.stderr], daemon=True).start()
    split = urllib.parse.urlsplit(url if url.rstrip("/").endswith("/mcp") else url.rstrip("/") + "/mcp")
    return gateway, (split.hostname, split.port, split.path)


class Session:
    """One MCP session over its own keep-alive connection."""

    def __init__(self, endpoint, client_name):
        host, port, self.path = endpoint
        self.conn = http.client.HTTPConnection(host, port)
        self.headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        self.next_id = 1
        response, _ = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": client_name, "version": "1"}}})
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
