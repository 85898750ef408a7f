"""Reveal against a learned normal (issue 36): what this workload looks like when healthy is learned from the
job's own start, from earlier healthy runs of the same job (baseline files), or both; every later window of every
host is judged against it, per metric and per subsystem, and the report names the host and the metrics that moved.

Why not the self mode of detect.py: it ranks a file's windows against each other and reports at most its
strongest 1 %, so on a clean run it flags 1 % by construction, and an anomaly that fills a large share of the
file (the real H200 run: 46 of 110 s) is part of what it takes as typical. Here the normal is fixed before the
windows under test are seen, and a clean window is flagged only when it departs from it.

Per host and metric, a window's value is the mean of asinh(sample) over the window (asinh: log-like for rates and
sizes, linear through 0); its deviation is z = (value - centre) / scale, with the centre the median of the learned
windows and the scale the larger of their 1.4826·MAD and the learned samples' standard deviation over sqrt(window
size), never below a floor (FLOOR for signals, COUNTER_FLOOR for error and event counters: a metric that sat still
while the normal was learned — a GPU's memory in use, a throttling counter at 0 — has no spread, and its first
change must count as a change of that size, not as infinitely many sigmas). With three hosts or more a host's
deviation is taken relative to its peers (z minus the median over all hosts' z for the same metric and window;
with the host itself in the median, one deviating node cannot drag its peers' reference along): what every node
shows at once is the job's or the machine's own phase (a slower step everywhere, another tenant on the machine),
and what one node shows alone is that node's. A window is anomalous when its strongest deviation, as a running
median over PERSISTENCE consecutive windows (more than the three overlapping windows one sample lies in, so a lone
sample or a short burst does not count), reaches Z_FLAG; its subsystems are those of its metrics past SIGNAL_Z,
ranked by their strongest deviation (a limit being hit first).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from pydantic import BaseModel, Field

from agent.reveal import frame

WINDOW_S, STRIDE_S = 3.0, 1.0
LEARN_S = 20.0  # the job's own start: this many seconds after `skip_s` are its normal
FLOOR = 0.05  # asinh units: about a 5 % change of a large value, 0.05 of a small one
COUNTER_FLOOR = 0.25  # events per second: 1/s over a silent normal is ~3.5 sigmas, 5/s ~9
Z_FLAG = 6.0
SIGNAL_Z = 3.0
PERSISTENCE = 9  # windows (odd): the running median over them must reach Z_FLAG; a lone sample lies in 3 windows
MIN_HOSTS_FOR_PEERS = 3
TOP_SIGNALS = 6
SUBSYSTEM_SHARE = 0.5  # a subsystem is named when its weight is at least half the strongest one's
# counters of a limit being hit (a cgroup's memory failcnt, CPU throttling, the OOM killer): direct evidence of the
# cause in their subsystem, named first whatever their symptoms elsewhere
LIMITS = re.compile(r"limit_hit|failcnt|throttl|oom", re.I)


class Signal(BaseModel):
    metric: str
    subsystem: str
    z: float  # against the learned normal (peer-relative when the host has peers)
    value: float  # the window's mean of the metric
    normal: float  # the learned normal's median of the metric


class Window(BaseModel):
    host: str
    start: float
    end: float
    score: float  # the smoothed strongest deviation, in sigmas
    subsystems: list[str]
    signals: list[Signal]


class Event(BaseModel):
    """Consecutive anomalous windows of one host."""

    host: str
    start: float
    end: float
    windows: int
    peak: float
    subsystems: list[str]
    metrics: list[str]  # the metrics that moved most over the event, strongest first


class HostSummary(BaseModel):
    host: str
    judged_windows: int
    anomalous_windows: int
    peak: float
    learned_from: str  # "start", "baseline", "start+baseline", or "baseline (pooled hosts)"


class NormalReport(BaseModel):
    source: str = ""
    mode: str  # start | baseline | start+baseline
    origin: float  # the file's first timestamp (epoch seconds); windows and events carry epoch seconds
    interval_s: float
    window_s: float
    stride_s: float
    learn_s: float
    skip_s: float
    until_s: float | None = None
    baseline_files: list[str] = Field(default_factory=list)
    metrics: list[str]
    peers: bool  # deviations taken relative to the other hosts
    windows: list[Window]
    events: list[Event]  # strongest first
    hosts: list[HostSummary]  # most anomalous first
    judged_windows: int
    z_flag: float
    persistence: int = PERSISTENCE
    duration_s: float = 0.0

    @property
    def anomalous_rate(self) -> float:
        return len(self.windows) / self.judged_windows if self.judged_windows else 0.0


@dataclass
class Windows:
    """Per host, the window means (windows, metrics) in asinh units, and each window's start."""

    means: dict[str, np.ndarray]
    starts: dict[str, np.ndarray]
    size: int
    samples: dict[str, np.ndarray]  # per host, asinh of every sample (samples, metrics)
    times: dict[str, np.ndarray]


