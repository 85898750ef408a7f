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
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from agent.checks.runner import DEFAULT_PARALLEL_HOSTS
from agent.cli.options import (
    ATTACHMENT_FLAGS,
    EXIT_BAD_INPUT,
    EXIT_RESOLVED,
    EXIT_UNRESOLVED,
    TICKET_FORMATS,
    BaseUrlOpt,
    CheckpointUrlOpt,
    ChromaUrlOpt,
    DataDirOpt,
    HostOpt,
    KeyOpt,
    KnownHostsOpt,
    LlmOpt,
    LogsOpt,
    MaxChecksOpt,
    MaxParallelHostsOpt,
    MaxTokensOpt,
    MaxWallOpt,
    MetricsOpt,
    ModelOpt,
    ProfileOpt,
    PrometheusOpt,
    SuccessLogsOpt,
    TelemetryBaselineOpt,
    TelemetryOpt,
    TicketFormatOpt,
    TicketOpt,
    TrustOpt,
    WebhookOpt,
    WebhookTemplateOpt,
)
from agent.cli.render import ProgressView, make_answer, report_panel, resume_command
from agent.executors.hosts import HostSpecError
from agent.incident import Incident, IncidentError
from agent.reasoning.factory import ReasonerConfigError
from agent.textinput import Received, clean_field, hold, joined, receive_bytes, receive_text

if TYPE_CHECKING:
    from agent.diagnosis import Answer
    from agent.options import DiagnoseOptions
    from agent.report import Report


def user_errors() -> tuple[type[Exception], ...]:
    """Errors that are the user's input or set-up, shown as one red line with exit code 2."""
    from agent.audit import AuditError
    from agent.checkpoints import CheckpointStoreError
    from agent.checks.runner import CheckNotAllowed
    from agent.knowledge.embeddings import EmbeddingUnavailable
    from agent.knowledge.store import StoreError
    from agent.limits import LimitError
    from agent.prometheus.client import PrometheusUrlError
    from agent.redact import RedactionMappingError
    from agent.runs import RunNotFound
    from agent.ticket_export import ExportError

    return (HostSpecError, ReasonerConfigError, RunNotFound, IncidentError, FileNotFoundError, IsADirectoryError,
            StoreError, EmbeddingUnavailable, CheckNotAllowed, LimitError, ExportError, RedactionMappingError,
            CheckpointStoreError, AuditError, PrometheusUrlError)


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


def make_incident(text: str | list[Received], environment: str = "", hosts: list[str] | None = None,
                  attachments: dict[str, Path | None] | None = None, at: str | None = None) -> Incident:
    """Incident(...) from text as read (agent/textinput.py's policy: decoded, cleaned, a large log excerpted and
    held whole, to be saved next to the run by run_diagnosis), with its validation error turned back into the
    IncidentError it carries."""
    from pydantic import ValidationError

    parts = [receive_text(text, "the incident text")] if isinstance(text, str) else text
    attached = {kind: path for kind, path in (attachments or {}).items() if path is not None}
    if "telemetry_baseline" in attached and "telemetry" not in attached:
        raise IncidentError("--telemetry-baseline is what --telemetry FILE is judged against: give --telemetry too")
    for kind, path in attached.items():
        if not path.exists():
            raise IncidentError(f"--{ATTACHMENT_FLAGS[kind]} {path}: no such file or directory")
    try:
        return hold(Incident(text=joined(parts), environment=clean_field(environment or "", "--environment"),
                             hosts=list(hosts or []), attachments={kind: str(path) for kind, path in attached.items()},
                             at=at or None), parts)
    except ValidationError as exc:
        error = exc.errors()[0]
        cause = (error.get("ctx") or {}).get("error")
        message = str(cause) if cause else str(error.get("msg", exc)).removeprefix("Value error, ")
        raise IncidentError(message) from None


def read_incident_text(text: str | None, file: Path | None) -> list[Received]:
    """TEXT, --file F (`-`: stdin) or TEXT `-` (stdin); with both TEXT and --file, the file follows the text. Each
    is read as agent/textinput.py says: any encoding, control characters dropped, a binary refused (NotText, exit
    2), a large log excerpted (the whole attached to the run)."""
    parts: list[Received] = []
    if text == "-" or (file is not None and str(file) == "-"):
        stdin = getattr(sys.stdin, "buffer", None)
        parts.append(receive_bytes(stdin.read(), "stdin") if stdin is not None
                     else receive_text(sys.stdin.read(), "stdin"))
    if text and text != "-":
        parts.insert(0, receive_text(text, "the incident text"))
    if file is not None and str(file) != "-":
        if file.is_dir():
            raise IsADirectoryError(f"--file {file} is a directory: give a log file (the job's logs: --logs DIR)")
        parts.append(receive_bytes(file.read_bytes(), file.name))  # FileNotFoundError: a clean error
    if text is None and file is None:
        raise IncidentError("no incident given: pass TEXT, --file F, or - to read it from stdin")
    return parts


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
    from agent.diagnosis import Diagnoser
    from agent.runs import new_run_id

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


