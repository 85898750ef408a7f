"""The vectorised pieces of the L4 analysis against plain reference implementations: segment interning, the
window medians and DTW scores, and reading iteration numbers at byte offsets."""

from __future__ import annotations

import random

import numpy as np
import pytest

from agent.l4 import sequences, temporal
from agent.l4.reader import LogFile
from agent.l4.scan import scan_bytes
from agent.l4.stages import iteration_number


def _reference_suspicious(seqs: list[tuple[int, ...]]) -> list[tuple[int, float]]:
    """The textbook loop: median DTW distance to the previous WINDOW segments, then mean + 3 sigma."""
    if len(seqs) < 3 or len(set(seqs)) == 1:
        return []
    scores = np.zeros(len(seqs))
    for i in range(1, len(seqs)):
        scores[i] = np.median([temporal.dtw(seqs[i], seqs[j]) for j in range(max(0, i - temporal.WINDOW), i)])
    if scores.std() == 0:
        return []
    limit = scores.mean() + temporal.SIGMAS * scores.std()
    return [(i, float(s)) for i, s in enumerate(scores) if s > limit]


def _random_files(rnd: random.Random) -> list[list[tuple[int, ...]]]:
    routine = [(1, 2), (1, 2, 3), (4,)]
    files = []
    for _ in range(rnd.randint(1, 6)):
        n = rnd.randint(0, 40)
        seqs = [rnd.choice(routine) for _ in range(n)]
        for _ in range(rnd.randint(0, 3)):  # a few odd iterations: extra events, empty, long
            if seqs:
                seqs[rnd.randrange(n)] = tuple(rnd.randrange(8) for _ in range(rnd.choice([0, 1, 5, 30])))
        files.append(seqs)
    return files


def test_interning_and_scores_match_reference() -> None:
    rnd = random.Random(3)
    for _ in range(60):
        files = _random_files(rnd)
        keep = np.array([rnd.random() < 0.8 for _ in range(8)])
        parts = []
        for seqs in files:  # lines of all templates, then the filter must drop the ones not kept
            bounds = np.cumsum([0, *(len(s) for s in seqs)]).tolist() if seqs else []
            parts.append((np.array([t for s in seqs for t in s], np.int64), bounds))
        built = sequences.build(parts, keep)
        kept = [[tuple(t for t in s if keep[t]) for s in seqs] for seqs in files]
        assert [[built.distinct[i] for i in ids.tolist()] for ids in built.ids] == kept
        assert len(set(built.distinct)) == len(built.distinct)
        got = temporal.suspicious_files(built.ids, built.distinct)
        assert [[(s.index, s.score) for s in file] for file in got] == [_reference_suspicious(k) for k in kept]


def test_dense_unique_matches_numpy() -> None:
    codes = np.random.default_rng(1).integers(0, 5000, 20_000)
    for upper in (5000, sequences.DENSE_LIMIT + 1):
        uniq, inverse = sequences.dense_unique(codes, upper)
        ref_uniq, ref_inverse = np.unique(codes, return_inverse=True)
        assert np.array_equal(uniq, ref_uniq) and np.array_equal(inverse, ref_inverse)


def test_iteration_numbers_read_at_offsets() -> None:
    lines = [b"[default0]: iteration        %d/     500 | loss 2.5 |" % i for i in (1, 9, 10, 10, 11, 123456)]
    lines[3] = b"  [rank3]: iteration       10/     500 | loss 2.5 |"  # same shape, other offset
    lines += [b"noise 7", b"[default1]: iteration 123456/ 500 | loss 2.5 |", b"iteration 123457/ 500 | loss 1 |"]
    scan = scan_bytes(LogFile("x.log", "n"), b"\n".join(lines) + b"\n")
    markers = [i for i, line in enumerate(lines) if iteration_number(line) is not None]
    numbers = [iteration_number(lines[i]) for i in markers]
    # Runs of equal numbers close one segment; the first marker opens the comparable iterations.
    ends = [p for k, p in enumerate(markers) if k + 1 == len(markers) or numbers[k + 1] != numbers[k]]
    assert scan.iterations == [n for k, n in enumerate(numbers) if markers[k] in ends][1:]
    assert scan.bounds == [e - ends[0] for e in ends] and scan.tail_start == ends[-1] + 1


def test_batches_give_the_same_scores(monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = random.Random(5)
    files = [np.array([0 if rnd.random() < 0.97 else rnd.choice([1, 2]) for _ in range(rnd.randint(0, 80))])
             for _ in range(40)]
    distinct = [(1, 2), (1, 2, 3, 5, 6, 7), (4,)]
    whole = temporal.suspicious_files(files, distinct)
    monkeypatch.setattr(temporal, "BATCH_SEGMENTS", 60)
    assert temporal.suspicious_files(files, distinct) == whole and sum(map(len, whole)) > 0
