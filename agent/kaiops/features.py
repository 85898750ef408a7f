"""Tasks -> arrays for the model: standardised metrics with a presence mask, log-line indices into the encoder's
embedding table with the minute each line falls in, and host ids."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agent.kaiops import METRICS, STEPS
from agent.kaiops.dataset import Task
from agent.kaiops.encode import LineEncoder

MAX_LINES = 48  # the last lines of the job's log: the failure is at the end
MAX_HOSTS = 16
PAD, UNKNOWN = 0, 1  # host ids
LOG_SCALED = {"net_rx_mbps", "net_tx_mbps", "disk_read_mbps", "disk_write_mbps"}
# the job's own baseline: the median of its first minutes. Jobs differ in their levels (a 16-host all-reduce moves
# 100x what a 1-host job does), so a precursor is a change against the job's own past more than a value against
# the fleet's; the third channel block carries that change
BASELINE_STEPS = 10
BLOCKS = 3  # channel blocks per metric: fleet-standardised value, change from the job's baseline, presence


@dataclass
class Arrays:
    metrics: np.ndarray  # (N, STEPS, BLOCKS * len(METRICS)) float32: standardised values, change, presence 0/1
    lines: np.ndarray  # (N, MAX_LINES) int64 row in the encoder table, -1 = padding
    steps: np.ndarray  # (N, MAX_LINES) int64 minute of each line
    hosts: np.ndarray  # (N, MAX_HOSTS) int64 host id, 0 = padding

    def __len__(self) -> int:
        return len(self.metrics)

    def take(self, idx: np.ndarray) -> Arrays:
        return Arrays(self.metrics[idx], self.lines[idx], self.steps[idx], self.hosts[idx])


def window(values: list[float | None]) -> np.ndarray:
    """The last STEPS samples; NaN where missing (including before a short series starts)."""
    out = np.full(STEPS, np.nan, dtype=np.float64)
    tail = [np.nan if v is None else v for v in values[-STEPS:]]
    if tail:
        out[STEPS - len(tail):] = tail
    return out


def raw_metrics(task: Task) -> np.ndarray:
    """(STEPS, len(METRICS)) with NaN for missing; throughput metrics on a log1p scale."""
    out = np.full((STEPS, len(METRICS)), np.nan)
    for j, name in enumerate(METRICS):
        if name in task.metrics:
            w = window(task.metrics[name])
            out[:, j] = np.log1p(np.maximum(w, 0)) if name in LOG_SCALED else w
    return out


def _baseline(raw: np.ndarray) -> np.ndarray:
    """Per metric, the median of the first BASELINE_STEPS present minutes (0 where a metric never reports)."""
    out = np.zeros(raw.shape[1])
    for j in range(raw.shape[1]):
        seen = raw[~np.isnan(raw[:, j]), j]
        if seen.size:
            out[j] = np.median(seen[:BASELINE_STEPS])
    return out


@dataclass
class Featurizer:
    mean: list[float]
    std: list[float]
    host_ids: dict[str, int]

    @classmethod
    def fit(cls, tasks: list[Task]) -> Featurizer:
        stack = np.concatenate([raw_metrics(t) for t in tasks])
        mean = np.nanmean(stack, axis=0)
        std = np.nanstd(stack, axis=0)
        hosts = sorted({h for t in tasks for h in t.hosts})
        return cls([float(x) for x in np.nan_to_num(mean)], [float(x) if x > 1e-6 else 1.0 for x in std],
                   {h: i + 2 for i, h in enumerate(hosts)})

    def arrays(self, tasks: list[Task], encoder: LineEncoder) -> Arrays:
        n = len(tasks)
        metrics = np.zeros((n, STEPS, BLOCKS * len(METRICS)), dtype=np.float32)
        k_m = len(METRICS)
        lines = np.full((n, MAX_LINES), -1, dtype=np.int64)
        steps = np.zeros((n, MAX_LINES), dtype=np.int64)
        hosts = np.zeros((n, MAX_HOSTS), dtype=np.int64)
        mean, std = np.asarray(self.mean), np.asarray(self.std)
        tails = [task.logs[-MAX_LINES:] for task in tasks]
        flat = encoder.index_of([line for tail in tails for line in tail])  # one batched embedding call
        offset = 0
        for i, task in enumerate(tasks):
            raw = raw_metrics(task)
            present = ~np.isnan(raw)
            metrics[i, :, :k_m] = np.where(present, (raw - mean) / std, 0.0)
            metrics[i, :, k_m:2 * k_m] = np.where(present, (raw - _baseline(raw)) / std, 0.0)
            metrics[i, :, 2 * k_m:] = present
            k = len(tails[i])
            if k:
                lines[i, :k] = flat[offset:offset + k]
                offset += k
                # lines are in time order over the window and carry no common timestamp format: position stands
                # in for time, spread over the window and anchored at its end (the last line is the event)
                # (more lines than minutes: the first ones share minute 0, never minute -1)
                steps[i, :k] = np.maximum((np.arange(1, k + 1) * STEPS) // k - 1, 0)
            ids = [self.host_ids.get(h, UNKNOWN) for h in task.hosts[:MAX_HOSTS]]
            hosts[i, :len(ids)] = ids
        return Arrays(metrics, lines, steps, hosts)

    def state(self) -> dict:
        return {"mean": self.mean, "std": self.std, "host_ids": self.host_ids}
