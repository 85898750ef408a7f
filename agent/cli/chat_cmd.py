"""`aidai chat`: the interactive face for a customer inside a VM. It asks for the incident, runs the same diagnosis
as `aidai diagnose` with approval `ask` and up to two feedback rounds, and writes an escalation ticket when no
root cause is confirmed. Exit code 0 resolved, 1 escalated, 2 bad input."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from agent.cli.diagnose_cmd import (
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
    TicketExport,
    TicketOpt,
    TrustOpt,
    check_profile,
    clean_errors,
    make_incident,
    run_diagnosis,
    ssh_options,
)
from agent.cli.render import ProgressView, make_answer, read_lines, report_panel, resume_command

FEEDBACK_ROUNDS = 2


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
    console = Console()
    with clean_errors(console):
        check_profile(profile)
        hosts = list(host or ["local"])
        console.print(Panel("I will look for the cause of a failed or slow AI job on this machine: similar past "
                            "incidents first, then checks of the GPUs, interconnect, drivers and software. Checks "
                            "that load the GPUs or the network run only if you agree.",
                            title="aidai chat", subtitle=escape(", ".join(hosts))))
        text = read_lines(console, "[bold]What happened?[/] Paste the error lines too; finish with an empty line.")
        incident = make_incident(text, "", hosts)  # empty: a clear error, exit 2
        environment = read_lines(console, "[bold]Environment[/] (GPU model, driver, CUDA/NCCL/torch versions; "
                                          "optional, empty line to skip):")
        incident.environment = environment.strip()
        from agent.diagnosis import DiagnoseOptions

        options = DiagnoseOptions(
            hosts=hosts, ssh=ssh_options(key, known_hosts, trust_new_host_keys), approval="ask", llm=llm,
            base_url=base_url, model=model, profile=profile, data_dir=str(data_dir) if data_dir else None,
            chroma_url=chroma_url, max_feedback_rounds=FEEDBACK_ROUNDS)
        view = ProgressView(console)
        answer = make_answer(view, console, interactive=True)
        report = run_diagnosis(options, view, answer, incident=incident)
        console.print(report_panel(report, resume_hint=resume_command(report.run_id, options.data_dir)))
        if ticket is not None or not report.resolved:
            path = ticket if ticket is not None else Path(f"aidai-ticket-{report.run_id}")
            if not report.resolved:
                console.print("[yellow]No root cause was confirmed: this goes to the provider.[/] Send them the "
                              "ticket below; it lists everything that was checked (hostnames and secrets redacted).")
            TicketExport(path, "both", None, None).run(report, options, console)
    raise typer.Exit(EXIT_RESOLVED if report.resolved else EXIT_UNRESOLVED)
