"""Preflight as a pre-triage tool: always run (cheap), on the incident's hosts; known-bad combinations are FAIL
findings, skew WARN, and each raises the prior of the taxonomy label it is evidence for."""

from __future__ import annotations

import time

from agent.checks.runner import CheckRunner
from agent.executors.hosts import HostSpecError
from agent.incident import Incident
from agent.models import Finding, ToolResult
from agent.preflight import run

PRIOR = {"FAIL": 0.8, "WARN": 0.4}
TIMEOUT_CAP_S = 30.0  # per check; the checks of all hosts run in parallel


def preflight_pretriage(incident: Incident, runner: CheckRunner | None = None) -> ToolResult:
    """On the diagnosis' `runner` when given (its hosts, and its cache for the checks the DFS runs later)."""
    began = time.perf_counter()
    if runner is not None and not runner.checkable():
        return ToolResult(tool="preflight", status="skipped", reason="no host can be checked", duration_s=0.0)
    try:
        report = run.run(incident.hosts or ["local"], timeout_cap_s=TIMEOUT_CAP_S, runner=runner)
    except HostSpecError as exc:
        return ToolResult(tool="preflight", status="error", summary=f"could not start: {exc}",
                          reason=str(exc), duration_s=round(time.perf_counter() - began, 3))
    findings = [Finding(id=f.id, severity=f.severity, entity=",".join(f.hosts), message=f.message,
                        raw_line=f.source) for f in report.findings]
    priors: dict[str, float] = {}
    for f in report.findings:
        priors[f.label] = max(priors.get(f.label, 0.0), PRIOR.get(f.severity, 0.2))
    counts: dict[str, int] = {}
    for f in report.findings:
        for host in f.hosts:
            counts[host] = counts.get(host, 0) + (2 if f.severity == "FAIL" else 1)
    hosts = sorted(counts, key=lambda h: -counts[h])
    unknown = sorted({c for checks in report.unavailable.values() for c in checks})
    if report.findings:
        summary = (f"{sum(f.severity == 'FAIL' for f in report.findings)} known-bad combination(s), "
                   f"{sum(f.severity == 'WARN' for f in report.findings)} warning(s) on {len(report.hosts)} host(s): "
                   + "; ".join(f.message for f in report.findings[:3]))
    else:
        summary = f"no known-bad combination on {len(report.hosts)} host(s)"
    if unknown:
        summary += f" (not collected: {', '.join(unknown)})"
    return ToolResult(tool="preflight", status="ok", summary=summary, hosts=hosts, findings=findings, priors=priors,
                      data=report.model_dump(mode="json"), duration_s=round(time.perf_counter() - began, 3))
