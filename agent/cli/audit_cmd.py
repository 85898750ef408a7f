"""`aidai audit show RUN`: a run's audit log (who approved what, every check run, every LLM call, limits, the
conclusion and exports) as a table, or as JSON with --json."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.cli.diagnose_cmd import EXIT_BAD_INPUT, DataDirOpt

app = typer.Typer(help="The append-only audit log of diagnosis runs.", no_args_is_help=True)


@app.callback()
def audit() -> None:
    """The append-only audit log of diagnosis runs (<data-dir>/runs/<run>.audit.jsonl)."""


def _row(event: dict[str, Any]) -> tuple[str, str, str, str, str]:
    """(who/where, what, result, detail) for one event; unknown kinds show their fields as JSON."""
    kind = event.get("event", "?")
    if kind == "check":
        where = event.get("host", "")
        result = event.get("verdict", "") if event.get("executed") else "not run"
        detail = (f"exit {event.get('exit_code')}, sha256 {str(event.get('output_sha256', ''))[:12]}, "
                  f"{float(event.get('duration_s') or 0):.1f} s, node {event.get('node') or 'ROOT'}")
        return kind, where, f"{event.get('check')} ({event.get('tier')})", result, detail
    if kind == "approval":
        return (kind, event.get("by", ""), f"{event.get('check')} ({event.get('tier')})",
                "approved" if event.get("approved") else "refused", f"{event.get('via')}, node {event.get('node')}")
    if kind == "llm":
        tokens = (event.get("prompt_tokens") or 0) + (event.get("completion_tokens") or 0)
        result = f"error: {event['error']}" if event.get("error") else f"{tokens} tokens"
        return (kind, event.get("model", ""), event.get("task", ""), result,
                f"prompt {event.get('prompt_version')}, sha256 {str(event.get('prompt_sha256', ''))[:12]}"
                f"{', redacted' if event.get('redacted') else ', NOT redacted'}")
    if kind in ("run", "resume"):
        limits = {k: v for k, v in (event.get("limits") or {}).items() if v is not None}
        detail = ", ".join(f"{k}={v}" for k, v in [("approval", event.get("approval")),
                                                   ("reasoner", event.get("reasoner")), ("model", event.get("model")),
                                                   ("prompt", event.get("prompt_version")), *limits.items()] if v)
        return kind, event.get("operator", ""), ", ".join(event.get("hosts") or []), "", detail
    if kind == "stopped":
        return kind, "", event.get("node", ""), event.get("limit", ""), event.get("message", "")
    if kind == "conclusion":
        stopped = event.get("stopped") or {}
        return (kind, "", ", ".join(event.get("root_causes") or []) or "no root cause",
                "resolved" if event.get("resolved") else "unresolved",
                f"pipeline {event.get('pipeline')}" + (f", stopped: {stopped.get('limit')}" if stopped else ""))
    if kind == "export":
        return (kind, event.get("by", ""), event.get("target", ""), str(event.get("result", "")),
                event.get("detail", ""))
    rest = {k: v for k, v in event.items() if k not in ("ts", "run_id", "seq", "event")}
    return kind, "", "", "", json.dumps(rest, default=str)[:300]


def audit_table(run_id: str, events: list[dict[str, Any]]) -> Table:
    table = Table(title=f"audit log of run {escape(run_id)}", expand=True, show_lines=False)
    for name, style in (("#", "dim"), ("time (UTC)", "dim"), ("event", "bold"), ("who / host", ""), ("what", "cyan"),
                        ("result", ""), ("detail", "dim")):
        table.add_column(name, style=style or None, overflow="fold")
    for event in events:
        kind, who, what, result, detail = _row(event)
        style = {"FAIL": "red", "refused": "yellow", "not run": "magenta", "approved": "green", "PASS": "green",
                 "resolved": "green", "unresolved": "yellow"}.get(result, "")
        table.add_row(str(event.get("seq", "")), str(event.get("ts", ""))[:23].replace("T", " "), escape(kind),
                      escape(str(who)), escape(str(what)),
                      f"[{style}]{escape(result)}[/]" if style else escape(result), escape(str(detail)))
    return table


@app.command("show")
def show(
    run: Annotated[str, typer.Argument(metavar="RUN", help="The run id (printed at the end of `aidai diagnose`).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the events as a JSON array.")] = False,
    data_dir: DataDirOpt = None,
) -> None:
    """Show a run's audit log: approvals (who, how), checks (host, verdict, exit code, output hash), LLM calls
    (model, prompt version, tokens), limits and the conclusion."""
    from agent.audit import AuditError, audit_path, read
    from agent.diagnosis import DiagnoseOptions, runs_dir

    err = Console(stderr=True, emoji=False)
    try:
        path = audit_path(runs_dir(DiagnoseOptions(data_dir=str(data_dir) if data_dir else None)), run)
        events, problems = read(path)
    except AuditError as exc:
        err.print(f"[red]error: {escape(str(exc))}[/]", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    for problem in problems:
        err.print(f"[yellow]warning: {escape(str(path))} {escape(problem)}[/]", highlight=False, soft_wrap=True)
    if as_json:
        print(json.dumps(events, indent=1, default=str))
        return
    Console(emoji=False).print(audit_table(run, events))

