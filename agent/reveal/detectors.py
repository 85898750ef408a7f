"""The three unsupervised detectors of Reveal §4.3 over window features, their agreement vote, and a fourth score
for cross-host imbalance.

`fit` learns the per-host robust scale of every feature and, per block of features (one subsystem's metrics), a
model: the 95 %-variance PCA subspace, the Isolation Forest and each detector's threshold (the PERCENTILE of its
scores). `score` applies them to the windows under test. A window is anomalous when at least `min_votes` of the
three detectors of one model agree; it is judged by the model that flags it hardest.

- Self mode (no reference; the paper's): fit and score the same file. The thresholds come from the file's typical
  windows (those outside every detector's top TRIM_PERCENT), and at most CAP_PERCENT (the paper's 1 %) of all
  windows, the strongest, are anomalous; one event takes at most EVENT_SHARE of them before the others.
- Reference mode (deviation from the paper): fit on a clean run of the same workload, no cap. A file's own top
  percent makes a 30-60 s anomaly on one of four hosts (1.5-2.5 % of the windows) compete with the workload's own
  bursts; a threshold taken from a clean run does not depend on how much of the file under test is anomalous.

Measures the paper does not describe (each measured on the Exathlon benchmark, eval/bench_reveal.py):
- One model per subsystem instead of one over every feature: a lossy link moves three network features among
  three hundred, and in the joint PCA and forest the Spark job's own CPU and disk bursts outweigh them; within the
  network block they are the outlier (benchmark network recall 0.85 -> 0.96 at the same 1 % of windows).
- Each feature's scale is at least its pooled tail spread (the 95th percentile of the deviations from each host's
  median, read as 1.96 sigmas). The MAD alone gives a mostly idle Spark counter a tiny scale, so its every burst
  scores hundreds of sigmas and outranks a fault that moves a steadier metric several times its normal range.
- The PCA subspace is fitted a second time without the windows in any detector's top TRIM_PERCENT: a persistent
  anomaly is many similar windows, which otherwise earn a principal component of their own, and a distance
  measured along a component the anomaly itself inflated is small (masking).
- The PCA and the forest see z clipped at CLIP_Z sigmas, not log-compressed: with the tail-calibrated scale a
  fault's 10 sigmas are already comparable across features, and a log would shrink them towards the noise.
- The z-score detector keeps an absolute floor (Z_FLOOR sigmas), and scores are smoothed over time (PERSISTENCE).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from sklearn.decomposition import PCA
from sklearn.ensemble import IsolationForest

DETECTORS = ("zscore", "mahalanobis", "iforest")
PERCENTILE = 99.5  # each detector's threshold: this percentile of its scores (self mode: of the typical windows)
CAP_PERCENT = 1.0  # self mode: at most this share of all windows is anomalous (the paper's 1 % contamination)
MIN_VOTES = 2
EVENT_SHARE = 5  # windows of one event that compete for the cap on strength alone (_fair_order)
RATIO_CAP = 4.0  # a window's strength counts each detector's score up to four times its threshold
PCA_VARIANCE = 0.95
# features are in asinh units (log-like: 0.001 is a 0.1 % change): a metric that sits still in nearly every window
# (cached memory on an idle host) has a near-zero spread, and a few-megabyte change then scored 1e12 sigmas
MIN_SCALE = 1e-4
TAIL_PERCENTILE = 95.0  # the deviation that sets a feature's minimum scale ...
TAIL_SIGMAS = 1.96  # ... read as this many sigmas (a normal's 95 % two-sided bound)
TRIM_PERCENT = 3.0  # refit the PCA without the windows in any detector's top 3 % (a 60 s anomaly on 1 of 4 hosts is
# up to 2.5 % of the windows)
TOP_K = 3  # the z-score detector averages the k largest |z| of a window (a mean over all features dilutes)
# a window whose k largest deviations average under five robust sigmas is not an outlier, whatever the percentile
Z_FLOOR = 5.0
CLIP_Z = 20.0  # what the PCA and the forest see of a deviation beyond this many sigmas
IMBALANCE = "imbalance"
# a flagged window is a host-local anomaly (not a phase of the whole job) when its three largest deviations from
# the peers average at least this many sigmas; an absolute bar, since it only qualifies windows the vote flagged
PEER_Z = 2.5
# Scores are smoothed by a running median over this many consecutive windows of a host (deviation from the paper,
# which scores each 3 s window alone): the goal is persistent bottlenecks (§4.4), and on a bursty workload a
# single window is as extreme during a normal 3 s burst as during a 60 s fault; the median keeps a score high
# only while at least half of the neighbouring windows are. Odd; 1 turns it off.
PERSISTENCE = 9


@dataclass
class Model:
    """The PCA subspace, forest and thresholds of one block of feature columns (one subsystem's metrics)."""

    name: str
    columns: np.ndarray  # indices into the feature columns
    pca: PCA | None
    forest: IsolationForest
    thresholds: dict[str, float]
    typical: dict[str, float] = field(default_factory=dict)  # median score of the typical windows


@dataclass
class Baseline:
    """What `fit` learned; `score` needs nothing else."""

    centre: dict[str, np.ndarray]  # per host (key "" = pooled over hosts, for hosts the reference lacks)
    scale: dict[str, np.ndarray]
    cross: np.ndarray  # bool mask of the peer-deviation (cross-host) feature columns
    models: list[Model]


@dataclass
class Detection:
    z: np.ndarray  # (rows, features) robust z per host
    # per detector, its excess (see _decide; > 1: past the threshold) in the model that judged each row
    scores: dict[str, np.ndarray]
    flags: dict[str, np.ndarray]
    votes: np.ndarray
    anomalous: np.ndarray  # votes >= min_votes, after the self-mode cap
    strength: np.ndarray  # 0..1: mean over the detectors of their excess (scores, clipped to 0..RATIO_CAP) / RATIO_CAP
    model: np.ndarray  # per row, the name of the model that judged it (the one with the most votes, then strength)
    thresholds: dict[str, float]  # "model/detector" -> threshold
    components: dict[str, int]  # model -> PCA components kept
    contributions: dict[str, np.ndarray] = field(default_factory=dict)  # detector -> (rows, features)


def _location_scale(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """median and 1.4826·MAD, else the IQR, else the std, so that mostly-zero counters still get a finite scale,
    and never under MIN_SCALE; a feature that never moves gets an infinite scale (z = 0)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a feature missing on this host: NaN, then z = 0
        med = np.nanmedian(block, axis=0)
        mad = 1.4826 * np.nanmedian(np.abs(block - med), axis=0)
        q75, q25 = np.nanpercentile(block, [75, 25], axis=0)
        std = np.nanstd(block, axis=0)
    scale = np.where(mad > 0, mad, np.where(q75 - q25 > 0, (q75 - q25) / 1.349, std))
    return med, np.where(scale > 0, np.maximum(scale, MIN_SCALE), np.inf)


def _z(base: Baseline, values: np.ndarray, hosts: np.ndarray) -> np.ndarray:
    z = np.zeros_like(values, dtype=float)
    for host in np.unique(hosts):
        rows = hosts == host
        key = host if host in base.centre else ""
        z[rows] = np.nan_to_num((values[rows] - base.centre[key]) / base.scale[key], nan=0.0, posinf=0.0,
                                neginf=0.0)
    return z


def clip(z: np.ndarray) -> np.ndarray:
    """z bounded at ±CLIP_Z: the PCA and the forest see a 1000-sigma burst as no more than a clear outlier, so
    it cannot own a principal component or the forest's split points."""
    return np.clip(z, -CLIP_Z, CLIP_Z)


def _zscore(z: np.ndarray) -> np.ndarray:
    feats = z.shape[1]
    k = min(TOP_K, feats)
    return np.mean(np.partition(np.abs(z), feats - k, axis=1)[:, feats - k:], axis=1)


def _imbalance(z: np.ndarray, cross: np.ndarray) -> np.ndarray:
    """The host's deviation from its peers, scored like the z-score detector on the cross-host columns only."""
    return _zscore(z[:, cross]) if cross.any() else np.zeros(z.shape[0])


def _tail_scale(values: np.ndarray, hosts: np.ndarray, centre: dict[str, np.ndarray]) -> np.ndarray:
    """Per feature, the TAIL_PERCENTILE of |deviation from the host's median| over all hosts, in sigmas."""
    deviation = np.abs(values - np.vstack([centre[str(h)] for h in hosts]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a feature missing on every host
        return np.nan_to_num(np.nanpercentile(deviation, TAIL_PERCENTILE, axis=0)) / TAIL_SIGMAS


def _floor(scale: np.ndarray, tail: np.ndarray) -> np.ndarray:
    """The scale raised to the tail spread; a feature that never moves keeps its infinite scale (z = 0) unless
    its tail moves."""
    return np.where(np.isfinite(scale), np.maximum(scale, tail), np.where(tail > 0, tail, np.inf))


def _top(scores: dict[str, np.ndarray], percent: float) -> np.ndarray:
    """Windows in any detector's top `percent`."""
    out = np.zeros(len(next(iter(scores.values()))), dtype=bool)
    for name in DETECTORS:
        out |= scores[name] > np.percentile(scores[name], 100 - percent)
    return out


def blocks(groups: np.ndarray | None, width: int) -> list[tuple[str, np.ndarray]]:
    """(name, column indices) per group label; one block "all" without groups."""
    if groups is None:
        return [("all", np.arange(width))]
    return [(str(g), np.flatnonzero(groups == g)) for g in dict.fromkeys(groups)]


def fit(values: np.ndarray, hosts: np.ndarray, cross: np.ndarray, groups: np.ndarray | None = None,
        percentile: float = PERCENTILE, seed: int = 0) -> Baseline:
    base, z = _scaled(values, hosts, cross)
    base.models = [_fit_model(name, cols, z, hosts, percentile, seed, False)[0]
                   for name, cols in blocks(groups, z.shape[1])]
    return base


def _scaled(values: np.ndarray, hosts: np.ndarray, cross: np.ndarray) -> tuple[Baseline, np.ndarray]:
    """The per-host robust location and scale, floored at the pooled tail spread, and the z they give."""
    centre, scale = {}, {}
    for host in np.unique(hosts):
        centre[str(host)], scale[str(host)] = _location_scale(values[hosts == host])
    centre[""], scale[""] = _location_scale(values)
    tail = _tail_scale(values, hosts, centre)
    base = Baseline(centre, {host: _floor(s, tail) for host, s in scale.items()}, cross, [])
    return base, _z(base, values, hosts)


def _fit_model(name: str, cols: np.ndarray, z: np.ndarray, hosts: np.ndarray, percentile: float, seed: int,
               self_mode: bool) -> tuple[Model, dict[str, np.ndarray]]:
    """The block's model and its in-sample scores (self mode reuses them instead of scoring again)."""
    zb = z[:, cols]
    zc = clip(zb)
    model = Model(name, cols, None, IsolationForest(n_estimators=100, random_state=seed).fit(zc), {})
    forest = persistent(-model.forest.score_samples(zc), hosts)
    if zb.shape[0] > 2 and zb.shape[1] > 1 and np.any(zb):
        model.pca = PCA(n_components=PCA_VARIANCE, svd_solver="full").fit(zc)
    scores = _model_scores(model, zb, hosts, forest)
    if model.pca is not None:
        typical = ~_top(scores, TRIM_PERCENT)
        if typical.sum() > zc.shape[1]:
            model.pca = PCA(n_components=PCA_VARIANCE, svd_solver="full").fit(zc[typical])
            scores = _model_scores(model, zb, hosts, forest)
    # self mode: the bar is set by the file's typical windows, so that an anomaly longer than the top percent
    # cannot raise it to its own level (then only a few of its windows pass, and rarely the same ones for two
    # detectors); the cap decides how many of the windows past it are reported
    typical = ~_top(scores, TRIM_PERCENT) if self_mode else np.ones(zb.shape[0], dtype=bool)
    model.thresholds = {name: float(np.percentile(s[typical], percentile)) for name, s in scores.items()}
    model.typical = {name: float(np.median(s[typical])) for name, s in scores.items()}
    model.thresholds["zscore"] = max(model.thresholds["zscore"], Z_FLOOR)
    if model.pca is None:  # nothing varies: no subspace to measure in
        model.thresholds["mahalanobis"] = np.inf
    return model, scores


def _model_scores(model: Model, z: np.ndarray, hosts: np.ndarray,
                  forest: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The three detectors' persistent scores of the block's columns `z`."""
    zc = clip(z)
    if forest is None:
        forest = persistent(-model.forest.score_samples(zc), hosts)
    maha = np.zeros(z.shape[0])
    if model.pca is not None:
        proj = model.pca.transform(zc)
        maha = np.sqrt(np.sum(proj ** 2 / np.maximum(model.pca.explained_variance_, 1e-9), axis=1))
    return {"zscore": persistent(_zscore(z), hosts), "mahalanobis": persistent(maha, hosts), "iforest": forest}


def _mahalanobis_share(model: Model, z: np.ndarray) -> np.ndarray:
    """Per feature of the block, its share of the squared distance: x_j * (P diag(1/var) P^T x)_j."""
    zc = clip(z)
    if model.pca is None:
        return np.abs(z)
    var = np.maximum(model.pca.explained_variance_, 1e-9)
    return np.abs((zc - model.pca.mean_) * ((model.pca.transform(zc) / var) @ model.pca.components_))


def persistent(scores: np.ndarray, hosts: np.ndarray, span: int = PERSISTENCE) -> np.ndarray:
    """Running median over `span` consecutive windows of each host (rows of one host are in time order)."""
    if span <= 1:
        return scores
    out = np.empty_like(scores)
    half = span // 2
    for host in np.unique(hosts):
        rows = np.flatnonzero(hosts == host)
        padded = np.pad(scores[rows], half, mode="edge")
        out[rows] = np.median(sliding_window_view(padded, span), axis=1)
    return out


def _decide(base: Baseline, z: np.ndarray, hosts: np.ndarray, scored: list[tuple[Model, dict[str, np.ndarray]]],
            min_votes: int, cap_percent: float | None) -> Detection:
    """Each row is judged by the model that flags it hardest (most votes, then strength); in self mode at most
    cap_percent of the rows are anomalous, in _fair_order."""
    rows = z.shape[0]
    # each detector's excess over its typical score in units of the typical-to-threshold distance (> 1: past the
    # threshold): the forest's scores barely rise above its threshold while a distance rises far above its, so a
    # plain score / threshold would rank windows by the Mahalanobis detector alone
    ratio = np.stack([np.stack([(s[d] - m.typical[d]) / max(m.thresholds[d] - m.typical[d], 1e-12)
                                for d in DETECTORS]) for m, s in scored])  # (model, detector, row)
    votes = np.sum(ratio > 1, axis=1)
    strength = np.mean(np.clip(ratio, 0.0, RATIO_CAP) / RATIO_CAP, axis=1)
    best = np.argmax(votes + 0.5 * strength, axis=0)
    at = np.arange(rows)
    scores = {d: ratio[best, i, at] for i, d in enumerate(DETECTORS)}
    flags = {d: s > 1 for d, s in scores.items()}
    peer = persistent(_imbalance(z, base.cross), hosts) / PEER_Z
    scores[IMBALANCE], flags[IMBALANCE] = peer, peer > 1
    chosen_votes, chosen_strength = votes[best, at], strength[best, at]
    anomalous = chosen_votes >= min_votes
    if cap_percent is not None:
        limit = max(1, int(cap_percent / 100 * rows))
        flagged = np.flatnonzero(anomalous)
        if len(flagged) > limit:
            events = _events(flagged, best[flagged], hosts[flagged])
            anomalous[flagged[_fair_order(events, chosen_strength[flagged])[limit:]]] = False
    absz = np.abs(z)
    own = np.zeros_like(absz)  # the judging model's columns
    maha = np.zeros_like(absz)
    for k, (model, _) in enumerate(scored):
        mine = best == k
        if not mine.any():
            continue
        own[np.ix_(mine, model.columns)] = absz[np.ix_(mine, model.columns)]
        maha[np.ix_(mine, model.columns)] = _mahalanobis_share(model, z[np.ix_(mine, model.columns)])
    thresholds = {f"{m.name}/{d}": t for m, _ in scored for d, t in m.thresholds.items()}
    thresholds[IMBALANCE] = PEER_Z
    return Detection(
        z=z, scores=scores, flags=flags, votes=chosen_votes, anomalous=anomalous, strength=chosen_strength,
        model=np.array([scored[k][0].name for k in best]), thresholds=thresholds,
        components={m.name: int(m.pca.n_components_) if m.pca is not None else 0 for m, _ in scored},
        contributions={"zscore": own, "iforest": own, "mahalanobis": maha})


def _events(rows: np.ndarray, model: np.ndarray, hosts: np.ndarray) -> np.ndarray:
    """Event id per flagged row (sorted): a run of consecutive windows of one host flagged by one model."""
    new = np.ones(len(rows), dtype=bool)
    new[1:] = (np.diff(rows) != 1) | (model[1:] != model[:-1]) | (hosts[1:] != hosts[:-1])
    return np.cumsum(new)


def _fair_order(events: np.ndarray, strength: np.ndarray) -> np.ndarray:
    """By strength, except that an event's windows past its strongest EVENT_SHARE go after every other event's:
    a long burst of one subsystem (a Spark job's memory churn, on every host at once) cannot crowd out another,
    weaker anomaly, and a strong anomaly still shows more than one window."""
    order = np.lexsort((-strength, events))
    position = np.empty(len(order), dtype=int)
    position[order] = np.arange(len(order)) - np.searchsorted(events[order], events[order])
    return np.lexsort((-strength, position >= EVENT_SHARE))


def score(base: Baseline, values: np.ndarray, hosts: np.ndarray, min_votes: int = MIN_VOTES) -> Detection:
    """Reference mode: the windows under test against models fitted on a clean run."""
    z = _z(base, values, hosts)
    scored = [(m, _model_scores(m, z[:, m.columns], hosts)) for m in base.models]
    return _decide(base, z, hosts, scored, min_votes, None)


def detect(values: np.ndarray, hosts: np.ndarray, cross: np.ndarray | None = None,
           groups: np.ndarray | None = None, min_votes: int = MIN_VOTES, seed: int = 0) -> Detection:
    """Self mode: fitted on the file itself; each model flags its own top windows, CAP_PERCENT of all at most."""
    mask = np.zeros(values.shape[1], dtype=bool) if cross is None else cross
    base, z = _scaled(values, hosts, mask)
    scored = [_fit_model(name, cols, z, hosts, PERCENTILE, seed, True) for name, cols in blocks(groups, z.shape[1])]
    base.models = [m for m, _ in scored]
    return _decide(base, z, hosts, scored, min_votes, CAP_PERCENT)
