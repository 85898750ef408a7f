"""Reveal as a pre-triage tool: when the incident carries a telemetry file, detect on it; anomalous hosts come
first, one finding per (host, subsystem), and priors over the taxonomy labels the implicated subsystems and
signals point to (a small declarative table: the first matching row per window wins)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from agent.incident import Incident
from agent.models import Finding, ToolResult
from agent.reveal import detect, frame
from agent.reveal.detect import WindowOut
from agent.taxonomy import load_taxonomy

# (primary subsystem, regex over the window's metric names or "imbalance", labels); checked in order. A host whose
# CPU is off its peers' is a straggler; a host-local network, memory or storage fault keeps its own labels.
PRIOR_TABLE: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("gpu", r"temp|thermal|throttle", ("GPU.THERMAL.OVERHEATING_THROTTLE", "GPU.THERMAL")),
    ("gpu", r"power", ("GPU.POWER.PSU_INSUFFICIENT", "GPU.POWER")),
    ("gpu", r"ecc|retired|remap", ("GPU.MEMORY.UNCORRECTABLE_ECC", "GPU.MEMORY")),
    ("gpu", r"pcie", ("INTERCONNECT_NETWORKING.PCIE.RISER_OR_SLOT_FAULT", "INTERCONNECT_NETWORKING.PCIE")),
    ("gpu", r".", ("GPU.PERFORMANCE.SLOW_GPU_STRAGGLER",)),
    ("network", r"ib|infiniband", ("INTERCONNECT_NETWORKING.IB.LINK_FLAPPING", "INTERCONNECT_NETWORKING.IB")),
    ("network", r".", ("INTERCONNECT_NETWORKING",)),
    ("memory", r".", ("OTHER.PLATFORM.HOST_MEMORY_FAULT", "USER_APPLICATION.CONFIG.BATCH_SIZE_OOM")),
    ("storage", r".", ("OTHER.STORAGE",)),
    ("cpu", "imbalance", ("GPU.PERFORMANCE.SLOW_GPU_STRAGGLER",)),
    ("cpu", r".", ("FRAMEWORK_LIBRARY.PYTORCH.DATALOADER_DEADLOCK", "OTHER.PLATFORM.HOST_HARDWARE_FAULT")),
)
MAX_PRIOR = 0.6  # telemetry says where, not why: never as strong as a failing check


def labels_for(window: WindowOut) -> tuple[str, ...]:
    if not window.subsystems:
        return ()
    primary = window.subsystems[0]
    names = " ".join(s.metric.lower() for s in window.signals if s.subsystem == primary)
    for subsystem, pattern, labels in PRIOR_TABLE:
        if subsystem != primary:
            continue
        if window.imbalance if pattern == "imbalance" else re.search(pattern, names):
            return labels
    return ()


def reveal_pretriage(incident: Incident) -> ToolResult | None:
    path = incident.attachments.get("telemetry")
    if not path:
        return None
    began = time.perf_counter()
    try:
        report = detect.run(Path(path))
    except (frame.FrameError, ValueError) as exc:
        return ToolResult(tool="reveal", status="error", summary=f"cannot analyse {path}: {exc}",
                          reason=str(exc), duration_s=round(time.perf_counter() - began, 3))
    known = set(load_taxonomy().labels())
    votes: dict[str, float] = {}
    for window in report.windows:
        for rank, label in enumerate(labels_for(window)):
            if label in known:
                votes[label] = votes.get(label, 0.0) + window.score / (rank + 1)
    top = max(votes.values(), default=0.0)
    priors = {label: round(MAX_PRIOR * v / top, 3) for label, v in votes.items()} if top else {}
    findings = []
    for host in report.hosts:
        for subsystem, count in sorted(host.subsystems.items(), key=lambda kv: -kv[1]):
            windows = [w for w in report.windows if w.host == host.host and w.subsystems[:1] == [subsystem]]
            pairs = sorted({f"{s.metric}:{s.feature}" for w in windows for s in w.signals[:3]})[:6]
            detectors = sorted({s.detector for w in windows for s in w.signals})
            span = f"{windows[0].start:.0f}–{windows[-1].end:.0f}"
            findings.append(Finding(id=f"reveal_{subsystem}", severity="WARN", entity=host.host,
                                    message=f"{count} anomalous window(s) attributed to {subsystem} ({span}); "
                                            f"signals {', '.join(pairs)}",
                                    raw_line=f"detectors {', '.join(detectors)}"))
        for item in host.static_imbalance:
            findings.append(Finding(id="reveal_static_imbalance", severity="WARN", entity=host.host,
                                    message=f"{item['metric']} = {item['value']} vs peers' median "
                                            f"{item['peer_median']}"))
    hosts = [h.host for h in report.hosts if h.anomalous_windows or h.static_imbalance]
    summary = (f"{len(report.windows)} of {report.total_windows} windows anomalous"
               + (f", most on {hosts[0]} ({report.hosts[0].anomalous_windows})" if hosts else "")
               + (f"; subsystems {', '.join(sorted({s for h in report.hosts for s in h.subsystems}))}"
                  if report.windows else ""))
    return ToolResult(tool="reveal", status="ok", summary=summary, hosts=hosts, findings=findings, priors=priors,
                      data=report.model_dump(mode="json"), duration_s=round(time.perf_counter() - began, 3))
