"""Temporal comparison (L4 §5.3.2): each iteration's event sequence against the previous iterations by DTW, and
the three-sigma rule on the scores.

Deviation from the paper, on purpose: an iteration's score is the *median* DTW distance to the previous 10
iterations, not the mean; with the mean, the 10 iterations after a faulty one inherit a tenth of its distance each
and cross 3 sigma on long, otherwise quiet runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agent.l4.sequences import dense_unique

WINDOW = 10
SIGMAS = 3.0
MAX_SEQ = 200  # a pathological segment (a stack dump in one iteration) is compared on its first events only


def dtw(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """DTW distance between two event sequences with 0/1 event cost; an empty sequence is at distance len(other)."""
    if a == b:
        return 0.0
    if not a or not b:
        return float(len(a) + len(b))
    a, b = a[:MAX_SEQ], b[:MAX_SEQ]
    inf = float("inf")
    prev = [0.0] + [inf] * len(b)
    for x in a:
        cur = [inf] * (len(b) + 1)
        for j, y in enumerate(b, 1):
            cur[j] = (x != y) + min(prev[j], prev[j - 1], cur[j - 1])
        prev = cur
    return prev[-1]


@dataclass
class Suspicious:
    index: int  # segment index in the file
    score: float


def suspicious(sequences: list[tuple[int, ...]], window: int = WINDOW, sigmas: float = SIGMAS) -> list[Suspicious]:
    """Segments whose median DTW distance to the previous `window` segments is above mean + sigmas * std."""
    uid: dict[tuple[int, ...], int] = {}
    ids = np.fromiter((uid.setdefault(s, len(uid)) for s in sequences), np.int64, count=len(sequences))
    return suspicious_files([ids], list(uid), window, sigmas)[0]


def suspicious_files(files: list[np.ndarray], distinct: list[tuple[int, ...]], window: int = WINDOW,
                     sigmas: float = SIGMAS) -> list[list[Suspicious]]:
    """`suspicious` for many files at once; each file is an array of ids into `distinct` (one per segment).

    Iterations repeat a handful of distinct sequences, so DTW runs once per distinct (segment, previous segment)
    pair over all files, and the window medians are numpy passes over many files' segments at a time."""
    out: list[list[Suspicious]] = [[] for _ in files]
    # A file with < 3 segments or a single distinct sequence has no deviating iteration (std 0 or nothing to compare).
    used = [f for f, ids in enumerate(files) if len(ids) >= 3 and ids.min() != ids.max()]
    cache: dict[int, float] = {}  # pair code -> DTW distance, shared by the batches
    batch: list[int] = []
    for k, f in enumerate(used):
        batch.append(f)
        if k + 1 == len(used) or sum(len(files[g]) for g in batch) + len(files[used[k + 1]]) > BATCH_SEGMENTS:
            medians = _medians([files[g] for g in batch], distinct, window, cache)
            for g, scores in zip(batch, medians, strict=True):
                std = scores.std()
                if std > 0:
                    limit = scores.mean() + sigmas * std
                    out[g] = [Suspicious(int(i), float(scores[i])) for i in np.flatnonzero(scores > limit)]
            batch = []
    return out


BATCH_SEGMENTS = 1 << 20  # bounds the (segments x window) arrays to ~100 MB on the largest jobs


def _medians(files: list[np.ndarray], distinct: list[tuple[int, ...]], window: int,
             cache: dict[int, float]) -> list[np.ndarray]:
    """Per file, each segment's median DTW distance to its previous `window` segments (0 for the first)."""
    ids = np.concatenate(files).astype(np.int64)
    sizes = np.array([len(f) for f in files])
    local = np.arange(len(ids)) - np.repeat(np.cumsum(sizes) - sizes, sizes)  # index within its file
    offsets = np.arange(1, window + 1)
    valid = local[:, None] - offsets[None, :] >= 0
    prev = np.where(valid, np.arange(len(ids))[:, None] - offsets[None, :], 0)
    d = len(distinct)
    pairs = ids[:, None] * d + ids[prev]
    codes, inverse = dense_unique(pairs[valid], d * d)
    dist = np.array([cache[c] if c in cache else cache.setdefault(c, dtw(distinct[c // d], distinct[c % d]))
                     for c in codes.tolist()])
    matrix = np.full((len(ids), window), np.nan)
    matrix[valid] = dist[inverse]
    medians = _row_nanmedian(matrix, valid.sum(axis=1))
    medians[local == 0] = 0.0
    return np.split(medians, np.cumsum(sizes)[:-1])


def _row_nanmedian(matrix: np.ndarray, count: np.ndarray) -> np.ndarray:
    """np.nanmedian per row, for rows whose `count` values come first (NaN after): one sort instead of nanmedian's
    masked-array path, which is slow on many short rows. Rows without values give NaN."""
    ordered = np.sort(matrix, axis=1)  # NaN sorts last, so each row's values stay in front, ascending
    rows = np.arange(len(matrix))
    lo = ordered[rows, np.maximum(count - 1, 0) // 2]  # the middle value (odd count) or the lower middle (even)
    hi = ordered[rows, np.minimum(count // 2, matrix.shape[1] - 1)]  # the same value, or the upper middle
    return np.where(count == 0, np.nan, (lo + hi) / 2)