class TicketExport:
    """--ticket/--ticket-format/--webhook/--webhook-template, checked before the diagnosis runs and carried out
    after it with the run's redaction mapping (the ticket shows the placeholders the LLM saw)."""

    def __init__(self, path: Path | None, fmt: str, webhook: str | None, template: Path | None):
        self.path = path
        self.formats = ("md", "json") if fmt == "both" else (fmt,)
        self.webhook: str | None = None
        self.template: Any = None
        if fmt == "both" and path is None and webhook is None and template is None:
            return  # nothing to export: the exporters are not imported (a cold CLI pays for every import)
        from agent.ticket_export import ExportError, check_url, load_template

        if fmt not in TICKET_FORMATS:
            raise ExportError(f"--ticket-format {fmt!r}: choose one of {', '.join(TICKET_FORMATS)}")
        if fmt != "both" and path is None:
            raise ExportError("--ticket-format needs --ticket PATH")
        if template is not None and webhook is None:
            raise ExportError("--webhook-template needs --webhook URL")
        self.webhook = check_url(webhook) if webhook else None
        self.template = load_template(template) if template is not None else None

    @property
    def wanted(self) -> bool:
        return self.path is not None or self.webhook is not None

    def run(self, report: Report, options: DiagnoseOptions, console: Console) -> None:
        """Files first, then the webhook: a receiver that fails loses nothing (the ticket is on disk and the
        error says where)."""
        from agent.audit import AuditLog, audit_path, local_user
        from agent.audit_records import ExportRecord
        from agent.runs import run_ticket, runs_dir
        from agent.ticket import write_formats
        from agent.ticket_export import ExportError, digest, post, public_url, render_body

        runs = runs_dir(options)
        data = run_ticket(report, options)
        audit = AuditLog(audit_path(runs, report.run_id), report.run_id) if options.checkpoint else None
        who = options.operator or local_user()
        written = write_formats(data, self.path if self.path is not None else runs / f"{report.run_id}.ticket",
                                self.formats if self.path is not None else ("json",))
        for path in written:
            if audit:
                audit.append(ExportRecord(by=who, target=str(path), result="written",
                                          detail=f"sha256 {digest(path)[:16]}"))
        if self.path is not None:
            console.print(f"ticket written: {escape(' and '.join(map(str, written)))}", highlight=False)
        if self.webhook is None:
            return
        try:
            status = post(self.webhook, render_body(self.template, data))
        except ExportError as exc:
            if audit:
                audit.append(ExportRecord(by=who, target=public_url(self.webhook), result="failed", detail=str(exc)))
            raise ExportError(f"{exc}; the ticket is saved in {', '.join(map(str, written))}") from None
        if audit:
            audit.append(ExportRecord(by=who, target=public_url(self.webhook), result=status,
                                      detail="webhook POST" + (" (template)" if self.template is not None else "")))
        console.print(f"ticket posted to {escape(public_url(self.webhook))} (HTTP {status})", highlight=False)


