"""Attribution (Reveal §4.4): for each anomalous window, the metric–feature pairs that drove each agreeing
detector, the subsystems they belong to (jointly, strongest first), and cross-host imbalance of static metrics."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from agent.reveal.detectors import DETECTORS, IMBALANCE, Detection
from agent.reveal.features import FeatureTable
from agent.reveal.frame import MetricInfo, Telemetry

TOP_SIGNALS = 3  # per detector
MIN_SIGNAL_Z = 3.0  # a feature under three robust sigmas does not explain anything
SUBSYSTEM_SHARE = 0.5  # a subsystem is implicated when its weight is at least half the strongest one's
# Symptoms of another subsystem's fault (causal priority): tasks blocked in I/O wait show up as CPU iowait and
# blocked processes, but the cause is the device they wait on. Charged to the cause when it deviates too,
# otherwise to the CPU where the metric lives.
SYMPTOMS: tuple[tuple[str, str], ...] = ((r"wait%|iowait|blocked", "storage"),)
IMBALANCE_Z = 4.0
IMBALANCE_REL = 0.1  # and at least 10 % off the peers' median, so tiny absolute spreads do not count


@dataclass
class Signal:
    metric: str
    feature: str
    detectors: list[str]
    z: float
    subsystem: str


def window_signals(det: Detection, row: int, table: FeatureTable, subsystem: dict[str, str]) -> list[Signal]:
    found: dict[tuple[str, str], Signal] = {}
    for name in DETECTORS:
        if not det.flags[name][row]:
            continue
        contrib = det.contributions[name][row]
        for j in np.argsort(contrib)[::-1][:TOP_SIGNALS]:
            z = float(det.z[row, j])
            if abs(z) < MIN_SIGNAL_Z:
                continue
            metric, feature = table.columns[j]
            key = (metric, feature)
            if key not in found:
                found[key] = Signal(metric, feature, [], round(z, 2), subsystem.get(metric, "other"))
            found[key].detectors.append(name)
    return sorted(found.values(), key=lambda s: -abs(s.z))


def subsystems_of(det: Detection, row: int, table: FeatureTable, subsystem: dict[str, str]) -> list[str]:
    """Subsystems by their share of the window's deviation: log(1 + |z|) summed over every feature at or above
    MIN_SIGNAL_Z (the log so that one heavy-tailed counter cannot outvote several moderately deviating signals),
    with the symptom table applied (a stall's iowait is charged to storage when storage itself deviates)."""
    z = np.abs(det.z[row])
    weight: dict[str, float] = {}
    symptoms: list[tuple[str, float]] = []
    for j in np.flatnonzero(z >= MIN_SIGNAL_Z):
        metric = table.columns[j][0]
        share = float(np.log1p(z[j]))
        cause = next((c for pattern, c in SYMPTOMS if re.search(pattern, metric, re.I)), None)
        if cause is not None:
            symptoms.append((cause, share))
        else:
            own = subsystem.get(metric, "other")
            weight[own] = weight.get(own, 0.0) + share
    for cause, share in symptoms:
        target = cause if weight.get(cause, 0.0) > 0 else "cpu"
        weight[target] = weight.get(target, 0.0) + share
    if not weight:
        return []
    top = max(weight.values())
    return [k for k, w in sorted(weight.items(), key=lambda kv: -kv[1]) if w >= SUBSYSTEM_SHARE * top]


def is_imbalance(det: Detection, row: int) -> bool:
    """The host is off its peers in this window (the cross-host score over detectors.PEER_Z): a host-local
    anomaly, such as a slow or throttled host, rather than a phase of the whole job. The subsystems say which
    part of the host deviates."""
    return bool(det.flags.get(IMBALANCE, np.zeros(row + 1, dtype=bool))[row])


def static_imbalance(tel: Telemetry, metrics: list[MetricInfo]) -> list[dict[str, object]]:
    """Per static metric (temperatures, link widths, limits), hosts whose level departs from the others'.
    Excluded from single-host detection (they barely move) but exactly what a thermal or PCIe imbalance is."""
    if len(tel.hosts) < 3:
        return []
    names = [m.name for m in tel.metrics]
    out: list[dict[str, object]] = []
    for metric in metrics:
        if metric.category != "static":
            continue
        i = names.index(metric.name)
        levels = np.array([np.nanmedian(tel.values[h][:, i]) for h in tel.hosts])
        if not np.all(np.isfinite(levels)):
            continue
        for k, host in enumerate(tel.hosts):
            others = np.delete(levels, k)
            med = float(np.median(others))
            spread = max(float(1.4826 * np.median(np.abs(others - med))), 1e-9)
            off = levels[k] - med
            if abs(off) / spread >= IMBALANCE_Z and abs(off) >= IMBALANCE_REL * max(abs(med), 1e-9):
                out.append({"host": host, "metric": metric.name, "subsystem": metric.subsystem,
                            "value": round(float(levels[k]), 4), "peer_median": round(med, 4)})
    return out
