"""`aidai chat`: the interactive face for a customer inside a VM. It asks for the incident, runs the same diagnosis
as `aidai diagnose` with approval `ask` (one question per step for its load tests) and up to two feedback rounds,
says who should act on the result (`agent.report.acting_party`): the customer gets their fix, the provider a ticket.
Every question ends on one Enter (pasted lines belong to the answer they were pasted into).
Exit code 0 resolved, 1 escalated, 2 bad input."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from agent.cli.diagnose_cmd import check_profile, clean_errors, make_incident, run_diagnosis, ssh_options
from agent.cli.options import (
    EXIT_RESOLVED,
    EXIT_UNRESOLVED,
    BaseUrlOpt,
    ChromaUrlOpt,
    DataDirOpt,
    HostOpt,
    KeyOpt,
    KnownHostsOpt,
    LlmOpt,
    ModelOpt,
    ProfileOpt,
    TicketOpt,
    TrustOpt,
)
from agent.cli.render import ProgressView, make_answer, read_answer, report_panel, resume_command

if TYPE_CHECKING:
    from agent.options import DiagnoseOptions
    from agent.report import Report

FEEDBACK_ROUNDS = 2
# what a chat user does to run the load tests they declined (the chat has no --approve-active)
CHAT_APPROVE_HINT = "run `aidai chat` again and answer the approval question with a (all) or their numbers"


def chat(
    host: HostOpt = None,
    llm: LlmOpt = "offline",
    base_url: BaseUrlOpt = None,
    model: ModelOpt = None,
    profile: ProfileOpt = None,
    data_dir: DataDirOpt = None,
    chroma_url: ChromaUrlOpt = None,
    ticket: TicketOpt = None,
    known_hosts: KnownHostsOpt = None,
    trust_new_host_keys: TrustOpt = False,
    key: KeyOpt = None,
) -> None:
    """Describe a problem, answer a few questions, get a diagnosis (or an escalation ticket for the provider)."""
    console = Console(emoji=False)
    with clean_errors(console):
        check_profile(profile)
        hosts = list(host or ["local"])
        console.print(Panel("I will look for the cause of a failed or slow AI job on this machine: similar past "
                            "incidents first, then checks of the GPUs, interconnect, drivers and software. Checks "
                            "that load the GPUs or the network run only if you agree.",
                            title="aidai chat", subtitle=escape(", ".join(hosts))))
        text = read_answer(console, "[bold]What happened?[/] Paste the error lines too, then Enter.")
        incident = make_incident(text, "", hosts)  # empty: a clear error, exit 2
        environment = read_answer(console, "[bold]Environment[/] (GPU model, driver, CUDA/NCCL/torch versions; "
                                           "optional: Enter to skip):")
        incident.environment = environment.strip()
        from agent.options import DiagnoseOptions

        options = DiagnoseOptions(
            hosts=hosts, ssh=ssh_options(key, known_hosts, trust_new_host_keys), approval="ask", llm=llm,
            base_url=base_url, model=model, profile=profile, data_dir=str(data_dir) if data_dir else None,
            chroma_url=chroma_url, max_feedback_rounds=FEEDBACK_ROUNDS)
        view = ProgressView(console)
        answer = make_answer(view, console, interactive=True)
        report = run_diagnosis(options, view, answer, incident=incident)
        console.print(report_panel(report, resume_hint=resume_command(report.run_id, options.data_dir),
                                   approve_hint=CHAT_APPROVE_HINT))
        provider = who_acts(console, report)
        if ticket is not None or provider:
            write_ticket(report, options, ticket if ticket is not None else Path(f"aidai-ticket-{report.run_id}"),
                         console)
    raise typer.Exit(EXIT_RESOLVED if report.resolved else EXIT_UNRESOLVED)


def who_acts(console: Console, report: Report) -> bool:
    """Say who should act on the report; True when it is the provider (they get the ticket)."""
    from agent.report import acting_party

    if acting_party(report) == "customer":
        console.print("[bold green]This is yours to fix[/]: the cause is in your code, configuration or library "
                      "versions, not in the machine; the provider has nothing to do.", highlight=False)
        for cause in report.root_causes:
            todo = cause.runbook or cause.why
            console.print(f" • [bold]{escape(cause.label)}[/]: {escape(todo)}", highlight=False)
        return False
    if report.resolved:
        probable = "probable " if report.root_causes and report.root_causes[0].level == "probable" else ""
        console.print(f"[yellow]The provider should act[/]: the {probable}cause is in the machine, its drivers or its "
                      "fabric. "
                      "Send them the ticket below; it lists everything that was checked (hostnames and secrets "
                      "redacted).", highlight=False)
    else:
        console.print("[yellow]No root cause was confirmed from inside the machine: the provider can look "
                      "further.[/] Send them the ticket below; it lists everything that was checked (hostnames and "
                      "secrets redacted).", highlight=False)
    return True


def write_ticket(report: Report, options: DiagnoseOptions, path: Path, console: Console) -> None:
    """The ticket in Markdown and JSON, worded for a chat user (what they can do is answer the chat's questions,
    not pass CLI flags); the export is in the run's audit log."""
    from agent.audit import AuditLog, audit_path, local_user
    from agent.audit_records import ExportRecord
    from agent.runs import run_ticket, runs_dir
    from agent.ticket import write_formats
    from agent.ticket_export import digest

    written = write_formats(run_ticket(report, options), path, ("md", "json"), "chat")
    if options.checkpoint:
        audit = AuditLog(audit_path(runs_dir(options), report.run_id), report.run_id)
        for target in written:
            audit.append(ExportRecord(by=options.operator or local_user(), target=str(target), result="written",
                                      detail=f"sha256 {digest(target)[:16]}"))
    console.print(f"ticket written: {escape(' and '.join(map(str, written)))}", highlight=False)
