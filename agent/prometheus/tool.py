"""The fleet's dcgm-exporter metrics in Prometheus as a pre-triage tool (`--prometheus URL`): which of the
incident's hosts to check first, findings naming host, GPU, metric and values, and priors over the taxonomy leaves
the evidence points to. A head start only: the checks still confirm.

Prometheus that cannot be reached or answers errors makes the tool fail cleanly (status error, the diagnosis goes
on); hosts it has no series for are listed as not seen, never as healthy.
"""

from __future__ import annotations

import socket
import time
from functools import cache
from typing import TYPE_CHECKING

from agent.executors.hosts import parse_spec
from agent.incident import Incident
from agent.models import Finding, ToolResult
from agent.prometheus.client import Prometheus, PrometheusError
from agent.prometheus.triage import TriageReport, Window, triage

if TYPE_CHECKING:
    from agent.checks.runner import CheckRunner

PRIOR = {"FAIL": 0.6, "WARN": 0.4}  # metrics say where and what, not why: never as strong as a failing check
MAX_SHOWN = 3


def host_names(hosts: list[str], runner: CheckRunner | None = None) -> dict[str, list[str]]:
    """The diagnosis' host -> the names Prometheus may know it by: the hostname its inventory reported (what
    dcgm-exporter puts in `Hostname`), the host of its ssh:// spec, this machine's name for `local`."""
    out: dict[str, list[str]] = {}
    for host in hosts:
        names: list[str] = []
        inventory = runner.inventories.get(host) if runner is not None else None
        if inventory is not None and inventory.hostname:
            names.append(inventory.hostname)
        if host.startswith("ssh://"):
            names.append(parse_spec(host).target or host)
        elif host == "local":
            names.append(socket.gethostname())
        else:
            names.append(host)
        out[host] = list(dict.fromkeys(n for n in names if n))
    return out


@cache
def temp_limits() -> dict[str, float]:
    """GPU model name (dcgm-exporter's modelName) -> the shipped profile's temperature limit, where it has one."""
    from agent.checks.manifest import load_profiles

    return {str(p["gpu_name"]): float(p["temp_limit_c"]) for p in load_profiles().values()
            if p.get("gpu_name") and p.get("temp_limit_c") is not None}


def priors(report: TriageReport) -> dict[str, float]:
    """Each label the evidence points to, and its ancestors (the planner ranks one level at a time)."""
    out: dict[str, float] = {}
    for host in report.hosts:
        for label, severity in host.labels.items():
            score = PRIOR.get(severity, 0.0)
            parts = label.split(".")
            for depth in range(1, len(parts) + 1):
                key = ".".join(parts[:depth])
                if score:
                    out[key] = max(out.get(key, 0.0), score)
    return out


def findings(report: TriageReport) -> list[Finding]:
    """Evidence first (host by host in rank order), then what could not be seen, then history."""
    loud = [f for h in report.hosts for f in h.findings if f.severity in ("FAIL", "WARN")]
    unseen = [Finding(id="prometheus_no_series", severity="INFO", entity=h.host,
                      message=f"{h.host}: no dcgm-exporter series in Prometheus for {', '.join(h.names)} "
                              f"(Hostname or instance) in the incident's window: not checked; {h.why_none}")
              for h in report.unseen()]
    missing = [Finding(id="prometheus_not_exported", severity="INFO", entity=h.host,
                       message=f"{h.host}: its exporter does not export {', '.join(h.not_exported)}: not judged")
               for h in report.hosts if h.series and h.not_exported]
    quiet = [f for h in report.hosts for f in h.findings if f.severity not in ("FAIL", "WARN")]
    return [*loud, *unseen, *missing, *quiet]


def summarize(report: TriageReport, window: Window) -> str:
    seen = [h for h in report.hosts if h.series]
    ranked = report.ranked()
    parts = []
    for h in ranked[:MAX_SHOWN]:
        top = [f for f in h.findings if f.severity in ("FAIL", "WARN")][:MAX_SHOWN]
        shown = [f"{f.severity} {f.entity.removeprefix(h.host).strip()} {f.id.removeprefix('prometheus_')}"
                 for f in top]
        parts.append(f"{h.host} ({', '.join(shown)})")
    text = (f"{len(ranked)} of {len(seen)} host(s) with GPU errors in dcgm-exporter metrics ({window.describe()})"
            + (": " + " | ".join(parts) if parts else ": none on the hosts Prometheus has"))
    if report.unseen():
        text += f"; no series for {', '.join(h.host for h in report.unseen())} (not checked)"
    return text


def prometheus_pretriage(incident: Incident, url: str | None = None, runner: CheckRunner | None = None,
                         now: float | None = None) -> ToolResult | None:
    """None without a URL (nothing to ask)."""
    if not url:
        return None
    began = time.perf_counter()
    hosts = list(runner.executors) if runner is not None else list(incident.hosts or ["local"])
    window = Window.around(incident.at, now)
    try:
        with Prometheus(url) as prom:
            report = triage(prom, host_names(hosts, runner), window, temp_limits())
    except (PrometheusError, ValueError) as exc:
        return ToolResult(tool="prometheus", status="error", summary=f"Prometheus not read: {exc}", reason=str(exc),
                          duration_s=round(time.perf_counter() - began, 3))
    data = report.model_dump(mode="json")
    if not any(h.series for h in report.hosts):
        reason = (f"no dcgm-exporter series in {report.url} for {', '.join(hosts)} between {window.describe()}: "
                  "nothing checked (is the exporter scraped, and does its Hostname or instance name these hosts?)")
        return ToolResult(tool="prometheus", status="skipped", summary=reason, reason=reason,
                          findings=findings(report), data=data, duration_s=round(time.perf_counter() - began, 3))
    return ToolResult(tool="prometheus", status="ok", summary=summarize(report, window),
                      hosts=[h.host for h in report.ranked()], findings=findings(report), priors=priors(report),
                      data=data, duration_s=round(time.perf_counter() - began, 3))
