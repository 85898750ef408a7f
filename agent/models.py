"""The result types: a verification check's (scripts' JSON, executors, runner, CLI) and a pre-triage tool's."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field


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
    output_sha256: str = ""
    expected_cost_s: float = 0.0
    cached: bool = False

    def failing(self) -> list[Finding]:
        return [f for f in self.findings if f.severity in ("FAIL", "WARN")]


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
