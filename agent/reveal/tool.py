"""Reveal as a pre-triage tool: when the incident carries a telemetry file, judge it as `aidai reveal detect FILE`
does, against the normal learned from the file's own start (and from an earlier healthy run of the same job when
one is attached as the telemetry baseline). Anomalous hosts come first, one finding per (host, subsystem), and
priors over the taxonomy labels the implicated subsystems and metrics point to (a small declarative table: the
first matching row per window wins)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from agent.incident import Incident
from agent.models import Finding, ToolResult
from agent.reveal import frame, normal
from agent.taxonomy import load_taxonomy

# (primary subsystem, regex over the window's metric names or "off_peers", labels); checked in order. A host whose
# CPU is off its peers' is a straggler; a host-local network, memory or storage fault keeps its own labels.
PRIOR_TABLE: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("gpu", r"temp|thermal|throttle", ("GPU.THERMAL.OVERHEATING_THROTTLE", "GPU.THERMAL")),
    ("gpu", r"power", ("GPU.POWER.PSU_INSUFFICIENT", "GPU.POWER")),
    ("gpu", r"ecc|retired|remap", ("GPU.MEMORY.UNCORRECTABLE_ECC", "GPU.MEMORY")),
    ("gpu", r"pcie", ("INTERCONNECT_NETWORKING.PCIE.RISER_OR_SLOT_FAULT", "INTERCONNECT_NETWORKING.PCIE")),
    ("gpu", r".", ("GPU.PERFORMANCE.SLOW_GPU_STRAGGLER",)),
    ("network", r"ib|infiniband", ("INTERCONNECT_NETWORKING.IB.LINK_FLAPPING", "INTERCONNECT_NETWORKING.IB")),
    ("network", r".", ("INTERCONNECT_NETWORKING",)),
    # the host's memory, not the GPU's: a job near its memory limit, or a faulty DIMM
    ("memory", r".", ("USER_APPLICATION.CODE.HOST_MEMORY_EXHAUSTED", "OTHER.PLATFORM.HOST_MEMORY_FAULT")),
    ("storage", r".", ("OTHER.STORAGE",)),
    ("cpu", "off_peers", ("GPU.PERFORMANCE.SLOW_GPU_STRAGGLER",)),
    ("cpu", r".", ("FRAMEWORK_LIBRARY.PYTORCH.DATALOADER_DEADLOCK", "OTHER.PLATFORM.HOST_HARDWARE_FAULT")),
)
MAX_PRIOR = 0.6  # telemetry says where, not why: never as strong as a failing check


def labels_for(window: normal.Window, off_peers: bool) -> tuple[str, ...]:
    """The labels one anomalous window points to; `off_peers`: its deviation is relative to the job's other hosts
    (three or more), so it is this host's alone."""
    if not window.subsystems:
        return ()
    primary = window.subsystems[0]
    names = " ".join(s.metric.lower() for s in window.signals if s.subsystem == primary)
    for subsystem, pattern, labels in PRIOR_TABLE:
        if subsystem != primary:
            continue
        if off_peers if pattern == "off_peers" else re.search(pattern, names):
            return labels
    return ()


def reveal_pretriage(incident: Incident) -> ToolResult | None:
    path = incident.attachments.get("telemetry")
    if not path:
        return None
    baseline = incident.attachments.get("telemetry_baseline")
    began = time.perf_counter()
    try:
        tel = frame.load(Path(path))
        # a file too short to learn from its own start (telemetry kept only around the failure) is judged against
        # the baseline alone, when there is one
        span = max(float(t[-1]) for t in tel.times.values()) - min(float(t[0]) for t in tel.times.values())
        learn_start = not baseline or span >= normal.LEARN_S + 2 * normal.WINDOW_S
        report = normal.run(tel, [Path(baseline)] if baseline else [], learn_start=learn_start)
        if not report.judged_windows:
            raise ValueError(f"its {span:.0f} s are all the normal learned from its start: nothing left to judge "
                             "(attach an earlier healthy run of the same job with --telemetry-baseline)")
    except (frame.FrameError, ValueError, OSError) as exc:
        return ToolResult(tool="reveal", status="error", summary=f"cannot analyse {path}: {exc}",
                          reason=str(exc), duration_s=round(time.perf_counter() - began, 3))
    known = set(load_taxonomy().labels())
    votes: dict[str, float] = {}
    for window in report.windows:
        for rank, label in enumerate(labels_for(window, report.peers)):
            if label in known:
                votes[label] = votes.get(label, 0.0) + window.score / (rank + 1)
    top = max(votes.values(), default=0.0)
    priors = {label: round(MAX_PRIOR * v / top, 3) for label, v in votes.items()} if top else {}
    findings = []
    for host in report.hosts:
        events = [e for e in report.events if e.host == host.host and e.subsystems]
        for subsystem in dict.fromkeys(e.subsystems[0] for e in events):
            mine = sorted((e for e in events if e.subsystems[0] == subsystem), key=lambda e: e.start)
            metrics = list(dict.fromkeys(m for e in mine for m in e.metrics))[:6]
            spans = ", ".join(f"{e.start - report.origin:.0f}–{e.end - report.origin:.0f} s" for e in mine[:3])
            findings.append(Finding(
                id=f"reveal_{subsystem}", severity="WARN", entity=host.host,
                message=f"{sum(e.windows for e in mine)} anomalous window(s) attributed to {subsystem} ({spans} "
                        f"from the file's start, peak {max(e.peak for e in mine):.1f} sigmas); metrics that moved: "
                        f"{', '.join(metrics)}",
                raw_line=f"normal learned from {host.learned_from}"))
    hosts = [h.host for h in report.hosts if h.anomalous_windows]
    learned = " and ".join(part for part, on in ((f"its first {report.learn_s:g} s", "start" in report.mode),
                                                 ("the baseline", bool(report.baseline_files))) if on)
    summary = (f"{len(report.windows)} of {report.judged_windows} windows anomalous against the normal learned from "
               f"{learned}"
               + (f", most on {hosts[0]} ({report.hosts[0].anomalous_windows})" if hosts else "")
               + (f"; subsystems {', '.join(sorted({s for e in report.events for s in e.subsystems}))}"
                  if report.events else ""))
    return ToolResult(tool="reveal", status="ok", summary=summary, hosts=hosts, findings=findings, priors=priors,
                      data=report.model_dump(mode="json"), duration_s=round(time.perf_counter() - began, 3))
