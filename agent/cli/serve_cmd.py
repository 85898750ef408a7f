"""`aidai serve`: the diagnosis API and the web page (agent/server). Exit code 2 on a bad configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from agent.cli.options import BaseUrlOpt, CheckpointUrlOpt, ChromaUrlOpt, DataDirOpt, ModelOpt, PrometheusOpt
from agent.executors.hosts import SPEC_HELP


def serve(
    host: Annotated[str, typer.Option("--host", help="Address to bind; anything but loopback needs tokens.")
                    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8080,
    target: Annotated[list[str] | None, typer.Option(
        "--target", metavar="SPEC", help=f"A host runs may check: {SPEC_HELP} (repeatable; default local). A run "
                                         "naming any other host is refused.")] = None,
    tokens: Annotated[Path | None, typer.Option(
        "--tokens", metavar="FILE", help="Bearer tokens, one `NAME ROLE TOKEN` per line, ROLE viewer|operator "
                                         "(env AIDAI_TOKENS_FILE; or AIDAI_TOKENS=NAME:ROLE:TOKEN,...).")] = None,
    workers: Annotated[int, typer.Option("--workers", help="Diagnoses running at once (more wait queued).")] = 4,
    max_upload_mb: Annotated[float, typer.Option("--max-upload-mb", help="Largest request body accepted (413 "
                                                                         "above).")] = 16.0,
    data_dir: DataDirOpt = None,
    chroma_url: ChromaUrlOpt = None,
    checkpoint_url: CheckpointUrlOpt = None,
    base_url: BaseUrlOpt = None,
    model: ModelOpt = None,
    prometheus: PrometheusOpt = None,
    no_history: Annotated[bool, typer.Option("--no-history", help="Skip pipeline 1 (similar past incidents).")
                          ] = False,
    kb_dir: Annotated[Path | None, typer.Option("--kb-dir", metavar="DIR",
                                                help="Markdown knowledge base to use instead of the bundled one.")
                      ] = None,
) -> None:
    """Serve the diagnosis API (OpenAPI at /openapi.json), the web page at http://HOST:PORT/ and the server's own
    metrics for Prometheus at /metrics (a bearer token once tokens are configured, like the API)."""
    err = Console(stderr=True, emoji=False)
    from agent.executors.hosts import HostSpecError, executors_for
    from agent.prometheus.client import PrometheusUrlError, check_url
    from agent.server.config import ConfigError, ServerConfig, load_tokens

    targets = list(target or ["local"])
    try:
        for spec in targets:  # a bad spec stops the start, not the first run
            for executor in executors_for([spec]):
                executor.close()
        config = ServerConfig(data_dir=str(data_dir) if data_dir else None, targets=targets,
                              tokens=load_tokens(tokens), host=host, port=port, workers=workers,
                              max_upload_bytes=int(max_upload_mb * 2**20), base_url=base_url, model=model,
                              kb_dir=str(kb_dir) if kb_dir else None, chroma_url=chroma_url,
                              checkpoint_url=checkpoint_url, history=not no_history,
                              prometheus=check_url(prometheus) if prometheus else None)
        config.check()
    except (ConfigError, HostSpecError, PrometheusUrlError) as exc:
        err.print(f"[red]error: {escape(str(exc))}[/]", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    import uvicorn

    from agent.server.app import create_app

    app = create_app(config)
    auth = f"{len(config.tokens)} token(s)" if config.tokens else "no token (loopback only)"
    err.print(f"aidai serve: http://{escape(host)}:{port}/ ({auth}; hosts: {escape(', '.join(targets))})",
              highlight=False, soft_wrap=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)
