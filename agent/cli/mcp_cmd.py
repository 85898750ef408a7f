"""`aidai mcp`: the MCP server (agent/mcp) over stdio or streamable HTTP. Exit code 2 on a bad configuration."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from agent.cli.options import BaseUrlOpt, CheckpointUrlOpt, ChromaUrlOpt, DataDirOpt, ModelOpt
from agent.executors.hosts import SPEC_HELP


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


class Role(StrEnum):
    viewer = "viewer"
    operator = "operator"


def mcp(
    transport: Annotated[Transport, typer.Option("--transport", help="stdio (an assistant starts `aidai mcp` "
                                                                     "itself) or http (streamable HTTP at "
                                                                     "http://HOST:PORT/mcp).")] = Transport.stdio,
    target: Annotated[list[str] | None, typer.Option(
        "--target", metavar="SPEC", help=f"A host the tools may check: {SPEC_HELP} (repeatable; default local). "
                                         "Any other host is refused.")] = None,
    allow_active: Annotated[bool, typer.Option(
        "--allow-active", help="Let operators approve active and intrusive checks (GPU/network load tests); "
                               "without it only passive checks ever run.")] = False,
    role: Annotated[Role, typer.Option("--role", help="stdio: the caller's role (a viewer cannot approve active "
                                                      "checks).")] = Role.operator,
    name: Annotated[str | None, typer.Option("--name", help="stdio: the caller's name in runs and audit logs "
                                                            "(default: the OS user).")] = None,
    host: Annotated[str, typer.Option("--host", help="http: address to bind; anything but loopback needs "
                                                     "tokens.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="http: TCP port.")] = 8090,
    tokens: Annotated[Path | None, typer.Option(
        "--tokens", metavar="FILE", help="http: bearer tokens, one `NAME ROLE TOKEN` per line, ROLE viewer|operator "
                                         "(env AIDAI_TOKENS_FILE; or AIDAI_TOKENS=NAME:ROLE:TOKEN,...); the same "
                                         "file as `aidai serve`.")] = None,
    recover: Annotated[bool, typer.Option(
        "--recover", help="Also continue the runs a killed server left queued or running (what `aidai serve` "
                          "does at start): only when no other aidai server uses this data dir.")] = False,
    workers: Annotated[int, typer.Option("--workers", help="Diagnoses running at once (more wait queued).")] = 2,
    data_dir: DataDirOpt = None,
    chroma_url: ChromaUrlOpt = None,
    checkpoint_url: CheckpointUrlOpt = None,
    base_url: BaseUrlOpt = None,
    model: ModelOpt = None,
    no_history: Annotated[bool, typer.Option("--no-history", help="Skip pipeline 1 (similar past incidents).")
                          ] = False,
    kb_dir: Annotated[Path | None, typer.Option("--kb-dir", metavar="DIR",
                                                help="Markdown knowledge base to use instead of the bundled one.")
                      ] = None,
) -> None:
    """Serve aidai to MCP clients (assistants): list and run checks, start and follow diagnoses, approve, answer,
    fetch tickets, search past incidents and the taxonomy. Runs share the data dir with `aidai serve`."""
    err = Console(stderr=True, emoji=False)
    from agent.audit import local_user
    from agent.executors.hosts import HostSpecError, executors_for
    from agent.server.config import Caller, ConfigError, ServerConfig, load_tokens

    targets = list(target or ["local"])
    try:
        for spec in targets:  # a bad spec stops the start, not the first call
            for executor in executors_for([spec]):
                executor.close()
        loaded = load_tokens(tokens) if transport is Transport.http else {}
        if transport is Transport.stdio and tokens is not None:
            raise ConfigError("--tokens applies to --transport http; over stdio the caller is --name/--role")
        config = ServerConfig(data_dir=str(data_dir) if data_dir else None, targets=targets, tokens=loaded,
                              host=host if transport is Transport.http else "127.0.0.1", port=port, workers=workers,
                              base_url=base_url, model=model, kb_dir=str(kb_dir) if kb_dir else None,
                              chroma_url=chroma_url, checkpoint_url=checkpoint_url, history=not no_history)
        from agent.mcp.server import McpSettings
        from agent.mcp.transports import open_service

        service = open_service(config)  # checks the config as `aidai serve` does
    except (ConfigError, HostSpecError) as exc:
        err.print(f"[red]error: {escape(str(exc))}[/]", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    settings = McpSettings(allow_active=allow_active)
    active = "active checks allowed (operator approval)" if allow_active else "passive checks only"
    if transport is Transport.stdio:
        import anyio

        from agent.mcp.transports import serve_stdio

        caller = Caller(name=name or local_user(), role=role.value)
        err.print(f"aidai mcp: stdio as {escape(caller.name)} ({caller.role}; {active}; hosts: "
                  f"{escape(', '.join(targets))})", highlight=False, soft_wrap=True)
        anyio.run(lambda: serve_stdio(service, caller, settings, recover=recover))
        return
    import uvicorn

    from agent.mcp.transports import PATH, http_app

    app = http_app(service, settings, recover=recover)
    auth = f"{len(config.tokens)} token(s)" if config.tokens else "no token (loopback only)"
    err.print(f"aidai mcp: http://{escape(host)}:{port}{PATH} ({auth}; {active}; hosts: {escape(', '.join(targets))})",
              highlight=False, soft_wrap=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)
