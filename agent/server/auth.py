"""Bearer-token authentication and the two roles, as FastAPI dependencies."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from agent.server.config import Caller

bearer = HTTPBearer(auto_error=False, description="Token from the server's tokens file or AIDAI_TOKENS")
LOCAL = Caller(name="local", role="operator")  # no token configured: loopback only (ServerConfig.check)


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(status_code=401, detail=message, headers={"WWW-Authenticate": "Bearer"})


def caller(request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> Caller:
    tokens: dict[str, Caller] = request.app.state.config.tokens
    if not tokens:
        return LOCAL
    if credentials is None:
        raise _unauthorized("missing bearer token: send `Authorization: Bearer TOKEN`")
    found = match_token(tokens, credentials.credentials)
    if found is None:
        raise _unauthorized("invalid bearer token")
    return found


def match_token(tokens: dict[str, Caller], given: str) -> Caller | None:
    """Who `given` is, or None; compared with every token in constant time (no early exit on a match)."""
    found = None
    for token, who in tokens.items():
        if hmac.compare_digest(token.encode(), given.encode()):
            found = who
    return found


def operator(who: Annotated[Caller, Depends(caller)]) -> Caller:
    if not who.operator:
        raise HTTPException(status_code=403, detail=f"{who.name} is a viewer: approving active checks needs the "
                                                    "operator role")
    return who


Viewer = Annotated[Caller, Depends(caller)]  # any valid token
Operator = Annotated[Caller, Depends(operator)]
