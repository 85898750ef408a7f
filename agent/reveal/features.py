"""Sliding-window features (Reveal §4.2): moments, linear trend and lag-1 autocorrelation for dynamic signals,
sum and peak for event counters, and each host's deviation from its peers (cross-host imbalance)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from agent.reveal.frame import MetricInfo, Telemetry

DYNAMIC_FEATURES = ("mean", "std", "trend")
SHAPE_FEATURES = ("skew", "acf1")  # need enough samples per window to mean anything
MIN_SHAPE_SAMPLES = 8  # 100 ms sampling gives 30 per 3 s window; 1 s sampling gives 3, where both are noise
COUNTER_FEATURES = ("sum", "max")
RESIDUAL_FEATURE = "resid"  # a metric's departure from what its predictor (representative, traffic) predicts
CROSS_HOST_FEATURE = "xhost"  # window mean minus the median of the other hosts' window means
MIN_HOSTS_FOR_CROSS = 3  # with two hosts a deviation is symmetric: it cannot say which host is off


@dataclass
class FeatureTable:
    """One row per (host, window); columns are (metric, feature) pairs."""

    values: np.ndarray  # (rows, features), raw feature values
    columns: list[tuple[str, str]]
    hosts: np.ndarray  # (rows,) host of each row
    starts: np.ndarray  # (rows,) window start, epoch seconds
    ends: np.ndarray
    window_samples: int
    stride_samples: int


def window_geometry(interval_s: float, window_s: float, stride_s: float) -> tuple[int, int]:
    size = max(2, round(window_s / interval_s))
    stride = max(1, round(stride_s / interval_s))
    return size, stride


def extract(tel: Telemetry, metrics: list[MetricInfo], window_s: float = 3.0, stride_s: float = 1.0,
            pruned: dict[str, str] | None = None, anchored: dict[str, str] | None = None) -> FeatureTable:
    """Features of `metrics`, plus the window mean of a residual for each pruned metric (against its kept
    representative: a straight line in asinh space) and each anchored error counter (against its traffic: a
    fixed rate per unit of traffic). Pruning drops the redundancy, the residual keeps a broken correlation visible
    (packets flowing while bytes collapse, retransmissions rising while the traffic does not)."""
    residuals = {**(pruned or {}), **(anchored or {})}
    ratio = [metric in (anchored or {}) for metric in residuals]
    size, stride = window_geometry(tel.interval_s, window_s, stride_s)
    names = [m.name for m in tel.metrics]
    index = [names.index(m.name) for m in metrics]
    origin = min(t[0] for t in tel.times.values())
    length = max(round((t[0] - origin) / tel.interval_s) + len(t) for t in tel.times.values())
    if length < size:
        raise ValueError(f"the file spans {length * tel.interval_s:.1f} s, shorter than one {window_s:g} s window")
    # one common grid so that window k covers the same seconds on every host (needed by the cross-host features)
    pairs = [(names.index(d), names.index(r)) for d, r in residuals.items()]
    grids = {}
    for host in tel.hosts:
        grid = np.full((length, len(index) + len(pairs)), np.nan)
        offset = round((tel.times[host][0] - origin) / tel.interval_s)
        raw = tel.values[host]
        grid[offset:offset + len(tel.times[host])] = np.hstack([raw[:, index], _residuals(raw, pairs, ratio)])
        # asinh: rates and sizes are multiplicative (a burst is 10x, not +10), asinh is log-like above 1 and
        # linear through 0, so a heavy-tailed throughput and a flat percentage get comparable spreads
        grids[host] = sliding_window_view(np.arcsinh(grid), size, axis=0)[::stride]  # (windows, metrics, size)
    n_windows = next(iter(grids.values())).shape[0]
    starts = origin + np.arange(n_windows) * stride * tel.interval_s
    dynamic = [i for i, m in enumerate(metrics) if m.category == "dynamic"]
    counters = [i for i, m in enumerate(metrics) if m.category == "counter"]
    resid = list(range(len(metrics), len(metrics) + len(pairs)))
    blocks, columns = [], []
    per_host: dict[str, list[np.ndarray]] = {h: [] for h in tel.hosts}
    shape = size >= MIN_SHAPE_SAMPLES
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows over collection gaps
        for host, win in grids.items():
            per_host[host].append(_dynamic(win[:, dynamic, :], shape))
            per_host[host].append(_counters(win[:, counters, :]))
            per_host[host].append(np.nanmean(win[:, resid, :], axis=2))
        columns += [(metrics[i].name, f) for f in DYNAMIC_FEATURES + (SHAPE_FEATURES if shape else ()) for i in dynamic]
        columns += [(metrics[i].name, f) for f in COUNTER_FEATURES for i in counters]
        columns += [(metric, RESIDUAL_FEATURE) for metric in residuals]
        if len(tel.hosts) >= MIN_HOSTS_FOR_CROSS and dynamic:
            means = np.stack([np.nanmean(grids[h][:, dynamic, :], axis=2) for h in tel.hosts])  # (hosts, windows, m)
            for k, host in enumerate(tel.hosts):
                others = np.delete(means, k, axis=0)
                per_host[host].append(means[k] - np.nanmedian(others, axis=0))
            columns += [(metrics[i].name, CROSS_HOST_FEATURE) for i in dynamic]
        for host in tel.hosts:
            blocks.append(np.hstack(per_host[host]))
        values = np.vstack(blocks)
        # a window is usable when most of its samples exist on that host
        coverage = np.vstack([np.mean(np.isfinite(grids[h]), axis=(1, 2)) for h in tel.hosts]).ravel()
    hosts = np.repeat(np.array(tel.hosts), n_windows)
    all_starts = np.tile(starts, len(tel.hosts))
    keep = coverage >= 0.5
    return FeatureTable(values[keep], columns, hosts[keep], all_starts[keep],
                        all_starts[keep] + size * tel.interval_s, size, stride)


def _residuals(raw: np.ndarray, pairs: list[tuple[int, int]], ratio: list[bool]) -> np.ndarray:
    """Per (metric, predictor) pair, sinh of the metric's residual in asinh space (so that the asinh applied to
    every grid column afterwards gives back the residual itself): against the least-squares line on asinh of the
    predictor, or for a ratio pair against the host's overall rate times the predictor (errors per packet: at
    idle the expected count is near zero, so a few retransmissions a second stand out as they should)."""
    out = np.full((raw.shape[0], len(pairs)), np.nan)
    for k, (d, r) in enumerate(pairs):
        y, x = raw[:, d], raw[:, r]
        ok = np.isfinite(x) & np.isfinite(y)
        if ratio[k]:
            traffic = np.sum(np.abs(x[ok]))
            if traffic > 0:
                out[:, k] = np.sinh(np.arcsinh(y) - np.arcsinh(np.sum(y[ok]) / traffic * np.abs(x)))
            continue
        y, x = np.arcsinh(y), np.arcsinh(x)
        if ok.sum() < 3 or np.ptp(x[ok]) == 0:
            continue
        slope, intercept = np.polyfit(x[ok], y[ok], 1)
        out[:, k] = np.sinh(y - (slope * x + intercept))
    return out


def _dynamic(win: np.ndarray, shape: bool) -> np.ndarray:
    """mean, std, least-squares slope per sample (and skewness, lag-1 autocorrelation), each (windows, metrics)."""
    mean = np.nanmean(win, axis=2)
    centred = win - mean[..., None]
    std = np.sqrt(np.nanmean(centred ** 2, axis=2))
    safe = np.where(std > 0, std, np.nan)
    skew = np.nan_to_num(np.nanmean(centred ** 3, axis=2) / safe ** 3)
    steps = np.arange(win.shape[2], dtype=float)
    steps -= steps.mean()
    trend = np.nansum(centred * steps, axis=2) / np.sum(steps ** 2)
    lagged = np.nansum(centred[..., 1:] * centred[..., :-1], axis=2)
    acf1 = np.nan_to_num(lagged / (np.nansum(centred ** 2, axis=2) + 1e-12))
    return np.hstack([mean, std, trend, skew, acf1] if shape else [mean, std, trend])


def _counters(win: np.ndarray) -> np.ndarray:
    if win.shape[1] == 0:
        return np.empty((win.shape[0], 0))
    return np.hstack([np.nansum(win, axis=2), np.nanmax(win, axis=2)])


def select(table: FeatureTable, columns: list[tuple[str, str]]) -> FeatureTable:
    """The same windows restricted to `columns` (in that order)."""
    index = [table.columns.index(c) for c in columns]
    return FeatureTable(table.values[:, index], list(columns), table.hosts, table.starts, table.ends,
                        table.window_samples, table.stride_samples)
