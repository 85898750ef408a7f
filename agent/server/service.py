"""What a caller may do with runs, whatever the protocol: the HTTP API (app.py) and the MCP server (agent/mcp) both
call these, so a run started, approved or answered through either is the same run under the same rules.

Every refusal is a `BadInput` carrying the HTTP status it would have (403 role, 404 no such run, 409 wrong state);
the MCP server shows its message as the tool's error.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from typing import Any, Literal

from agent.audit import approval_decision
from agent.events import AnsweredEvent, StatusEvent
from agent.incident import Incident
from agent.options import DiagnoseOptions, data_dir
from agent.report import Report
from agent.runs import new_run_id
from agent.server.config import Caller, ServerConfig
from agent.server.inputs import BadInput, NewRun, RunCreated, Upload, build_incident, save_uploads
from agent.server.runs import RunManager
from agent.server.store import RunConflict, RunStore

TicketFormat = Literal["json", "md"]


@dataclass
class RunService:
    config: ServerConfig
    store: RunStore
    manager: RunManager

    # ---- starting a run -----------------------------------------------------------------------------------
    def prepare(self, new: NewRun, who: Caller) -> tuple[Incident, list[Upload]]:
        """Everything a new run is checked for before anything is written: the role its approval policy needs,
        a configured model, hosts in the server's allowlist, text input."""
        request = new.request
        if request.approval == "all" and not who.operator:
            raise BadInput(f"{who.name} is a viewer: approval=all (run every active check) needs the operator role",
                           403)
        if request.llm == "openai" and not self.config.model:
            raise BadInput("llm=openai: this server has no model configured (aidai serve --base-url --model)")
        if request.prometheus and not self.config.prometheus:
            raise BadInput("prometheus=true: this server has no Prometheus configured (aidai serve --prometheus URL)")
        return build_incident(new, self.config.targets)

    def create(self, new: NewRun, incident: Incident, attachments: list[Upload], who: Caller) -> RunCreated:
        """Save the uploads and the run row, then queue it (blocking: call it off the event loop)."""
        request = new.request
        run_id = new_run_id()
        folder = data_dir(DiagnoseOptions(data_dir=self.config.data_dir)) / "runs" / "uploads" / run_id
        incident = save_uploads(incident, attachments, folder)
        options = self.manager.options(list(request.hosts), llm=request.llm, approval=request.approval,
                                       feedback_rounds=request.feedback_rounds, operator=who.name,
                                       prometheus=self.config.prometheus if request.prometheus is not False else None)
        try:
            self.store.create(run_id, title=first_line(incident.text), hosts=list(incident.hosts),
                              created_by=who.name, options=asdict(options), incident=incident.model_dump(mode="json"))
        except Exception:
            shutil.rmtree(folder, ignore_errors=True)  # no run row, no orphan upload
            raise
        self.manager.emit(run_id, StatusEvent(status="queued", waiting_for=None, by=who.name))
        self.manager.metrics.started.inc()
        self.manager.submit(run_id)
        return RunCreated(id=run_id, status="queued")

    # ---- reading runs -------------------------------------------------------------------------------------
    def get(self, run_id: str) -> dict[str, Any]:
        run = self.store.get(run_id)
        if run is None:
            raise BadInput(f"no run {run_id!r}", 404)
        return run

    def record(self, run_id: str) -> dict[str, Any]:
        """The run as the page shows it: status, what it waits for, the approvals given, the result once done."""
        run = self.get(run_id)
        out = summary(run) | {"pending": run.get("pending"), "error": run.get("error"),
                              "environment": run["incident"].get("environment", ""),
                              "incident": run["incident"].get("text", ""), "result": None,
                              "approvals": [decision(e) for e in self.store.events_of(run_id, "answered")
                                            if e.get("kind") == "approval"]}
        if run.get("report"):
            out["result"] = Report.model_validate(run["report"]).contract()
        return out

    def ticket(self, run_id: str, format: TicketFormat = "json", channel: str = "page") -> dict[str, Any] | str:
        """The redacted escalation ticket of a finished run: JSON, or Markdown worded for `channel`."""
        run = self.get(run_id)
        if not run.get("report"):
            raise BadInput(f"run {run_id} is {run['status']}: the ticket exists once it is done", 409)
        from agent.runs import run_ticket
        from agent.ticket import render_markdown

        # the run's own mapping: the ticket names hosts and secrets by the placeholders the LLM saw; on the page the
        # reader is the on-call engineer of the nodes the server targets, who needs their names to act on them
        data = run_ticket(Report.model_validate(run["report"]), DiagnoseOptions(**run["options"]),
                          own_hosts=channel == "page")
        return render_markdown(data, channel) if format == "md" else data

    # ---- answers ------------------------------------------------------------------------------------------
    def approve(self, run_id: str, checks: dict[str, bool], who: Caller) -> dict[str, Any]:
        """An operator's answer to an approval request: which of the listed active checks may run."""
        if not who.operator:
            raise BadInput(f"{who.name} is a viewer: approving active checks needs the operator role", 403)
        run = self.get(run_id)
        pending = run.get("pending") or {}
        asked = {c.get("id") for c in pending.get("checks", [])}
        if pending.get("kind") == "approval" and (extra := sorted(set(checks) - asked)):
            raise BadInput(f"check(s) {', '.join(extra)} were not asked for; asked: {', '.join(sorted(asked))}")
        answer = {c: bool(checks.get(c, False)) for c in sorted(asked)} | {"approved_by": who.name}
        self._take(run_id, "approval", answer)
        made = approval_decision(answer)
        self.manager.answered(run_id, AnsweredEvent(kind="approval", by=who.name, node=pending.get("node"),
                                                    checks=answer, decision=made["decision"],
                                                    approved=made["approved"], declined=made["declined"]))
        return {"id": run_id, "status": "queued", **made}

    def answer(self, run_id: str, text: str, who: Caller) -> dict[str, Any]:
        """An answer to an exploration question (empty: escalate)."""
        self.get(run_id)
        if "\x00" in text:
            raise BadInput("the answer contains NUL characters: send text", 415)
        self._take(run_id, "feedback", text)
        self.manager.answered(run_id, AnsweredEvent(kind="feedback", by=who.name, text=text[:2000]))
        return {"id": run_id, "status": "queued"}

    def _take(self, run_id: str, kind: str, answer: Any) -> None:
        try:
            self.store.take_answer(run_id, kind, answer)
        except RunConflict as exc:
            raise BadInput(str(exc), 409) from None


def decision(event: dict[str, Any]) -> dict[str, Any]:
    """An approval answer as the run record shows it."""
    made = approval_decision(event.get("checks") or {})
    return {"node": event.get("node"), "ts": event.get("ts"), **made, "by": event.get("by") or made["by"]}


def first_line(text: str) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line[:160]


def summary(run: dict[str, Any]) -> dict[str, Any]:
    report = run.get("report") or {}
    return {"id": run["id"], "status": run["status"], "created": run["created"], "updated": run["updated"],
            "title": run["title"], "hosts": run["hosts"], "created_by": run["created_by"],
            "waiting_for": (run.get("pending") or {}).get("kind"),
            "resolved": report.get("resolved") if report else None,
            "root_causes": [c["label"] for c in report.get("root_causes", [])] if report else []}