def diagnose(
    text: Annotated[str | None, typer.Argument(metavar="TEXT", help="The incident: what failed, with the error lines "
                                                    "(`-`: read from stdin).")] = None,
    file: Annotated[Path | None, typer.Option("--file", "-f", metavar="F",
                                              help="Read the incident (or an error log) from F (`-`: stdin).")] = None,
    environment: Annotated[str, typer.Option("--environment", "-e", metavar="ENV",
                                             help="GPU model, driver, CUDA/NCCL/torch versions, VM size.")] = "",
    at: Annotated[str | None, typer.Option("--at", metavar="TIME", help="When the incident happened (ISO 8601, "
                                           "UTC unless it has a zone; default now): log events are judged against "
                                           "it, older ones are history.")] = None,
    host: HostOpt = None,
    logs: LogsOpt = None,
    success_logs: SuccessLogsOpt = None,
    telemetry: TelemetryOpt = None,
    telemetry_baseline: TelemetryBaselineOpt = None,
    metrics: MetricsOpt = None,
    prometheus: PrometheusOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print only the report contract as JSON on stdout "
                                                         "(progress stays on stderr).")] = False,
    ticket: TicketOpt = None,
    ticket_format: TicketFormatOpt = "both",
    webhook: WebhookOpt = None,
    webhook_template: WebhookTemplateOpt = None,
    max_checks: MaxChecksOpt = None,
    max_wall_s: MaxWallOpt = None,
    max_llm_tokens: MaxTokensOpt = None,
    max_parallel_hosts: MaxParallelHostsOpt = None,
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
    checkpoint_url: CheckpointUrlOpt = None,
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
    err = Console(stderr=True, emoji=False)
    out = Console(emoji=False)
    with clean_errors(err):
        if approve_active and ask:
            raise IncidentError("--approve-active and --ask exclude each other")
        check_profile(profile)
        if prometheus:
            from agent.prometheus.client import check_url

            prometheus = check_url(prometheus)
        export = TicketExport(ticket, ticket_format, webhook, webhook_template)
        from agent.audit import local_user, signed

        operator = local_user()
        incident = None
        if resume:
            if text is not None or file is not None:
                raise IncidentError("--resume continues a saved run: give no incident text or --file")
            from agent.runs import load_run

            options, incident = load_run(resume, str(data_dir) if data_dir else None)
            if prometheus:
                options.prometheus = prometheus
            if approve_active or ask:
                options.approval = "all" if approve_active else "ask"
            for name, value in (("max_checks", max_checks), ("max_wall_s", max_wall_s),
                                ("max_llm_tokens", max_llm_tokens), ("max_parallel_hosts", max_parallel_hosts)):
                if value is not None:  # a resumed run may get a higher (or lower) limit
                    setattr(options, name, value)
            options.operator = operator
            err.print(f"[dim]resuming run {escape(resume)} on {escape(', '.join(options.hosts))}[/]", highlight=False)
        else:
            incident = make_incident(read_incident_text(text, file), environment, host,
                                     {"logs": logs, "success": success_logs, "telemetry": telemetry,
                                      "telemetry_baseline": telemetry_baseline, "metrics": metrics}, at)
            hosts = list(host or ["local"])
            err.print(f"[dim]aidai: diagnosing on {escape(', '.join(hosts))} (reasoner {escape(llm)}, active "
                      f"checks: {'all' if approve_active else 'ask' if ask else 'not run'})[/]", highlight=False,
                      soft_wrap=True)
            if not host:
                err.print("[dim]no --host given: checking this machine (local); name the GPU node with "
                          "--host ssh://user@node[/]", highlight=False, soft_wrap=True)
            from agent.options import DiagnoseOptions

            options = DiagnoseOptions(
                hosts=hosts, ssh=ssh_options(key, known_hosts, trust_new_host_keys),
                approval="all" if approve_active else "ask" if ask else "none", llm=llm, base_url=base_url,
                model=model, profile=profile, data_dir=str(data_dir) if data_dir else None, chroma_url=chroma_url,
                history=not no_history, max_checks=max_checks, max_wall_s=max_wall_s, max_llm_tokens=max_llm_tokens,
                operator=operator, checkpoint_url=checkpoint_url, prometheus=prometheus,
                max_parallel_hosts=max_parallel_hosts or DEFAULT_PARALLEL_HOSTS)
        options.limits()  # a bad limit is refused before anything runs
        view = ProgressView(err)
        answer = signed(make_answer(view, err, interactive=ask, approve_all=approve_active), operator)
        report = run_diagnosis(options, view, answer, incident=None if resume else incident, resume=resume)
        if as_json:
            print(json.dumps(report.contract(), indent=1))
        else:
            out.print(report_panel(report, resume_hint=resume_command(report.run_id, options.data_dir)))
        if report.stopped:
            err.print(f"[yellow]stopped[/] ({escape(report.stopped.get('limit', ''))}): "
                      f"{escape(report.stopped.get('message', ''))}; the ticket lists what was tried (run again with a "
                      "higher limit to search further)", highlight=False, soft_wrap=True)
        if export.wanted:
            export.run(report, options, err if as_json else out)
        elif not report.resolved:
            (err if as_json else out).print(
                "[yellow]unresolved:[/] `--ticket PATH` writes an escalation ticket (PATH.md, PATH.json) with "
                f"everything checked; e.g. `{escape(resume_command(report.run_id, options.data_dir))} "
                "--ticket ticket`", highlight=False)
    raise typer.Exit(EXIT_RESOLVED if report.resolved else EXIT_UNRESOLVED)
