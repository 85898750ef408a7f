"""`aidai diagnose`: one incident, diagnosed end to end on one or more hosts. A thin face over agent.diagnosis:
it builds DiagnoseOptions, calls Diagnoser.run/resume and renders the events and the report.

Exit codes: 0 resolved, 1 unresolved (escalate), 2 bad input or setup (one red line, no traceback).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from agent.cli.render import ProgressView, make_answer, report_panel, resume_command
from agent.executors.hosts import SPEC_HELP, HostSpecError
from agent.incident import MAX_TEXT_BYTES, Incident, IncidentError
from agent.reasoning.factory import KINDS, ReasonerConfigError

if TYPE_CHECKING:
    from agent.diagnosis import Answer, DiagnoseOptions
    from agent.report import Report

EXIT_RESOLVED, EXIT_UNRESOLVED, EXIT_BAD_INPUT = 0, 1, 2

# ---- options shared with `chat` and `demo` -----------------------------------------------------------------
HostOpt = Annotated[list[str] | None, typer.Option("--host", metavar="SPEC",
                                                   help=f"Host to check: {SPEC_HELP} (repeatable; default local).")]
LlmOpt = Annotated[str, typer.Option("--llm", metavar="|".join(KINDS),
                                     help="Reasoner: offline (no network) or openai (any OpenAI-compatible "
                                          "endpoint; key from AIDAI_LLM_API_KEY or OPENAI_API_KEY).")]
BaseUrlOpt = Annotated[str | None, typer.Option("--base-url", metavar="URL",
                                                help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1.")]
ModelOpt = Annotated[str | None, typer.Option("--model", metavar="NAME", help="Model name for --llm openai.")]
ProfileOpt = Annotated[str | None, typer.Option("--profile", metavar="SKU",
                                                help="SKU profile for check thresholds (default: the host's).")]
DataDirOpt = Annotated[Path | None, typer.Option("--data-dir", metavar="DIR",
                                                 help="Data directory: Chroma store and saved runs (env "
                                                      "AIDAI_DATA_DIR; default: the per-user data dir).")]
ChromaUrlOpt = Annotated[str | None, typer.Option("--chroma-url", metavar="URL",
                                                  help="Chroma server http://host:port (env AIDAI_CHROMA_URL).")]
KnownHostsOpt = Annotated[str | None, typer.Option("--known-hosts", metavar="FILE",
                                                   help="known_hosts for ssh:// hosts (default ~/.ssh/known_hosts).")]
TrustOpt = Annotated[bool, typer.Option("--trust-new-host-keys",
                                        help="Accept and remember unknown SSH host keys (a changed key is still "
                                             "refused).")]
KeyOpt = Annotated[str | None, typer.Option("--key", metavar="FILE",
                                            help="Private key for ssh:// hosts (default: agent, ~/.ssh).")]
TicketOpt = Annotated[Path | None, typer.Option("--ticket", metavar="PATH",
                                                help="Write the escalation ticket to PATH.md and PATH.json.")]


def user_errors() -> tuple[type[Exception], ...]:
    """Errors that are the user's input or set-up, shown as one red line with exit code 2."""
    from agent.diagnosis import RunNotFound
    from agent.knowledge.embeddings import EmbeddingUnavailable
    from agent.knowledge.store import StoreError

    return (HostSpecError, ReasonerConfigError, RunNotFound, IncidentError, FileNotFoundError, IsADirectoryError,
            StoreError, EmbeddingUnavailable)


