"""`aidai verify RUN`: after a fix, run again the checks that confirmed each cause of a finished run, on the same
hosts, and say per cause: cleared, still failing, or could not check (agent/verify.py). The round goes into the run's
audit log, `<run>.verify.jsonl` and the run's ticket (`<data-dir>/runs/<run>.ticket.md/.json`, and --ticket PATH).

Exit codes: 0 every cause cleared, 1 a cause still failing or not checked, 2 bad input (unknown run, a run that
confirmed nothing, a bad --since).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.cli.diagnose_cmd import TicketExport, clean_errors
from agent.cli.options import EXIT_BAD_INPUT, DataDirOpt, TicketFormatOpt, TicketOpt, WebhookOpt, WebhookTemplateOpt

if TYPE_CHECKING:
    from agent.verify import Verification, Verifier

STYLE = {"cleared": "green", "still failing": "red", "could not check": "magenta"}


def verification_table(round_: Verification) -> Table:
    table = Table(title=f"verification of run {escape(round_.run_id)}: {escape(round_.status)}", expand=True)
    for name in ("cause", "result", "host", "check", "now", "why"):
        table.add_column(name, overflow="fold")
    from agent.verify import still_entry

    for cause in round_.causes:
        style = STYLE[cause.status]
        first = True
        for check in cause.checks or []:
            found = ", ".join(still_entry(check.result, f) for f in check.still)
            why = f"still: {found}" if found else check.result.reason or check.result.summary
            table.add_row(escape(cause.label) if first else "", f"[{style}]{escape(cause.status)}[/]" if first else "",
                          escape(check.result.host), escape(check.result.check),
                          f"[{STYLE[check.status]}]{escape(check.result.verdict.value)}[/]", escape(why[:300]))
            first = False
        if not cause.checks:
            table.add_row(escape(cause.label), f"[{style}]{escape(cause.status)}[/]", "", "", "", escape(cause.why))
    return table


def verify(
    run: Annotated[str, typer.Argument(metavar="RUN", help="The run id (printed at the end of `aidai diagnose`).")],
    data_dir: DataDirOpt = None,
    approve_active: Annotated[bool, typer.Option("--approve-active",
                                                 help="Also run again the active checks (load tests) that confirmed "
                                                      "a cause; without it they are 'could not check'.")] = False,
    since: Annotated[str | None, typer.Option("--since", metavar="TIME",
                                              help="When the fix was done (ISO 8601, UTC unless it has a zone): log "
                                                   "checks count only events after it (default: when the "
                                                   "diagnosis ended).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verification as JSON on stdout.")] = False,
    ticket: TicketOpt = None,
    ticket_format: TicketFormatOpt = "both",
    webhook: WebhookOpt = None,
    webhook_template: WebhookTemplateOpt = None,
) -> None:
    """Verify a fix: run again the checks that confirmed each cause of RUN on the same hosts and say, per cause,
    cleared / still failing / could not check. Exit 0 all cleared, 1 otherwise, 2 bad input."""
    err = Console(stderr=True, emoji=False)
    out = Console(emoji=False)
    with clean_errors(err):
        from agent.audit import local_user
        from agent.verify import Verifier, VerifyError

        try:
            export = TicketExport(ticket, ticket_format, webhook, webhook_template)
            verifier = Verifier(run, str(data_dir) if data_dir else None, approve_active=approve_active, since=since,
                                operator=local_user(),
                                emit=lambda e: err.print(f"[dim]  {escape(e.host)} {escape(e.check)}: "
                                                         f"{escape(e.verdict)}[/]", highlight=False))
            err.print(f"[dim]aidai: verifying run {escape(run)} on {escape(', '.join(verifier.options.hosts))}[/]",
                      highlight=False, soft_wrap=True)
            round_ = verifier.run()
        except VerifyError as exc:
            err.print(f"[red]error: {escape(str(exc))}[/]", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_BAD_INPUT) from None
        if as_json:
            print(json.dumps(round_.model_dump(mode="json"), indent=1))
        else:
            out.print(verification_table(round_))
        console = err if as_json else out
        if round_.window_note:
            console.print(f"[dim]{escape(round_.window_note)}[/]", highlight=False, soft_wrap=True)
        bundle = round_.bundle
        if bundle.get("status") != "intact":
            console.print(f"[yellow]evidence bundle {escape(str(bundle.get('status')))}[/]: "
                          f"{escape('; '.join(bundle.get('problems') or []))}", highlight=False, soft_wrap=True)
        write_run_ticket(verifier, export, console)
    raise typer.Exit(round_.exit_code)


def write_run_ticket(verifier: Verifier, export: TicketExport, console: Console) -> None:
    """The run's ticket again, now with its "Verification after fix" section: in the data dir always, and where
    --ticket / --webhook say."""
    from agent.audit import AuditLog, audit_path
    from agent.audit_records import ExportRecord
    from agent.report import build_report
    from agent.runs import run_ticket, runs_dir
    from agent.ticket import write_formats
    from agent.ticket_export import digest

    options = verifier.options
    report = build_report(verifier.run_id, verifier.state, verifier.taxonomy)
    runs = runs_dir(options)
    written = write_formats(run_ticket(report, options), runs / f"{verifier.run_id}.ticket", ("md", "json"))
    audit = AuditLog(audit_path(runs, verifier.run_id), verifier.run_id)
    for path in written:
        audit.append(ExportRecord(by=verifier.operator, target=str(path), result="written",
                                  detail=f"sha256 {digest(path)[:16]}, with the verification"))
    console.print(f"ticket updated: {escape(' and '.join(map(str, written)))}", highlight=False)
    if export.wanted:
        export.run(report, options, console)