def select_metrics(tels: list[frame.Telemetry]) -> list[frame.MetricInfo]:
    """Metrics every telemetry has, minus static ones by name (limits, totals, temperatures) and those that never
    move in any of them; a metric counts as a counter when any file says so."""
    names = [m.name for m in tels[0].metrics]
    common = [n for n in names if all(n in {m.name for m in t.metrics} for t in tels[1:])]
    out = []
    for name in common:
        infos = [next(m for m in t.metrics if m.name == name) for t in tels]
        if frame.STATIC_PATTERN.search(name) and not frame.COUNTER_PATTERN.search(name):
            continue
        if all(i.category == "static" for i in infos):
            continue  # constant everywhere
        category = "counter" if any(i.category == "counter" for i in infos) else "dynamic"
        out.append(frame.MetricInfo(name, infos[0].subsystem, category))
    return out


def windows_of(tel: frame.Telemetry, metrics: list[str], window_s: float, stride_s: float) -> Windows:
    size = max(2, round(window_s / tel.interval_s))
    stride = max(1, round(stride_s / tel.interval_s))
    names = [m.name for m in tel.metrics]
    index = [names.index(m) for m in metrics]
    means, starts, samples = {}, {}, {}
    for host in tel.hosts:
        values = np.arcsinh(tel.values[host][:, index])
        samples[host] = values
        if values.shape[0] < size:
            means[host], starts[host] = np.empty((0, len(index))), np.empty(0)
            continue
        view = sliding_window_view(values, size, axis=0)[::stride]  # (windows, metrics, size)
        with np.errstate(all="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                m = np.nanmean(view, axis=2)
        means[host] = m
        starts[host] = tel.times[host][::stride][: m.shape[0]]
    return Windows(means, starts, size, samples, {h: tel.times[h] for h in tel.hosts})


def _mad(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        centre = np.nanmedian(block, axis=0)
        return np.nan_to_num(centre), np.nan_to_num(1.4826 * np.nanmedian(np.abs(block - centre), axis=0))


def _centre_scale(block: np.ndarray, samples: np.ndarray, size: int,
                  floors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The learned windows' median; the scale is the larger of their MAD and the samples' standard deviation
    over sqrt(window size), never under the floor. A few dozen overlapping windows understate how far an
    independent window mean strays, and a metric read in coarse steps (CPU time in 10 ms ticks, sampled every
    0.5 s: 0 or 2 %) has a MAD of 0 while its window means wander by a tick: the samples' spread says both."""
    import warnings

    centre, spread = _mad(block)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        noise = np.nan_to_num(np.nanstd(samples, axis=0)) / np.sqrt(size)
    return centre, np.maximum(np.maximum(spread, noise), floors)


def _smooth(score: np.ndarray, span: int = PERSISTENCE) -> np.ndarray:
    if span <= 1 or score.size == 0:
        return score
    padded = np.pad(score, span // 2, mode="edge")
    return np.median(sliding_window_view(padded, span), axis=1)


def _subsystems(z: np.ndarray, metrics: list[frame.MetricInfo]) -> list[str]:
    """Subsystems by their strongest deviation past SIGNAL_Z; those within SUBSYSTEM_SHARE of the strongest are
    named (a process hammering the disk also moves the node's CPU time and context switches: the disk's own
    metric is the one that moved most). A limit being hit (LIMITS) names its subsystem first: a memory limit that
    evicts the cache sends reads to the disk, and the reads are the symptom."""
    weight: dict[str, float] = {}
    first: list[str] = []
    for j in np.flatnonzero(np.abs(z) >= SIGNAL_Z):
        sub = metrics[j].subsystem
        weight[sub] = max(weight.get(sub, 0.0), float(abs(z[j])))
        if z[j] > 0 and LIMITS.search(metrics[j].name) and sub not in first:
            first.append(sub)
    if not weight:
        return []
    top = max(weight.values())
    named = [k for k, w in sorted(weight.items(), key=lambda kv: -kv[1]) if w >= SUBSYSTEM_SHARE * top]
    return first + [k for k in named if k not in first]


def run(source: frame.Telemetry | Path | str, baselines: Sequence[frame.Telemetry | Path | str] | None = None,
        learn_start: bool = True, learn_s: float = LEARN_S, skip_s: float = 0.0, window_s: float = WINDOW_S,
        stride_s: float = STRIDE_S, z_flag: float = Z_FLAG, hosts: list[str] | None = None,
        until_s: float | None = None, persistence: int = PERSISTENCE) -> NormalReport:
    """Judge every window of `source` after its learned period against the normal learned from its start
    (`learn_start`: the learn_s seconds after skip_s, per host) and/or the `baselines` (earlier healthy runs of
    the same job: per host when the baseline has that host, else pooled over the baseline's hosts). `until_s`:
    judge only windows that end by this many seconds after the file's start (the job's end, when known)."""
    began = time.perf_counter()
    tel = source if isinstance(source, frame.Telemetry) else frame.load(source, hosts)
    refs = [b if isinstance(b, frame.Telemetry) else frame.load(b) for b in (baselines or [])]
    if not learn_start and not refs:
        raise ValueError("nothing to learn the normal from: learn from the start, give a baseline, or both")
    metrics = select_metrics([tel, *refs])
    if not metrics:
        raise frame.FrameError("no metric varies: nothing to judge")
    names = [m.name for m in metrics]
    floors = np.array([COUNTER_FLOOR if m.category == "counter" else FLOOR for m in metrics])
    win = windows_of(tel, names, window_s, stride_s)
    ref_wins = [windows_of(r, names, window_s, stride_s) for r in refs]
    origin = min(float(t[0]) for t in tel.times.values())
    learn_end = origin + skip_s + learn_s
    # what each host's normal is learned from, and which of its windows are judged
    normal: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    learned_from: dict[str, str] = {}
    judged: dict[str, np.ndarray] = {}
    for host in tel.hosts:
        starts = win.starts[host]
        parts, samples, how = [], [], []
        if learn_start:
            own = (starts >= origin + skip_s) & (starts + window_s <= learn_end)
            if own.sum() < 3:
                raise frame.FrameError(f"{host}: fewer than 3 windows between {skip_s:g} s and "
                                       f"{skip_s + learn_s:g} s to learn the normal from")
            parts.append(win.means[host][own])
            t = win.times[host]
            samples.append(win.samples[host][(t >= origin + skip_s) & (t < learn_end)])
            how.append("start")
        if ref_wins:
            keys = [(w, host) for w in ref_wins if host in w.means]
            how.append("baseline" if keys else "baseline (pooled hosts)")
            keys = keys or [(w, h) for w in ref_wins for h in w.means]
            parts += [w.means[h] for w, h in keys]
            samples += [w.samples[h] for w, h in keys]
        normal[host] = _centre_scale(np.vstack(parts), np.vstack(samples), win.size, floors)
        learned_from[host] = "+".join(how)
        judged[host] = starts >= (learn_end if learn_start else origin + skip_s)
        if until_s is not None:
            judged[host] &= starts + window_s <= origin + until_s
    # raw deviations on a common window grid (the hosts' windows line up when their samples do)
    z = {h: (win.means[h] - normal[h][0]) / normal[h][1] for h in tel.hosts}
    z = {h: np.nan_to_num(v, nan=0.0) for h, v in z.items()}
    peers = len(tel.hosts) >= MIN_HOSTS_FOR_PEERS
    if peers:
        z = _peer_relative(z, win, tel)
    out_windows: list[Window] = []
    summaries = []
    events: list[Event] = []
    for host in tel.hosts:
        zh = z[host]
        strongest = np.max(np.abs(zh), axis=1) if zh.size else np.zeros(0)
        score = _smooth(strongest, persistence)
        flagged = (score >= z_flag) & judged[host]
        rows = np.flatnonzero(flagged)
        mine: list[Window] = []
        for r in rows.tolist():
            order = np.argsort(-np.abs(zh[r]))[:TOP_SIGNALS]
            signals = [Signal(metric=names[j], subsystem=metrics[j].subsystem, z=round(float(zh[r, j]), 2),
                              value=round(float(np.sinh(win.means[host][r, j])), 4),
                              normal=round(float(np.sinh(normal[host][0][j])), 4))
                       for j in order if abs(zh[r, j]) >= SIGNAL_Z]
            start = float(win.starts[host][r])
            mine.append(Window(host=host, start=round(start, 3), end=round(start + window_s, 3),
                               score=round(float(score[r]), 2), subsystems=_subsystems(zh[r], metrics),
                               signals=signals))
        out_windows += mine
        events += _events(host, rows, zh, score, win.starts[host], window_s, metrics)
        summaries.append(HostSummary(host=host, judged_windows=int(judged[host].sum()), anomalous_windows=len(mine),
                                     peak=round(float(score[judged[host]].max(initial=0.0)), 2),
                                     learned_from=learned_from[host]))
    summaries.sort(key=lambda s: (-s.anomalous_windows, -s.peak, s.host))
    events.sort(key=lambda e: -e.peak)
    mode = "+".join(m for m, on in (("start", learn_start), ("baseline", bool(refs))) if on)
    return NormalReport(
        source=str(source) if not isinstance(source, frame.Telemetry) else "", mode=mode, origin=origin,
        interval_s=tel.interval_s, window_s=window_s, stride_s=stride_s, learn_s=learn_s if learn_start else 0.0,
        skip_s=skip_s, until_s=until_s,
        baseline_files=[str(b) for b in baselines or [] if not isinstance(b, frame.Telemetry)],
        metrics=names, peers=peers, windows=out_windows, events=events, hosts=summaries,
        judged_windows=int(sum(j.sum() for j in judged.values())), z_flag=z_flag, persistence=persistence,
        duration_s=round(time.perf_counter() - began, 4))


def _peer_relative(z: dict[str, np.ndarray], win: Windows, tel: frame.Telemetry) -> dict[str, np.ndarray]:
    """z minus the median over every host's z (this host's included) in the window that starts at the same time
    (a host without peer windows at that time keeps its raw z)."""
    out = {}
    for host in tel.hosts:
        rel = z[host].copy()
        stacks = []
        for other in tel.hosts:
            aligned = np.full_like(z[host], np.nan)
            pos = np.searchsorted(win.starts[other], win.starts[host])
            ok = pos < len(win.starts[other])
            ok[ok] &= np.abs(win.starts[other][pos[ok]] - win.starts[host][ok]) <= tel.interval_s / 2
            aligned[ok] = z[other][pos[ok]]
            stacks.append(aligned)
        if len(stacks) > 1:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                med = np.nanmedian(np.stack(stacks), axis=0)
            rel = np.where(np.isfinite(med), rel - med, rel)
        out[host] = rel
    return out


def _events(host: str, rows: np.ndarray, z: np.ndarray, score: np.ndarray, starts: np.ndarray, window_s: float,
            metrics: list[frame.MetricInfo]) -> list[Event]:
    out: list[Event] = []
    if rows.size == 0:
        return out
    breaks = np.flatnonzero(np.diff(rows) > 1)
    for run_rows in np.split(rows, breaks + 1):
        block = np.abs(z[run_rows])
        strength = np.median(block, axis=0)
        order = [j for j in np.argsort(-strength)[:TOP_SIGNALS] if strength[j] >= SIGNAL_Z]
        out.append(Event(host=host, start=round(float(starts[run_rows[0]]), 3),
                         end=round(float(starts[run_rows[-1]] + window_s), 3), windows=len(run_rows),
                         peak=round(float(score[run_rows].max()), 2),
                         subsystems=_subsystems(np.median(z[run_rows], axis=0), metrics),
                         metrics=[metrics[j].name for j in order]))
    return out
