"""The result types: a verification check's (scripts' JSON, executors, runner, CLI) and a pre-triage tool's."""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, ValidationError

if TYPE_CHECKING:
    from agent.checks.manifest import CheckSpec
    from agent.executors.base import ScriptRun


class Verdict(StrEnum):
    """Nagios-style verdicts: FAIL confirms a hypothesis, PASS rejects it, UNKNOWN never rejects."""

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"

    @property
    def rank(self) -> int:
        return {"PASS": 0, "UNKNOWN": 1, "WARN": 2, "FAIL": 3}[self.value]


class Finding(BaseModel):
    id: str
    severity: str = "INFO"  # PASS | INFO | WARN | FAIL
    entity: str = ""
    message: str = ""
    raw_line: str = ""
    action: str = ""  # the vendor's recommended action ("reset GPU3"), when the check knows one


class CheckResult(BaseModel):
    """DESIGN.md's evidence object, plus the fields the runner adds (host, tier, reason, output hash)."""

    check: str
    host: str
    verdict: Verdict
    summary: str = ""
    findings: list[Finding] = Field(default_factory=list)
    metrics: dict[str, Any] = Field(default_factory=dict)
    duration_s: float = 0.0
    tier: str = "passive"
    targets: list[str] = Field(default_factory=list)
    cmds: list[str] = Field(default_factory=list)
    raw_excerpt: str = ""  # at most 4 KB of the tools' output, for the ticket
    reason: str = ""  # why the verdict is UNKNOWN (tool missing, timeout, approval required, ...)
    needs: str = ""  # UNKNOWN for want of an input the check was not given (a parameter, the job's logs)
    output_sha256: str = ""
    expected_cost_s: float = 0.0
    cached: bool = False

    def failing(self) -> list[Finding]:
        return [f for f in self.findings if f.severity in ("FAIL", "WARN")]


def to_result(spec: CheckSpec, host: str, run: ScriptRun) -> CheckResult:
    """Parse a script's single JSON line; anything else is UNKNOWN with the reason, never PASS."""
    base = {"check": spec.id, "host": host, "tier": spec.tier, "expected_cost_s": spec.expected_cost_s,
            "duration_s": round(run.duration_s, 3),
            "output_sha256": hashlib.sha256(run.stdout.encode()).hexdigest()}
    if run.error:
        return CheckResult(**base, verdict=Verdict.UNKNOWN, summary=f"could not run: {run.error}", reason=run.error)
    lines = [line for line in run.stdout.splitlines() if line.strip().startswith("{")]
    if run.rc != 0 or not lines:
        tail = (run.stderr or run.stdout).strip().splitlines()[-3:]
        reason = f"script exited {run.rc} without an evidence object: {' | '.join(tail) or 'no output'}"
        return CheckResult(**base, verdict=Verdict.UNKNOWN, summary=reason, reason=reason)
    try:
        data = json.loads(lines[-1])
        parsed = CheckResult.model_validate({**data, **base, "duration_s": data.get("duration_s", run.duration_s)})
    except (json.JSONDecodeError, ValidationError) as exc:
        reason = f"unparseable evidence object: {str(exc).splitlines()[0]}"
        return CheckResult(**base, verdict=Verdict.UNKNOWN, summary=reason, reason=reason)
    if data.get("check") != spec.id:
        reason = f"script reported check {data.get('check')!r}, expected {spec.id!r}"
        return CheckResult(**base, verdict=Verdict.UNKNOWN, summary=reason, reason=reason)
    if parsed.verdict == Verdict.UNKNOWN and not parsed.reason:
        parsed.reason = parsed.summary
    return parsed


class ToolResult(BaseModel):
    """What a pre-triage tool (L4 over job logs, Reveal over telemetry, preflight, KAIOPS) tells the agents: hosts
    to check first, findings, priors over taxonomy labels, and the tool's own output for the ticket."""

    tool: str
    status: Literal["ok", "skipped", "error"] = "ok"
    summary: str = ""  # one line for the progress view, the summary and the ticket
    hosts: list[str] = Field(default_factory=list)  # most suspicious first
    findings: list[Finding] = Field(default_factory=list)
    priors: dict[str, float] = Field(default_factory=dict)  # taxonomy label -> prior in [0, 1]
    data: dict[str, Any] = Field(default_factory=dict)  # the tool's own JSON output
    reason: str = ""  # why skipped or error
    duration_s: float = 0.0
