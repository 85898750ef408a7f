"""Correlation pruning (Reveal §4.1): of every group of metrics with |Pearson r| above the threshold keep one
representative, chosen by a fixed priority table (interpretable utilization and throughput first) and then by
the variance of the metric's correlations (more informative first)."""

from __future__ import annotations

import re
import warnings

import numpy as np

from agent.reveal.frame import MetricInfo, Telemetry

THRESHOLD = 0.5
# lower rank wins; a name matching no pattern ranks last
PRIORITY: tuple[str, ...] = (
    r"util|busy|user%|sys%|idle",  # CPU/GPU utilization
    r"mem_used|memfree|mem_active|used_pct",  # memory usage
    r"read|write|rx|tx|bytes|kb/s|throughput|xfer",  # network and disk throughput
    r"wait|blocked|queue|await|stall",  # waiting and queueing
    r"retrans|drop|err|ecc|fault",  # errors and events
    r"clock|freq|power|temp",  # sensors
)


def priority(name: str) -> int:
    low = name.lower()
    return next((rank for rank, pattern in enumerate(PRIORITY) if re.search(pattern, low)), len(PRIORITY))


def prune(tel: Telemetry, threshold: float = THRESHOLD) -> tuple[list[MetricInfo], dict[str, str]]:
    """The kept metrics (static ones and counters are never pruned) and {dropped: representative}."""
    # error and event counters are never pruned (deviation from the paper, which prunes every metric): on a
    # healthy run retransmissions and drops track the traffic and would be dropped as redundant, yet a fault is
    # exactly when they stop tracking it, and their burst is the evidence the report should name
    candidates = [i for i, m in enumerate(tel.metrics) if m.category == "dynamic"]
    if len(candidates) < 2:
        return list(tel.metrics), {}
    # standardise per host so a host's offset does not count as correlation across the pooled samples
    pooled = []
    for host in tel.hosts:
        block = tel.values[host][:, candidates]
        block = block[np.all(np.isfinite(block), axis=1)]
        if block.shape[0] < 3:
            continue
        std = block.std(axis=0)
        pooled.append((block - block.mean(axis=0)) / np.where(std > 0, std, 1.0))
    if not pooled:
        return list(tel.metrics), {}
    data = np.vstack(pooled)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        corr = np.nan_to_num(np.corrcoef(data, rowvar=False))
    absr = np.abs(corr)
    np.fill_diagonal(absr, 0.0)
    spread = corr.var(axis=0)
    order = sorted(range(len(candidates)),
                   key=lambda k: (priority(tel.metrics[candidates[k]].name), -spread[k], candidates[k]))
    kept: list[int] = []
    dropped: dict[str, str] = {}
    for k in order:
        rivals = [j for j in kept if absr[k, j] > threshold]
        if not rivals:
            kept.append(k)
        else:
            # its representative is the kept metric that predicts it best, so that the residual feature
            # (features.extract) measures a departure from the relation that actually holds
            best = max(rivals, key=lambda j: absr[k, j])
            dropped[tel.metrics[candidates[k]].name] = tel.metrics[candidates[best]].name
    keep_names = {tel.metrics[candidates[k]].name for k in kept}
    metrics = [m for m in tel.metrics if m.category != "dynamic" or m.name in keep_names]
    return metrics, dropped


def anchors(tel: Telemetry, kept: list[MetricInfo], threshold: float = THRESHOLD) -> dict[str, str]:
    """{error counter: the dynamic metric of its subsystem it tracks best, when |r| > threshold} (asinh scale,
    each host centred, pooled). On a healthy host retransmissions and drops rise and fall with the traffic, so
    their count alone is as bursty as the traffic; their residual against it (features.extract) is the loss rate,
    which a lossy link raises whatever the traffic."""
    names = [m.name for m in tel.metrics]
    out: dict[str, str] = {}
    for counter in (m for m in kept if m.category == "counter"):
        c = names.index(counter.name)
        best, best_r = "", threshold
        for d, metric in enumerate(tel.metrics):
            if metric.category != "dynamic" or metric.subsystem != counter.subsystem:
                continue
            r = abs(_pooled_r(tel, c, d))
            if r > best_r:
                best, best_r = metric.name, r
        if best:
            out[counter.name] = best
    return out


def _pooled_r(tel: Telemetry, a: int, b: int) -> float:
    pairs = []
    for host in tel.hosts:
        block = np.arcsinh(tel.values[host][:, [a, b]])
        block = block[np.all(np.isfinite(block), axis=1)]
        if block.shape[0] >= 3:
            pairs.append(block - block.mean(axis=0))
    if not pairs:
        return 0.0
    x, y = np.vstack(pairs).T
    spread = float(np.sqrt(np.sum(x * x) * np.sum(y * y)))
    return float(np.sum(x * y)) / spread if spread > 0 else 0.0
