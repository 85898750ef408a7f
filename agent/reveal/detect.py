"""The Reveal pipeline: load → categorise → prune → window features → three detectors → vote → attribute →
report (with the evidence: window, detector, metric–feature pair)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field
from threadpoolctl import threadpool_limits

from agent.reveal import attribute, detectors, features, frame, prune


class SignalOut(BaseModel):
    metric: str
    feature: str
    detector: str  # the detectors, joined by "+", whose strongest contributors include this pair
    z: float  # robust z of the feature against the host's own windows
    subsystem: str


class WindowOut(BaseModel):
    start: float
    end: float
    host: str
    subsystems: list[str]
    signals: list[SignalOut]
    score: float  # 0..1, grows with the number of agreeing detectors and how far past their thresholds
    votes: int
    model: str = ""  # the subsystem model whose detectors agreed (detectors.py)
    imbalance: bool = False  # the evidence is this host deviating from its peers


class HostOut(BaseModel):
    host: str
    windows: int
    anomalous_windows: int
    subsystems: dict[str, int] = Field(default_factory=dict)
    imbalance_windows: int = 0
    static_imbalance: list[dict[str, object]] = Field(default_factory=list)


class RevealReport(BaseModel):
    source: str = ""
    interval_s: float
    window_s: float
    stride_s: float
    windows: list[WindowOut]
    hosts: list[HostOut]  # most anomalous first
    skipped_columns: list[str]
    categories: dict[str, list[str]]
    pruned: dict[str, str]  # dropped metric -> the representative kept in its place
    anchored: dict[str, str] = Field(default_factory=dict)  # error counter -> the traffic it is judged against
    differenced: list[str]
    thresholds: dict[str, float]  # "model/detector" -> threshold (the models are per subsystem)
    pca_components: dict[str, int]  # model -> principal components kept
    total_windows: int
    duration_s: float = 0.0

    @property
    def anomalous_rate(self) -> float:
        return len(self.windows) / self.total_windows if self.total_windows else 0.0


Source = Path | str | frame.Telemetry


def _telemetry(source: Source, hosts: list[str] | None) -> frame.Telemetry:
    return source if isinstance(source, frame.Telemetry) else frame.load(source, hosts)


def _tables(tel: frame.Telemetry, ref: frame.Telemetry | None, window_s: float, stride_s: float,
            prune_threshold: float,
            ) -> tuple[features.FeatureTable, features.FeatureTable | None, dict[str, str], dict[str, str]]:
    """Feature tables of the file and of the reference, on the same columns, with the pruned metrics and the
    anchored counters (prune.anchors). With a reference, pruning, anchoring and the categories come from it (the
    clean run defines which metrics are redundant), restricted to what both have."""
    basis = ref or tel
    kept, dropped = prune.prune(basis, prune_threshold)
    present = {m.name for m in tel.metrics}
    detected = [m for m in kept if m.category != "static" and m.name in present]
    dropped = {d: r for d, r in dropped.items() if d in present and r in {m.name for m in detected}}
    if not detected:
        raise frame.FrameError("every metric is static: nothing varies within a host to detect on")
    anchored = {c: t for c, t in prune.anchors(basis, detected).items() if t in present}
    table = features.extract(tel, detected, window_s, stride_s, dropped, anchored)
    if table.values.shape[0] < 3:
        raise frame.FrameError(f"only {table.values.shape[0]} complete window(s): the file is too short "
                               f"for {window_s:g} s windows")
    if ref is None:
        return table, None, dropped, anchored
    reference = features.extract(ref, detected, window_s, stride_s, dropped, anchored)
    common = [c for c in table.columns if c in set(reference.columns)]  # cross-host columns need 3+ hosts in both
    table = features.select(table, common)
    return table, features.select(reference, common), dropped, anchored


def run(source: Source, hosts: list[str] | None = None, window_s: float = 3.0, stride_s: float = 1.0,
        min_votes: int = 2, prune_threshold: float = prune.THRESHOLD, reference: Source | None = None,
        ) -> RevealReport:
    """Detect on `source`; with `reference` (a clean run of the same workload and hosts), the detectors and
    their thresholds are fitted on it instead of on the file itself (see detectors.py)."""
    began = time.perf_counter()
    tel = _telemetry(source, hosts)
    ref = _telemetry(reference, hosts) if reference is not None else None
    table, ref_table, dropped, anchored = _tables(tel, ref, window_s, stride_s, prune_threshold)
    cross = np.array([f == features.CROSS_HOST_FEATURE for _, f in table.columns], dtype=bool)
    subsystem = {m.name: m.subsystem for m in tel.metrics}
    groups = np.array([subsystem.get(metric, "other") for metric, _ in table.columns])
    # one BLAS thread: the matrices are hundreds of windows by a few hundred features, where thread start-up and
    # contention with the workload on the host cost more than they save (a 4-host 60 s file on 2 cores: 0.44 s ->
    # 0.26 s idle, 0.92 s -> 0.52 s with other jobs running)
    with threadpool_limits(limits=1):
        if ref_table is None:
            det = detectors.detect(table.values, table.hosts, cross, groups, min_votes)
        else:
            base = detectors.fit(ref_table.values, ref_table.hosts, cross, groups)
            det = detectors.score(base, table.values, table.hosts, min_votes)
    windows = []
    for row in np.flatnonzero(det.anomalous).tolist():
        signals = attribute.window_signals(det, row, table, subsystem)
        score = 0.5 * det.votes[row] / len(detectors.DETECTORS) + 0.5 * float(det.strength[row])
        # a window flagged for its neighbours (the scores are smoothed over time) may have no feature past
        # MIN_SIGNAL_Z itself: it is charged to the subsystem whose model flagged it
        model = str(det.model[row])
        windows.append(WindowOut(
            start=round(float(table.starts[row]), 3), end=round(float(table.ends[row]), 3),
            host=str(table.hosts[row]), subsystems=attribute.subsystems_of(det, row, table, subsystem) or [model],
            signals=[SignalOut(metric=s.metric, feature=s.feature, detector="+".join(s.detectors), z=s.z,
                               subsystem=s.subsystem) for s in signals],
            score=round(score, 3), votes=int(det.votes[row]), model=model,
            imbalance=attribute.is_imbalance(det, row)))
    static = attribute.static_imbalance(tel, tel.metrics)
    host_out = []
    for host in tel.hosts:
        mine = [w for w in windows if w.host == host]
        counts: dict[str, int] = {}
        for w in mine:
            for s in w.subsystems[:1]:
                counts[s] = counts.get(s, 0) + 1
        host_out.append(HostOut(host=host, windows=int(np.sum(table.hosts == host)), anomalous_windows=len(mine),
                                subsystems=counts, imbalance_windows=sum(w.imbalance for w in mine),
                                static_imbalance=[s for s in static if s["host"] == host]))
    host_out.sort(key=lambda h: (-h.anomalous_windows, -len(h.static_imbalance), h.host))
    categories: dict[str, list[str]] = {"dynamic": [], "counter": [], "static": []}
    for m in tel.metrics:
        categories[m.category].append(m.name)
    return RevealReport(
        source=str(source) if not isinstance(source, frame.Telemetry) else "", interval_s=tel.interval_s,
        window_s=window_s, stride_s=stride_s, windows=windows, hosts=host_out, skipped_columns=tel.skipped_columns,
        categories=categories, pruned=dropped, anchored=anchored, differenced=tel.differenced,
        thresholds={k: round(v, 4) for k, v in det.thresholds.items()}, pca_components=det.components,
        total_windows=int(table.values.shape[0]), duration_s=round(time.perf_counter() - began, 4))
