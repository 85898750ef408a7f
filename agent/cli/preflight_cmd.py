"""`aidai preflight`: collect the environment, sign it, and check it against known-bad combinations."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from agent.executors.hosts import SPEC_HELP, HostSpecError
from agent.preflight import run

console = Console(emoji=False)
err = Console(stderr=True, emoji=False)
STYLE = {"FAIL": "bold red", "WARN": "yellow"}


def preflight(
    host: Annotated[list[str] | None, typer.Option("--host", help=SPEC_HELP + " (repeatable).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    timeout: Annotated[float, typer.Option(help="Per-check timeout cap, s.")] = 45.0,
) -> None:
    """Environment signature and known-bad combinations (driver vs CUDA, arch list, regressed versions, skew).
    Exit code 1 when a known-bad combination is found."""
    if timeout <= 0:
        err.print("[bold red]error:[/] --timeout must be positive")
        raise typer.Exit(2)
    try:
        report = run.run(host or ["local"], timeout_cap_s=timeout)
    except HostSpecError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None
    failed = any(f.severity == "FAIL" for f in report.findings)
    if as_json:
        print(json.dumps(report.model_dump(mode="json"), indent=1))
        raise typer.Exit(1 if failed else 0)
    table = Table(title="environment")
    cols = ("host", "gpu", "driver", "cuda", "torch", "nccl", "ofed", "toolkit", "signature")
    for col in cols:
        table.add_column(col)
    for env, sig in zip(report.hosts, report.signatures, strict=True):
        table.add_row(env.host, f"{env.gpu_count or '?'}x {env.gpu_model or '?'}", env.driver or "?",
                      env.cuda_runtime or "?", env.torch or "?", env.nccl or "?", env.ofed or "?",
                      env.container_toolkit or "?", sig.full)
    console.print(table)
    for f in report.findings:
        console.print(f"[{STYLE.get(f.severity, '')}]{f.severity}[/] {f.id} ({', '.join(f.hosts)}): {f.message} "
                      f"→ {f.label}")
    for h, checks in report.unavailable.items():
        for check, why in checks.items():
            console.print(f"[magenta]not collected[/] {h} {check}: {why}")
    if not report.findings:
        console.print("[green]no known-bad combination[/]")
    raise typer.Exit(1 if failed else 0)
