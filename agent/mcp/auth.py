"""Who calls the MCP server: `aidai serve`'s bearer tokens over HTTP, the configured local caller over stdio.

Over streamable HTTP the SDK's bearer middleware asks `ServeTokens` about every request and refuses (401) a missing
or unknown token before any tool runs; the caller's name and role travel as the access token's client id and
scope. A tool then asks `Identity.current()`. Without tokens (loopback only, as `aidai serve`) and over stdio the
caller is the one the server was started with. When tokens are configured and a request somehow carries none,
`current()` refuses rather than fall back to anyone.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

from agent.server.auth import match_token
from agent.server.config import ROLES, Caller
from agent.server.inputs import BadInput


class ServeTokens:
    """The SDK's TokenVerifier over the tokens file of `aidai serve` (agent/server/config.py)."""

    def __init__(self, tokens: dict[str, Caller]):
        self.tokens = tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        who = match_token(self.tokens, token)
        if who is None:
            return None
        return AccessToken(token=token, client_id=who.name, scopes=[who.role])


@dataclass(frozen=True)
class Identity:
    local: Caller | None  # the caller when no token is involved; None: every request must carry a token

    def current(self) -> Caller:
        token = get_access_token()
        if token is not None:
            role = next((r for r in reversed(ROLES) if r in token.scopes), None)
            if role is None:
                raise BadInput(f"token of {token.client_id} carries no aidai role", 403)
            return Caller(name=token.client_id, role=role)
        if self.local is None:
            raise BadInput("no bearer token reached this call: send `Authorization: Bearer TOKEN`", 401)
        return self.local
