"""The diagnosis report: what the CLI prints, `--json` emits and the escalation ticket is written from."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agent.graph.state import load_judgements, load_results
from agent.inventory import Expectations
from agent.models import CheckResult, ToolResult
from agent.reasoning.base import ExplorationHypothesis, LeafJudgement, PastIncident, Usage
from agent.taxonomy import Taxonomy


class RootCause(BaseModel):
    label: str
    confidence: float
    evidence: list[str]  # "check: finding" lines that confirmed it
    why: str
    severity: str = ""
    runbook: str = ""


class PathStep(BaseModel):
    pipeline: int
    node: str
    action: str  # enter | rank | early_stop | confirmed | rejected | inconclusive | explore | feedback | start
    detail: str = ""


class Report(BaseModel):
    run_id: str
    resolved: bool
    pipeline: int  # 1 historical, 2 taxonomy DFS, 3 exploration (after feedback); 0 unresolved
    root_causes: list[RootCause] = Field(default_factory=list)
    explanation: str = ""
    title: str = ""
    incident: str = ""
    environment: str = ""
    hosts: list[str] = Field(default_factory=list)
    inventory: list[Expectations] = Field(default_factory=list)  # per host: what it is, what it was judged by
    path: list[PathStep] = Field(default_factory=list)
    hypotheses: list[LeafJudgement] = Field(default_factory=list)  # every leaf tested, with its verdict
    results: list[CheckResult] = Field(default_factory=list)  # every check run, one per (host, check)
    similar: list[PastIncident] = Field(default_factory=list)
    pretriage: list[ToolResult] = Field(default_factory=list)  # L4, Reveal, preflight ... on the attachments
    exploration: list[ExplorationHypothesis] = Field(default_factory=list)
    feedback: list[str] = Field(default_factory=list)
    checks_run: int = 0
    check_seconds: float = 0.0
    reasoner: str = "offline"
    llm_calls: int = 0
    tokens: int = 0
    llm_fallbacks: int = 0
    wall_s: float = 0.0
    stopped: dict[str, str] = Field(default_factory=dict)  # {limit, message} when a limit ended the investigation
    spent: dict[str, Any] = Field(default_factory=dict)  # checks, wall_s, tokens, steps used (agent/limits.py)

    def contract(self) -> dict[str, Any]:
        """The `--json` output: DESIGN.md's report contract first, the details after it."""
        head = {"resolved": self.resolved, "pipeline": self.pipeline,
                "root_causes": [{"label": c.label, "confidence": c.confidence, "evidence": c.evidence}
                                for c in self.root_causes],
                "path": [f"{s.node}:{s.action}" for s in self.path if s.action not in ("rank", "start")],
                "checks_run": self.checks_run, "check_seconds": round(self.check_seconds, 3),
                "llm_calls": self.llm_calls, "tokens": self.tokens}
        return head | {"run_id": self.run_id, "details": self.model_dump(mode="json", exclude={"incident"})
                       | {"could_not_check": {e.host: e.cannot_check for e in self.inventory if e.cannot_check}}}


def _evidence_lines(judgement: LeafJudgement, results: list[CheckResult]) -> list[str]:
    """Each matched rule with the finding's own message, e.g. `xid_scan:xid_48@GPU 0000:5d (FAIL): Xid 48 ...`."""
    messages = {(r.check, f.id, f.entity or r.host): f.message for r in results for f in r.findings}
    lines = []
    for entry in judgement.evidence.matched:
        check, _, rest = entry.partition(":")
        finding, _, where = rest.rpartition(" (")[0].partition("@")
        message = messages.get((check, finding, where), "")
        lines.append(f"{entry}: {message}" if message else entry)
    return lines


def build_report(run_id: str, state: dict[str, Any], taxonomy: Taxonomy, *, usage: Usage | None = None,
                 reasoner: str = "offline", wall_s: float = 0.0) -> Report:
    conclusion = state.get("conclusion") or {}
    confirmed = [LeafJudgement.model_validate(j) for j in conclusion.get("root_causes", [])]
    results = sorted(load_results(state), key=lambda r: (r.host, r.check))  # type: ignore[arg-type]
    causes = []
    for judgement in confirmed:
        node = taxonomy.node(judgement.label)
        causes.append(RootCause(label=judgement.label, confidence=judgement.confidence,
                                evidence=_evidence_lines(judgement, results), why=judgement.why,
                                severity=node.severity, runbook=node.runbook))
    summary = state.get("summary") or {}
    incident = state.get("incident") or {}
    hosts = sorted({r.host for r in results} | set(state.get("inventory", {})))
    usage = usage or Usage()
    return Report(
        run_id=run_id, resolved=bool(conclusion.get("resolved")), pipeline=int(conclusion.get("pipeline", 0)),
        root_causes=causes, explanation=str(conclusion.get("explanation", "")), title=summary.get("title", ""),
        incident=incident.get("text", ""), environment=incident.get("environment", ""), hosts=hosts,
        inventory=[Expectations.model_validate(saved["expectations"]) for saved in state.get("inventory", {}).values()],
        path=[PathStep.model_validate(step) for step in state.get("path", [])],
        hypotheses=load_judgements(state),  # type: ignore[arg-type]
        results=results, similar=[PastIncident.model_validate(p) for p in state.get("similar", [])],
        pretriage=[ToolResult.model_validate(t) for t in state.get("pretriage", [])],
        exploration=[ExplorationHypothesis.model_validate(h) for h in state.get("exploration", [])],
        feedback=list(state.get("feedback", [])), checks_run=len(results),
        check_seconds=round(sum(r.duration_s for r in results), 3), reasoner=reasoner,
        llm_calls=usage.calls, tokens=usage.tokens, llm_fallbacks=usage.fallbacks, wall_s=round(wall_s, 3),
        stopped=dict(conclusion.get("stopped") or {}),
        spent=dict(state.get("spent") or {}))