@contextmanager
def clean_errors(console: Console) -> Iterator[None]:
    try:
        yield
    except (typer.Exit, typer.Abort, KeyboardInterrupt):
        raise
    except Exception as exc:
        if not isinstance(exc, user_errors()):
            raise
        message = str(exc).strip() or type(exc).__name__
        console.print(f"[red]error: {escape(message)}[/]", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None


def make_incident(text: str, environment: str = "", hosts: list[str] | None = None,
                  attachments: dict[str, Path | None] | None = None) -> Incident:
    """Incident(...) with its validation error turned back into the IncidentError it carries."""
    from pydantic import ValidationError

    attached = {kind: path for kind, path in (attachments or {}).items() if path is not None}
    for kind, path in attached.items():
        if not path.exists():
            raise IncidentError(f"--{ATTACHMENT_FLAGS[kind]} {path}: no such file or directory")
    try:
        return Incident(text=text, environment=environment or "", hosts=list(hosts or []),
                        attachments={kind: str(path) for kind, path in attached.items()})
    except ValidationError as exc:
        error = exc.errors()[0]
        cause = (error.get("ctx") or {}).get("error")
        message = str(cause) if cause else str(error.get("msg", exc)).removeprefix("Value error, ")
        raise IncidentError(message) from None


ATTACHMENT_FLAGS = {"logs": "logs", "success": "success-logs", "telemetry": "telemetry"}
LogsOpt = Annotated[Path | None, typer.Option("--logs", metavar="DIR", help="The job's logs (a file per node or "
                                              "rank, or torchrun's interleaved file): L4 ranks the suspicious nodes "
                                              "first.")]
SuccessLogsOpt = Annotated[Path | None, typer.Option("--success-logs", metavar="DIR", help="Logs of a successful "
                                                     "job with the same setup: L4 ignores the events they have too.")]
TelemetryOpt = Annotated[Path | None, typer.Option("--telemetry", metavar="FILE", help="Host metrics (CSV or "
                                                   "Parquet with a timestamp column): Reveal finds anomalous "
                                                   "windows.")]


def read_incident_text(text: str | None, file: Path | None) -> str:
    """TEXT, --file F (`-`: stdin) or TEXT `-` (stdin); with both TEXT and --file, the file follows the text."""
    parts: list[str] = []
    if text == "-" or (file is not None and str(file) == "-"):
        parts.append(sys.stdin.read())
    if text and text != "-":
        parts.insert(0, text)
    if file is not None and str(file) != "-":
        size = file.stat().st_size  # FileNotFoundError: a clean error
        if size > MAX_TEXT_BYTES:
            raise IncidentError(f"{file} is {size / 2**20:.1f} MiB (limit {MAX_TEXT_BYTES // 2**20} MiB): pass the "
                                "error excerpt as the incident and keep the full log for the ticket")
        parts.append(file.read_bytes().decode("utf-8", "replace"))
    if text is None and file is None:
        raise IncidentError("no incident given: pass TEXT, --file F, or - to read it from stdin")
    return "\n\n".join(parts)


def ssh_options(key: str | None, known_hosts: str | None, trust_new_host_keys: bool) -> dict[str, object]:
    return {"key_file": key, "known_hosts": known_hosts, "trust_new_host_keys": trust_new_host_keys}


def check_profile(profile: str | None) -> None:
    if profile is None:
        return
    from agent.checks.manifest import load_profiles

    profiles = load_profiles()
    if profile not in profiles:
        raise HostSpecError(f"unknown profile {profile!r}; valid: {', '.join(profiles)}")


def run_diagnosis(options: DiagnoseOptions, view: ProgressView, answer: Answer, *, incident: Incident | None = None,
                  resume: str | None = None, run_id: str | None = None) -> Report:
    """Diagnoser.run (or .resume) with the progress view as its event sink; closes the hosts afterwards.
    Ctrl-C prints how to resume the run and exits 130."""
    from agent.diagnosis import Diagnoser, new_run_id

    diagnoser = Diagnoser(options, emit=view)
    run_id = resume or run_id or new_run_id()
    try:
        with view:
            if resume:
                return diagnoser.resume(resume, answer)
            assert incident is not None
            return diagnoser.run(incident, answer, run_id=run_id)
    except KeyboardInterrupt:
        view.console.print(f"[yellow]interrupted[/]: continue with `{resume_command(run_id, options.data_dir)}`")
        raise typer.Exit(130) from None
    finally:
        diagnoser.close()
        for executor in getattr(diagnoser.runner, "executors", {}).values():
            with suppress(Exception):
                executor.close()


def write_ticket_files(report: Report, path: Path, console: Console) -> tuple[Path, Path]:
    from agent.ticket import write_ticket

    md, js = write_ticket(report, path)
    console.print(f"ticket written: {escape(str(md))} and {escape(str(js))}", highlight=False)
    return md, js


def diagnose(
    text: Annotated[str | None, typer.Argument(metavar="TEXT", help="The incident: what failed, with the error lines "
                                                    "(`-`: read from stdin).")] = None,
    file: Annotated[Path | None, typer.Option("--file", "-f", metavar="F",
                                              help="Read the incident (or an error log) from F (`-`: stdin).")] = None,
    environment: Annotated[str, typer.Option("--environment", "-e", metavar="ENV",
                                             help="GPU model, driver, CUDA/NCCL/torch versions, VM size.")] = "",
    host: HostOpt = None,
    logs: LogsOpt = None,
    success_logs: SuccessLogsOpt = None,
    telemetry: TelemetryOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print only the report contract as JSON on stdout "
                                                         "(progress stays on stderr).")] = False,
    ticket: TicketOpt = None,
    approve_active: Annotated[bool, typer.Option("--approve-active",
                                                 help="Run active checks (benchmarks, load) without asking.")] = False,
    ask: Annotated[bool, typer.Option("--ask", help="Ask before each active check (default: never run them; "
                                                    "they are reported UNKNOWN, approval required).")] = False,
    llm: LlmOpt = "offline",
    base_url: BaseUrlOpt = None,
    model: ModelOpt = None,
    profile: ProfileOpt = None,
    data_dir: DataDirOpt = None,
    chroma_url: ChromaUrlOpt = None,
    no_history: Annotated[bool, typer.Option("--no-history", help="Skip pipeline 1 (similar past incidents).")
                          ] = False,
    known_hosts: KnownHostsOpt = None,
    trust_new_host_keys: TrustOpt = False,
    key: KeyOpt = None,
    resume: Annotated[str | None, typer.Option("--resume", metavar="RUN_ID",
                                               help="Continue (or show again) a run from its checkpoint.")] = None,
) -> None:
    """Diagnose an incident: similar past incidents, then a search of the fault taxonomy with verification checks
    on the hosts, then suggestions. Exit code 0 resolved, 1 unresolved (escalate), 2 bad input."""
    err = Console(stderr=True)
    out = Console()
    with clean_errors(err):
        if approve_active and ask:
            raise IncidentError("--approve-active and --ask exclude each other")
        check_profile(profile)
        incident = None
        if resume:
            if text is not None or file is not None:
                raise IncidentError("--resume continues a saved run: give no incident text or --file")
            from agent.diagnosis import load_run

            options, incident = load_run(resume, str(data_dir) if data_dir else None)
            if approve_active or ask:
                options.approval = "all" if approve_active else "ask"
            err.print(f"[dim]resuming run {escape(resume)} on {escape(', '.join(options.hosts))}[/]", highlight=False)
        else:
            incident = make_incident(read_incident_text(text, file), environment, host,
                                     {"logs": logs, "success": success_logs, "telemetry": telemetry})
            hosts = list(host or ["local"])
            err.print(f"[dim]aidai: diagnosing on {escape(', '.join(hosts))} (reasoner {escape(llm)}, active "
                      f"checks: {'all' if approve_active else 'ask' if ask else 'not run'})[/]", highlight=False,
                      soft_wrap=True)
            from agent.diagnosis import DiagnoseOptions

            options = DiagnoseOptions(
                hosts=hosts, ssh=ssh_options(key, known_hosts, trust_new_host_keys),
                approval="all" if approve_active else "ask" if ask else "none", llm=llm, base_url=base_url,
                model=model, profile=profile, data_dir=str(data_dir) if data_dir else None, chroma_url=chroma_url,
                history=not no_history)
        view = ProgressView(err)
        answer = make_answer(view, err, interactive=ask, approve_all=approve_active)
        report = run_diagnosis(options, view, answer, incident=None if resume else incident, resume=resume)
        if as_json:
            print(json.dumps(report.contract(), indent=1))
        else:
            out.print(report_panel(report, resume_hint=resume_command(report.run_id, options.data_dir)))
        if ticket is not None:
            write_ticket_files(report, ticket, err if as_json else out)
        elif not report.resolved:
            (err if as_json else out).print(
                "[yellow]unresolved:[/] `--ticket PATH` writes an escalation ticket (PATH.md, PATH.json) with "
                f"everything checked; e.g. `{escape(resume_command(report.run_id, options.data_dir))} "
                "--ticket ticket`", highlight=False)
    raise typer.Exit(EXIT_RESOLVED if report.resolved else EXIT_UNRESOLVED)
