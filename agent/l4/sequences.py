"""Per-iteration event sequences of all files at once, interned: one small int per segment instead of a tuple.

A 256-rank job has ~500k iteration segments but a handful of distinct sequences. Building a Python tuple per
segment cost more than the rest of the analysis, so segments are compared column by column in numpy (a prefix
refinement: two segments share a key after step j iff their first j+1 kept events are equal) and tuples are built
for the distinct sequences only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Sequences:
    ids: list[np.ndarray]  # per file, one id into `distinct` per iteration segment
    distinct: list[tuple[int, ...]]  # kept template indices in log order
    pair_seq: np.ndarray  # (sequence id, template) for each template in each distinct sequence, once
    pair_template: np.ndarray


def build(files: list[tuple[np.ndarray, list[int]]], keep: np.ndarray) -> Sequences:
    """`files`: per file, the template index of each line in its segments and the segment bounds (segment k is
    lines[bounds[k]:bounds[k+1]]). Templates outside `keep` (filtered as normal) are dropped from the sequences."""
    sizes = [max(len(bounds) - 1, 0) for _, bounds in files]
    lengths = np.concatenate([np.diff(np.asarray(b, np.int64)) for _, b in files if len(b) > 1] or [np.zeros(0, int)])
    values = np.concatenate([t for t, b in files if len(b) > 1] or [np.zeros(0, np.int64)]).astype(np.int64)
    segment = np.repeat(np.arange(len(lengths)), lengths)
    kept = keep[values]
    values, segment = values[kept], segment[kept]
    length = np.bincount(segment, minlength=len(lengths))
    start = np.cumsum(length) - length
    key = np.zeros(len(lengths), np.int64)
    alive, low, top, j, base = np.flatnonzero(length > 0), 0, 0, 0, max(len(keep), 1)
    while len(alive):
        # The alive segments hold keys in [low, top] from the previous step; new keys go above every earlier one, so
        # a segment that ended earlier (and kept its key) never shares a key with a longer one.
        codes = (key[alive] - low) * base + values[start[alive] + j]
        uniq, inverse = dense_unique(codes, (top - low + 1) * base)
        low = top + 1
        key[alive] = low + inverse
        top = low + len(uniq) - 1
        j += 1
        alive = alive[length[alive] > j]
    uniq, ids = dense_unique(key, top + 1)
    first = np.zeros(len(uniq), np.int64)
    first[ids] = np.arange(len(ids))  # any segment of each sequence represents it: they are all equal
    distinct = [tuple(values[start[s]:start[s] + length[s]].tolist()) for s in first.tolist()]
    pairs = {(d, t) for d, seq in enumerate(distinct) for t in seq}
    pair_seq = np.array([d for d, _ in sorted(pairs)], np.int64)
    pair_template = np.array([t for _, t in sorted(pairs)], np.int64)
    cuts = np.cumsum(sizes)[:-1]
    return Sequences(np.split(ids.reshape(-1), cuts) if files else [], distinct, pair_seq, pair_template)


DENSE_LIMIT = 1 << 24  # below this many possible codes, a lookup table beats np.unique's sort


def dense_unique(codes: np.ndarray, upper: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(codes, return_inverse=True) for non-negative codes below `upper`, without sorting when the range is
    small (the sort of millions of codes dominated the analysis)."""
    if upper > DENSE_LIMIT:
        return np.unique(codes, return_inverse=True)
    seen = np.zeros(upper, bool)
    seen[codes] = True
    rank = np.cumsum(seen) - 1
    return np.flatnonzero(seen), rank[codes]
