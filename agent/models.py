"""The one result type for a verification check, used by scripts' JSON, executors, runner and CLI."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

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
