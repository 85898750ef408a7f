"""The three unsupervised detectors of Reveal §4.3 over window features, their agreement vote, and a fourth score
for cross-host imbalance.

Two modes share one code path: `fit` learns the per-host robust scale, the 95 %-variance PCA subspace, the
Isolation Forest and each detector's threshold (a high percentile of its scores) on reference windows; `score`
applies them to the windows under test.

- Self mode (no reference; the paper's): fit and score the same file, so each detector flags its top 1 %.
- Reference mode (deviation from the paper, kept because it measured better): fit on a clean run of the same
  workload. A file's own top 1 % makes a 30-60 s anomaly on one of four hosts (1.5-2.5 % of the windows) compete
  with the workload's own bursts for that 1 %; a threshold taken from a clean run does not depend on how much of
  the file under test is anomalous. The percentile is higher (99.5) because the reference scores are in-sample.

The z-score detector also keeps an absolute floor (6 robust sigmas); a window is anomalous when at least
`min_votes` of the three detectors agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from sklearn.decomposition import PCA
from sklearn.ensemble import IsolationForest

DETECTORS = ("zscore", "mahalanobis", "iforest")
PERCENTILE = 99.0  # self mode: the paper's top 1 % (Isolation Forest: 1 % contamination)
REFERENCE_PERCENTILE = 99.0
PCA_VARIANCE = 0.95
TOP_K = 3  # the z-score detector averages the k largest |z| of a window (a mean over all features dilutes)
# a window whose k largest deviations average under six robust sigmas is not an outlier, whatever the percentile
Z_FLOOR = 6.0
IMBALANCE = "imbalance"
# Scores are smoothed by a running median over this many consecutive windows of a host (deviation from the paper,
# which scores each 3 s window alone): the goal is persistent bottlenecks (§4.4), and on a bursty workload a
# single window is as extreme during a normal 3 s burst as during a 60 s fault; the median keeps a score high
# only while at least half of the neighbouring windows are. Odd; 1 turns it off.
PERSISTENCE = 9


@dataclass
class Baseline:
    """What `fit` learned; `score` needs nothing else."""

    centre: dict[str, np.ndarray]  # per host (key "" = pooled over hosts, for hosts the reference lacks)
    scale: dict[str, np.ndarray]
    pca: PCA | None
    forest: IsolationForest
    thresholds: dict[str, float]
    cross: np.ndarray  # bool mask of the peer-deviation (cross-host) feature columns


@dataclass
class Detection:
    z: np.ndarray  # (rows, features) robust z per host
    scores: dict[str, np.ndarray]
    flags: dict[str, np.ndarray]
    thresholds: dict[str, float]
    votes: np.ndarray
    contributions: dict[str, np.ndarray] = field(default_factory=dict)  # detector -> (rows, features)
    components: int = 0


def _location_scale(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """median and 1.4826·MAD, else the IQR, else the std, so that mostly-zero counters still get a finite scale;
    a feature that never moves gets an infinite scale (z = 0)."""
    med = np.nanmedian(block, axis=0)
    mad = 1.4826 * np.nanmedian(np.abs(block - med), axis=0)
    q75, q25 = np.nanpercentile(block, [75, 25], axis=0)
    std = np.nanstd(block, axis=0)
    scale = np.where(mad > 0, mad, np.where(q75 - q25 > 0, (q75 - q25) / 1.349, std))
    return med, np.where(scale > 1e-9 * (np.abs(med) + 1), scale, np.inf)


def _z(base: Baseline, values: np.ndarray, hosts: np.ndarray) -> np.ndarray:
    z = np.zeros_like(values, dtype=float)
    for host in np.unique(hosts):
        rows = hosts == host
        key = host if host in base.centre else ""
        z[rows] = np.nan_to_num((values[rows] - base.centre[key]) / base.scale[key], nan=0.0, posinf=0.0,
                                neginf=0.0)
    return z


def compress(z: np.ndarray) -> np.ndarray:
    """sign(z)·log(1 + |z|): monotone, so rankings survive, but a 1000-sigma burst no longer owns the PCA and
    the forest's split points the way it would on the raw scale."""
    return np.sign(z) * np.log1p(np.abs(z))


