"""An MCP server behind OAuth on the official Python SDK: its authorization-server routes
(metadata, dynamic registration, authorize, token with PKCE, refresh, revocation) and its
protected-resource metadata and bearer checks, with an in-memory provider that approves every
sign-in at once. Access tokens live TOKEN_LIFETIME seconds; refresh tokens rotate. Every token
grant and revocation is appended to LOG as one JSON line, for the test to read.

    python oauth_server.py PORT TOKEN_LIFETIME LOG
"""

import json
import secrets
import sys
import time

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthToken

PORT = int(sys.argv[1])
LIFETIME = int(sys.argv[2])
LOG = sys.argv[3]
BASE = f"http://localhost:{PORT}"


def record(event, **fields):
    with open(LOG, "a") as f:
        f.write(json.dumps({"event": event, **fields}) + "\n")


class ApproveAll:
    def __init__(self):
        self.clients, self.codes, self.access, self.refresh = {}, {}, {}, {}

    async def get_client(self, client_id):
        return self.clients.get(client_id)

    async def register_client(self, client_info):
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client, params):
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client, authorization_code):
        return self.codes.get(authorization_code)

    def issue(self, client_id, scopes, resource, grant):
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        expires = int(time.time()) + LIFETIME
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires, resource=resource
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        record(grant, access=access, resource=resource)
        return OAuthToken(
            access_token=access,
            expires_in=LIFETIME,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )

    async def exchange_authorization_code(self, client, authorization_code):
        self.codes.pop(authorization_code.code, None)
        return self.issue(
            client.client_id,
            authorization_code.scopes,
            authorization_code.resource,
            "authorization_code",
        )

    async def load_refresh_token(self, client, refresh_token):
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(self, client, refresh_token, scopes):
        self.refresh.pop(refresh_token.token, None)
        return self.issue(
            client.client_id, scopes or refresh_token.scopes, refresh_token.resource, "refresh_token"
        )

    async def load_access_token(self, token):
        found = self.access.get(token)
        if found is None or (found.expires_at and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token):
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)
        record("revoked", token=token.token)


server = MCPServer(
    "oauth-peer",
    auth_server_provider=ApproveAll(),
    auth=AuthSettings(
        issuer_url=BASE,
        resource_server_url=f"{BASE}/mcp",
        client_registration_options=ClientRegistrationOptions(enabled=True),
        revocation_options=RevocationOptions(enabled=True),
        validate_token_resource=False,
    ),
)


@server.tool()
def greet(name: str) -> str:
    """Greet someone by name."""
    return f"Hello, {name}!"


server.run(transport="streamable-http", host="127.0.0.1", port=PORT)
