"""Runs as stored in the data dir's `runs/`: each run's options and incident (`<run>.json`), its LangGraph
checkpoint (`checkpoints.sqlite`, or the team's Postgres), the redaction mapping (`<run>.redaction.json`), the audit
log (`<run>.audit.jsonl`, agent/audit.py) and the verification rounds after a fix (`<run>.verify.jsonl`)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agent.audit import audit_path, local_user, read
from agent.checkpoints import open_store
from agent.executors.hosts import HostSpecError, parse_spec
from agent.graph.state import DiagnosisState
from agent.incident import Incident
from agent.options import DiagnoseOptions, data_dir
from agent.redact import Redactor
from agent.report import Report


class RunNotFound(LookupError):
    pass


def runs_dir(options: DiagnoseOptions) -> Path:
    return data_dir(options) / "runs"


def mapping_path(options: DiagnoseOptions, run_id: str) -> Path:
    return runs_dir(options) / f"{run_id}.redaction.json"


def run_ticket(report: Report, options: DiagnoseOptions, own_hosts: bool = False) -> dict[str, Any]:
    """The run's redacted ticket, with the placeholders the LLM saw (the run's mapping); values first seen in the
    ticket join the mapping, so the local report can restore them too.

    OWN_HOSTS: the reader owns the hosts the run checked (the provider's on-call page for its own nodes): their names
    stay, since the action "reset GPU3 on <host-1>" is useless to the one who must do it. Secrets and every other
    name stay redacted."""
    from agent.ticket import ticket_data

    rounds = load_rounds(runs_dir(options), report.run_id) if options.checkpoint else []
    redactor = Redactor(hostnames=report.hosts, usernames=[options.operator or local_user(),
                                                           *ssh_users(options.hosts),
                                                           *(by for r in rounds if (by := r.get("by")))])
    path = mapping_path(options, report.run_id)
    redactor.load(path)
    data = ticket_data(report, redactor=redactor, verifications=rounds)
    if options.checkpoint:
        redactor.save(path)
    if own_hosts:
        data = redactor.restore_names(data, [*report.hosts, *(e.hostname for e in report.inventory if e.hostname)])
    return data


def ssh_users(specs: list[str]) -> list[str]:
    """The login names the host specs carry (ssh://USER@..., slurm:JOBID?user=USER): redacted like host names."""
    users: list[str] = []
    for text in specs:
        try:
            spec = parse_spec(text)
        except HostSpecError:  # not a spec (a name the incident gave): it carries no login
            continue
        if spec.user:
            users.append(spec.user)
    return users


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def save_run(options: DiagnoseOptions, run_id: str, incident: Incident) -> Path:
    path = runs_dir(options) / f"{run_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"run_id": run_id, "options": asdict(options),
                                "incident": incident.model_dump(mode="json")}, indent=1))
    return path


def saved_state(options: DiagnoseOptions, run_id: str) -> DiagnosisState | None:
    """A run's last checkpointed state, read without its hosts, reasoner or knowledge stores (None when none)."""
    from agent.graph.build import DiagnosisGraph

    saver, close = open_store(options.checkpoint_url, runs_dir(options) / "checkpoints.sqlite")
    try:
        graph = DiagnosisGraph.without_hosts().build(saver)
        values = graph.get_state({"configurable": {"thread_id": run_id}}).values
        return DiagnosisState.model_validate(values) if values else None
    finally:
        close()


def load_run(run_id: str, data: str | None = None) -> tuple[DiagnoseOptions, Incident]:
    path = runs_dir(DiagnoseOptions(data_dir=data)) / f"{run_id}.json"
    if not path.is_file():
        raise RunNotFound(f"no run {run_id!r} in {path.parent}")
    saved = json.loads(path.read_text())
    return DiagnoseOptions(**saved["options"]), Incident.model_validate(saved["incident"])


def verify_path(runs: Path, run_id: str) -> Path:
    audit_path(runs, run_id)  # the same run-id rules
    return runs / f"{run_id}.verify.jsonl"


def load_rounds(runs: Path, run_id: str) -> list[dict[str, Any]]:
    """The run's verify rounds, oldest first ([] when none); a torn last line is skipped."""
    path = verify_path(runs, run_id)
    if not path.is_file():
        return []
    events, _ = read(path)
    return [e for e in events if e.get("event") == "verification"]