def _zscore(z: np.ndarray) -> np.ndarray:
    feats = z.shape[1]
    k = min(TOP_K, feats)
    return np.mean(np.partition(np.abs(z), feats - k, axis=1)[:, feats - k:], axis=1)


def _imbalance(z: np.ndarray, cross: np.ndarray) -> np.ndarray:
    """The host's deviation from its peers, scored like the z-score detector on the cross-host columns only."""
    return _zscore(z[:, cross]) if cross.any() else np.zeros(z.shape[0])


def fit(values: np.ndarray, hosts: np.ndarray, cross: np.ndarray, percentile: float = PERCENTILE,
        seed: int = 0) -> Baseline:
    centre, scale = {}, {}
    for host in np.unique(hosts):
        centre[str(host)], scale[str(host)] = _location_scale(values[hosts == host])
    centre[""], scale[""] = _location_scale(values)
    base = Baseline(centre, scale, None, IsolationForest(n_estimators=100, random_state=seed), {}, cross)
    z = _z(base, values, hosts)
    zc = compress(z)
    if z.shape[0] > 2 and z.shape[1] > 1 and np.any(z):
        base.pca = PCA(n_components=PCA_VARIANCE, svd_solver="full").fit(zc)
    base.forest.fit(zc)
    scores, _ = _scores(base, z, hosts)
    base.thresholds = {name: float(np.percentile(s, percentile)) for name, s in scores.items()}
    base.thresholds["zscore"] = max(base.thresholds["zscore"], Z_FLOOR)
    # imbalance describes windows the vote already flagged, so it takes an absolute bar (the host is six robust
    # sigmas off its peers), not a top 1 % that would cap it at 1 % of the file's windows
    base.thresholds[IMBALANCE] = Z_FLOOR
    if base.pca is None:  # nothing varies: no subspace to measure in
        base.thresholds["mahalanobis"] = np.inf
    return base


def _scores(base: Baseline, z: np.ndarray, hosts: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    absz = np.abs(z)
    zc = compress(z)
    scores = {"zscore": _zscore(z)}
    contributions = {"zscore": absz, "iforest": absz}  # trees give no per-feature share: the largest deviations
    if base.pca is not None:
        proj = base.pca.transform(zc)
        var = np.maximum(base.pca.explained_variance_, 1e-9)
        scores["mahalanobis"] = np.sum(proj ** 2 / var, axis=1)
        # per feature: its share of the distance, x_j * (P diag(1/var) P^T x)_j
        contributions["mahalanobis"] = np.abs((zc - base.pca.mean_) * ((proj / var) @ base.pca.components_))
    else:
        scores["mahalanobis"] = np.zeros(z.shape[0])
        contributions["mahalanobis"] = absz
    scores["iforest"] = -base.forest.score_samples(zc)
    scores[IMBALANCE] = _imbalance(z, base.cross)
    return {name: persistent(s, hosts) for name, s in scores.items()}, contributions


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


def score(base: Baseline, values: np.ndarray, hosts: np.ndarray) -> Detection:
    z = _z(base, values, hosts)
    scores, contributions = _scores(base, z, hosts)
    flags = {name: scores[name] > base.thresholds[name] for name in scores}
    votes = np.sum([flags[name] for name in DETECTORS], axis=0)
    components = base.pca.n_components_ if base.pca is not None else 0
    return Detection(z, scores, flags, dict(base.thresholds), votes, contributions, int(components))


def detect(values: np.ndarray, hosts: np.ndarray, cross: np.ndarray | None = None, seed: int = 0) -> Detection:
    """Self mode: every detector flags the top 1 % of the file's own windows."""
    mask = np.zeros(values.shape[1], dtype=bool) if cross is None else cross
    return score(fit(values, hosts, mask, PERCENTILE, seed), values, hosts)
