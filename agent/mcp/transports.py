"""The two ways `aidai mcp` is reached: stdio (the assistant starts it) and streamable HTTP (a shared server).

Both open the run store and run manager `aidai serve` opens on the same data dir, so their runs are the page's.
A run manager works only the runs it was given; `recover` (as `aidai serve` does at every start) also continues the
runs a killed server left queued or running, which only one server per data dir may do.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.auth.settings import AuthSettings
from starlette.applications import Starlette

from agent.mcp.auth import Identity, ServeTokens
from agent.mcp.server import McpSettings, build_server
from agent.server.app import server_dir
from agent.server.auth import LOCAL
from agent.server.config import Caller, ServerConfig
from agent.server.events import Broker
from agent.server.runs import RunManager
from agent.server.service import RunService
from agent.server.store import RunStore

PATH = "/mcp"


def open_service(config: ServerConfig) -> RunService:
    """The run store and manager of CONFIG's data dir (ConfigError for a setup `aidai serve` would refuse)."""
    config.check()
    store = RunStore(server_dir(config) / "server.sqlite")
    # nobody listens to the broker here (get_run polls the store), so it is never bound to a loop
    return RunService(config, store, RunManager(config, store, Broker()))


async def serve_stdio(service: RunService, caller: Caller, settings: McpSettings, *, recover: bool = False) -> None:
    """Serve one assistant over this process's stdin/stdout as CALLER, until stdin closes."""
    mcp = build_server(service, Identity(local=caller), settings)
    if recover:
        service.manager.recover()
    try:
        await mcp.run_stdio_async()
    finally:
        service.manager.shutdown()


def http_app(service: RunService, settings: McpSettings, *, recover: bool = False) -> Starlette:
    """The streamable HTTP app (endpoint /mcp). With tokens configured every request needs a bearer token from
    them (401 otherwise); without, ServerConfig.check has already kept the server on loopback and the caller is
    the operator `local`, as for `aidai serve`."""
    config = service.config
    tokens = ServeTokens(config.tokens) if config.tokens else None
    # The SDK enables bearer checks through AuthSettings, which must name an issuer: with no OAuth server and no
    # resource URL (no metadata route is published) the issuer is nowhere shown; the server's own URL is honest.
    auth = AuthSettings(issuer_url=f"http://{_url_host(config.host)}:{config.port}",  # type: ignore[arg-type]
                        resource_server_url=None) if tokens else None
    mcp = build_server(service, Identity(local=None if tokens else LOCAL), settings, tokens=tokens, auth=auth)
    app = mcp.streamable_http_app(streamable_http_path=PATH, host=config.host,
                                  max_request_body_size=config.max_upload_bytes)
    sessions = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(inner: Any) -> AsyncIterator[None]:
        if recover:
            service.manager.recover()
        try:
            async with sessions(inner):
                yield
        finally:
            service.manager.shutdown()

    app.router.lifespan_context = lifespan
    return app


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
