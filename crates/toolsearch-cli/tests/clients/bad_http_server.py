"""A Streamable HTTP MCP server written by hand (a bare ASGI app under uvicorn), for the gateway's
tests of bad answers: it answers `initialize`, `tools/list` and `tools/call` as a server should,
except for the tools whose answer is bad on purpose. It listens at /mcp on a free port of
127.0.0.1 and prints the port on stdout.

    python bad_http_server.py [--port PORT] [--tls DIR] [--token TOKEN [--weak-token WEAK] [--refusals FILE]]

With `--tls DIR`, it serves HTTPS with a self-signed certificate for `localhost` it writes to DIR.

With `--token`, every request must carry `Authorization: Bearer TOKEN`: none gets 401 with a
`WWW-Authenticate: Bearer` challenge, another token 401 without one, `WEAK` 403 with an
`insufficient_scope` challenge naming scope `tools:call`; each refusal adds a line to FILE.

Tools:
- `echo(text)`: the text back (a JSON body);
- `initializations()`: how many `initialize` requests the server has answered, as text;
- `http_500()`: HTTP 500 with a plain-text body;
- `html_page()`: HTTP 200 with an HTML page;
- `oversize_json(megabytes)`: a JSON answer of that many million bytes as one JSON body;
- `large_event(megabytes)`: a JSON answer of that many million bytes as one SSE event;
- `exit_midway()`: the server process exits while the call waits for its answer.
"""

import asyncio
import json
import os
import socket
import sys

import uvicorn

STATE = {"initializations": 0}
SESSION = "bad-http-session-1"

TOOLS = [
    {"name": name, "description": description, "inputSchema": {"type": "object", "properties": props}}
    for name, description, props in [
        ("echo", "Echoes the text back", {"text": {"type": "string"}}),
        ("initializations", "How many initialize requests the server answered", {}),
        ("http_500", "Answers with HTTP 500", {}),
        ("html_page", "Answers with an HTML page", {}),
        ("oversize_json", "Answers with a large JSON body", {"megabytes": {"type": "number"}}),
        ("large_event", "Answers with a large SSE event", {"megabytes": {"type": "number"}}),
        ("exit_midway", "Exits the server while the call waits", {}),
    ]
]


def text_result(request_id, text):
    return {"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": text}]}}


def filler(megabytes):
    size = int(megabytes * 1_000_000)
    line = "lorem ipsum dolor sit amet, consectetur adipiscing elit\n"
    return (line * (size // len(line) + 1))[:size]


async def read_body(receive):
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def respond(send, status, content_type, body, headers=()):
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", content_type.encode()), (b"mcp-session-id", SESSION.encode())]
        + [(k.encode(), v.encode()) for k, v in headers],
    })
    await send({"type": "http.response.body", "body": body})


async def answer(send, message):
    await respond(send, 200, "application/json", json.dumps(message).encode())


def option(name):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


TOKEN = option("--token")
WEAK = option("--weak-token")
REFUSALS = option("--refusals")


async def refused(scope, send):
    """Refuses a request without the token, as the options say; False when it may pass."""
    if TOKEN is None:
        return False
    given = dict(scope["headers"]).get(b"authorization", b"").decode()
    if given == f"Bearer {TOKEN}":
        return False
    if REFUSALS:
        with open(REFUSALS, "a") as f:
            f.write(f"{scope['method']} {given[:7]}\n")
    if given == f"Bearer {WEAK}":
        challenge = 'Bearer error="insufficient_scope", scope="tools:call"'
        await respond(send, 403, "text/plain", b"forbidden", [("www-authenticate", challenge)])
    elif not given:
        await respond(send, 401, "text/plain", b"unauthorized", [("www-authenticate", 'Bearer realm="bad-http"')])
    else:
        await respond(send, 401, "text/plain", b"unauthorized")
    return True


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if await refused(scope, send):
        await read_body(receive)
        return
    if scope["path"] != "/mcp":
        await respond(send, 404, "text/plain", b"not found")
        return
    if scope["method"] == "GET":
        await respond(send, 405, "text/plain", b"no server stream")
        return
    if scope["method"] == "DELETE":
        await respond(send, 200, "text/plain", b"")
        return
    message = json.loads(await read_body(receive))
    method = message.get("method")
    request_id = message.get("id")
    if request_id is None:
        await respond(send, 202, "text/plain", b"")
        return
    if method == "initialize":
        STATE["initializations"] += 1
        await answer(send, {"jsonrpc": "2.0", "id": request_id, "result": {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "bad-http-test-server", "version": "1.0.0"},
        }})
        return
    if method == "tools/list":
        await answer(send, {"jsonrpc": "2.0", "id": request_id, "result": {"tools": TOOLS}})
        return
    if method == "ping":
        await answer(send, {"jsonrpc": "2.0", "id": request_id, "result": {}})
        return
    if method != "tools/call":
        await answer(send, {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "no such method"}})
        return
    name = message["params"]["name"]
    args = message["params"].get("arguments") or {}
    if name == "echo":
        await answer(send, text_result(request_id, args.get("text", "")))
    elif name == "initializations":
        await answer(send, text_result(request_id, str(STATE["initializations"])))
    elif name == "http_500":
        await respond(send, 500, "text/plain", b"Internal Server Error: the database is on fire")
    elif name == "html_page":
        await respond(send, 200, "text/html; charset=utf-8", b"<!doctype html><html><body><h1>Bad Gateway</h1></body></html>")
    elif name == "oversize_json":
        await answer(send, text_result(request_id, filler(args.get("megabytes", 20))))
    elif name == "exit_midway":
        os._exit(3)
    elif name == "large_event":
        data = json.dumps(text_result(request_id, filler(args.get("megabytes", 50))))
        await respond(send, 200, "text/event-stream", f"event: message\ndata: {data}\n\n".encode())
    else:
        await answer(send, {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": f"unknown tool {name}"}})


async def main():
    port = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else 0
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # A server started again on the port of one that was killed.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    # Listening before the port is told: a client that connects at once queues in the backlog.
    sock.listen(128)
    print(sock.getsockname()[1], flush=True)
    tls = {}
    if option("--tls"):
        tls = dict(zip(["ssl_certfile", "ssl_keyfile"], self_signed(option("--tls"))))
    config = uvicorn.Config(app, log_level="warning", **tls)
    await uvicorn.Server(config).serve(sockets=[sock])


def self_signed(folder):
    """A key and a self-signed certificate for `localhost`, written to `folder`."""
    import datetime
    import os

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return cert_path, key_path


if __name__ == "__main__":
    asyncio.run(main())
