"""`aidai audit show RUN`: a run's audit log (who approved what, every check run, every LLM call, limits, the
conclusion and exports) as a table, or as JSON with --json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.cli.options import EXIT_BAD_INPUT, DataDirOpt

app = typer.Typer(help="The append-only audit log of diagnosis runs.", no_args_is_help=True)


@app.callback()
def audit() -> None:
    """The append-only audit log of diagnosis runs (<data-dir>/runs/<run>.audit.jsonl), and of Slurm drains and
    resumes outside a run (`aidai audit show fleet-actions`)."""


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
                f"{event.get('format') or 'json_schema'}, prompt {event.get('prompt_version')}, "
                f"sha256 {str(event.get('prompt_sha256', ''))[:12]}"
                f"{', redacted' if event.get('redacted') else ', NOT redacted'}")
    if kind == "llm_fallback":
        return (kind, event.get("model", ""), event.get("task", ""), f"answered by {event.get('answered_by')}",
                f"cause: {event.get('cause')}")
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
    if kind == "slurm":  # a drain or resume of a Slurm node (agent/slurm/drain.py)
        detail = event.get("detail") or f"{event.get('state_before', '')} -> {event.get('state_after', '')}"
        forced = " (forced)" if event.get("forced") else ""
        return (kind, event.get("by", ""), f"{event.get('action')} {event.get('node')}{forced}: "
                f"{event.get('reason', '')}", str(event.get("result", "")), detail)
    if kind == "evidence_bundle":
        if event.get("error"):
            return kind, "", "not written", "error", event["error"]
        return (kind, "", Path(str(event.get("path", ""))).name, f"{event.get('results')} result(s)",
                f"{event.get('files')} files, {event.get('bytes')} bytes, manifest sha256 "
                f"{str(event.get('manifest_sha256', ''))[:16]}")
    if kind == "verify":
        return (kind, event.get("operator", ""), ", ".join(event.get("checks") or []), "",
                f"events since {event.get('since')} ({event.get('since_from')}), approval {event.get('approval')}, "
                f"bundle {event.get('bundle')}")
    if kind == "verification":
        causes = event.get("causes") or {}
        return (kind, event.get("by", ""), ", ".join(f"{label}: {status}" for label, status in causes.items()),
                str(event.get("status", "")), f"events since {event.get('since')}, bundle {event.get('bundle')}")
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
        style = {"FAIL": "red", "refused": "yellow", "failed": "red", "done": "green",
                 "not run": "magenta", "approved": "green", "PASS": "green",
                 "resolved": "green", "unresolved": "yellow", "cleared": "green", "still failing": "red",
                 "could not check": "magenta", "error": "red"}.get(result, "")
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
    from agent.options import DiagnoseOptions
    from agent.runs import runs_dir

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

