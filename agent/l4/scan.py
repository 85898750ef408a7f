"""The per-file stage: one log file -> counts of its line shapes, iteration segments and stage transitions.

A pure function of the file's bytes and name, so the in-process path and Dask workers give identical results. Per
line it does C-speed work only (digit folding, split, dict lookups into a numpy array); regexes run once per
distinct digit-folded line, and iteration numbers are read from the raw bytes with numpy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from agent.l4 import stages
from agent.l4.reader import LogError, LogFile, read_chunks
from agent.l4.templates import canonical, fold_digits

EXAMPLE_CHARS = 400
CACHED_LINE_BYTES = 1024


@dataclass
class FileScan:
    path: str
    node: str
    lines: int = 0
    shapes: list[str] = field(default_factory=list)  # canonical shapes, in order of first occurrence
    counts: list[int] = field(default_factory=list)
    first: list[int] = field(default_factory=list)  # line index of each shape's first / last occurrence
    last: list[int] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)  # first raw line of each shape
    iterations: list[int] = field(default_factory=list)  # iteration number closing each segment
    seq: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # shape ids of the lines in segments
    bounds: list[int] = field(default_factory=list)  # segment k is seq[bounds[k]:bounds[k+1]]
    tail_start: int = 0  # first line after the last iteration marker (0: the file has none)
    progress_start: int = -1  # line of the first progress line (framework marker or generic progress), -1: none
    progress: list[int] = field(default_factory=list)  # shape indices of the file's progress lines
    transitions: list[tuple[int, int]] = field(default_factory=list)  # (line, stage index), changes only
    skipped: str = ""  # why the file was not used


def scan_file(log: LogFile) -> FileScan:
    """Streams the file in blocks of whole lines (reader.CHUNK_BYTES): memory is bounded by one block plus a few
    bytes per line, whatever the file's size."""
    try:
        return scan_chunks(log, read_chunks(log.path))
    except LogError as exc:
        return FileScan(log.path, log.node, skipped=str(exc))


def scan_bytes(log: LogFile, data: bytes) -> FileScan:
    return scan_chunks(log, [data])


def scan_chunks(log: LogFile, chunks: Iterable[bytes]) -> FileScan:
    # Raw lines are never split out of a block (that would be a second Python object per line): the few raw texts
    # needed (examples, iteration numbers) are read at line offsets.
    shape_ids: dict[str, int] = {}
    examples: list[str] = []
    pieces: list[np.ndarray] = []  # per block, the shape id of each line
    mark_lines: list[np.ndarray] = []  # iteration-marker lines that carry a number: global line, shape, number
    mark_shapes: list[np.ndarray] = []
    mark_numbers: list[np.ndarray] = []
    n_lines = 0
    for data in chunks:
        folded_lines = fold_digits(data).split(b"\n")
        starts = np.zeros(len(folded_lines), np.int64)
        starts[1:] = np.flatnonzero(np.frombuffer(data, np.uint8) == 0x0A) + 1
        if not folded_lines[-1].strip():  # the piece after the final newline (or trailing blanks) is not a line
            folded_lines.pop()
        if not folded_lines:
            continue
        keys = list(dict.fromkeys(folded_lines))  # distinct folded lines, first occurrence first
        key_ids = {k: i for i, k in enumerate(keys)}
        line_keys = np.fromiter(map(key_ids.__getitem__, folded_lines), np.int32, count=len(folded_lines))
        del folded_lines, key_ids
        known = len(shape_ids)
        key_to_shape = np.fromiter((shape_ids.setdefault(_shape(key), len(shape_ids)) for key in keys), np.int32,
                                   count=len(keys))
        line_shapes = key_to_shape[line_keys]
        if len(shape_ids) > known:  # first raw line of each new shape
            _, first = np.unique(line_shapes[line_shapes >= known], return_index=True)
            first = np.flatnonzero(line_shapes >= known)[first]
            examples += [data[b:b + min(len(keys[k]), EXAMPLE_CHARS)].decode("utf-8", "replace").rstrip()
                         for b, k in zip(starts[first].tolist(), line_keys[first].tolist(), strict=True)]
        shapes = list(shape_ids)
        marker_shape = np.array([stages.is_iteration(shapes[i]) for i in range(len(shapes))], bool)
        marker = np.flatnonzero(marker_shape[line_shapes])
        if len(marker):
            lines, numbers = _iteration_numbers(data, starts, marker, line_keys, keys)
            mark_lines.append(lines + n_lines)
            mark_shapes.append(line_shapes[lines])
            mark_numbers.append(numbers)
        pieces.append(line_shapes)
        n_lines += len(line_shapes)
    if not n_lines:
        raise LogError("empty")
    line_shapes = np.concatenate(pieces)
    del pieces
    shapes = list(shape_ids)
    counts = np.bincount(line_shapes, minlength=len(shapes))
    _, first = np.unique(line_shapes, return_index=True)
    _, rev = np.unique(line_shapes[::-1], return_index=True)
    last = len(line_shapes) - 1 - rev
    scan = FileScan(log.path, log.node, lines=n_lines, shapes=shapes, counts=counts.tolist(),
                    first=first.tolist(), last=last.tolist(), examples=examples)
    dominant = _dominant_marker(shapes, counts)
    if dominant >= 0 and mark_lines:
        lines, marks = np.concatenate(mark_lines), np.concatenate(mark_shapes)
        numbers = np.concatenate(mark_numbers) if all(m.dtype != object for m in mark_numbers) else \
            np.array([x for m in mark_numbers for x in m.tolist()], dtype=object)
        pick = marks == dominant
        _segment(scan, lines[pick], numbers[pick], line_shapes)
    _progress(scan, line_shapes)
    _transitions(scan, line_shapes)
    return scan


def _progress(scan: FileScan, line_shapes: np.ndarray) -> None:
    """The file's progress lines: the framework's iteration markers and any other shape that says it reports
    progress (step/epoch/loss/it/s wording) and repeats through the file (a progress bar, a `step N loss` print).
    However many there are, they are the job working; the last one ends the healthy part of the file. "Through the
    file" is through its part before the first failure-worded line: a crash's stack dump can be longer than the run."""
    worded = [scan.first[i] for i, shape in enumerate(scan.shapes) if stages.failure_weight(shape) == 1.0]
    n = max(min(worded, default=scan.lines), 1)
    scan.progress = [i for i, shape in enumerate(scan.shapes)
                     if stages.is_iteration(shape) or (scan.counts[i] >= stages.PROGRESS_MIN_LINES
                                                       and scan.last[i] - scan.first[i] >= stages.PROGRESS_SPAN * n
                                                       and stages.is_progress(shape))]
    if not scan.progress:
        return
    scan.progress_start = min(scan.first[i] for i in scan.progress)
    if not scan.tail_start:
        scan.tail_start = max(scan.last[i] for i in scan.progress) + 1


def _shape(key: bytes) -> str:
    # Cached across files: the ranks of a job print the same folded lines, so each is masked once per process. Long
    # lines (dumped tensors, stack dumps) stay out of the cache, which would otherwise hold megabytes per entry.
    if len(key) > CACHED_LINE_BYTES:
        return canonical(key.decode("utf-8", "replace"))
    return _cached_shape(key)


@lru_cache(maxsize=1 << 16)
def _cached_shape(key: bytes) -> str:
    return canonical(key.decode("utf-8", "replace"))


def _dominant_marker(shapes: list[str], counts: np.ndarray) -> int:
    """The iteration-marker shape that drives segmentation: the most frequent one (DeepSpeed prints two markers per
    step); -1 if the file has none."""
    markers = [i for i, shape in enumerate(shapes) if stages.is_iteration(shape)]
    if not markers:
        return -1
    return max(markers, key=lambda i: (counts[i], -i))


def _iteration_numbers(data: bytes, starts: np.ndarray, lines: np.ndarray, line_keys: np.ndarray,
                       keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(marker lines that carry an iteration number, the numbers). Digit folding keeps every byte's offset and
    class, so the number's span found in a line's folded key is its span in the raw line: the regex runs once per
    distinct key and the digits are read with numpy, not per line."""
    kinds, inverse = np.unique(line_keys[lines], return_inverse=True)
    spans = np.array([stages.iteration_number_span(keys[k]) for k in kinds.tolist()], np.int64).reshape(-1, 2)
    begin, end = spans[inverse, 0], spans[inverse, 1]
    found = begin >= 0
    lines, begin, width = lines[found], starts[lines[found]] + begin[found], (end - begin)[found]
    if not len(lines):
        return lines, width
    if width.max() > 18:  # beyond int64: Python ints, one per line (never seen in practice)
        return lines, np.array([int(data[b:b + w]) for b, w in zip(begin.tolist(), width.tolist(), strict=True)],
                               dtype=object)
    column = np.arange(width.max())
    digit = column[None, :] < width[:, None]
    raw = np.frombuffer(data, np.uint8)[np.where(digit, begin[:, None] + column[None, :], 0)].astype(np.int64) - 48
    power = 10 ** np.maximum(width[:, None] - 1 - column[None, :], 0)
    return lines, np.where(digit, raw * power, 0).sum(axis=1)


def _segment(scan: FileScan, positions: np.ndarray, numbers: np.ndarray, line_shapes: np.ndarray) -> None:
    """Iteration segments: a segment ends at a marker line whose number differs from the previous marker's (ranks
    of one node interleaved in one file print the same iteration in a row)."""
    if not len(positions):
        return
    # A run of markers with the same number is one segment end, at the run's last marker.
    run_end = np.append(numbers[1:] != numbers[:-1], True)
    ends, numbers = positions[run_end], numbers[run_end]
    # Lines before the first marker are init/loading and its iteration, not a comparable iteration segment; the
    # segments tile the lines from there to the last marker.
    scan.tail_start = int(ends[-1]) + 1
    if len(ends) < 2:
        return
    scan.seq = line_shapes[ends[0] + 1:ends[-1] + 1].astype(np.int32)
    scan.bounds = [0, *(ends[1:] - ends[0]).tolist()]
    scan.iterations = [int(x) for x in numbers[1:].tolist()]


def _transitions(scan: FileScan, line_shapes: np.ndarray) -> None:
    stage_arr = np.array([stages.stage_of(s) for s in scan.shapes], np.int8)
    stage_arr[[i for i in scan.progress if not stage_arr[i]]] = stages.STAGES.index("training") + 1
    if not stage_arr.any():
        return
    per_line = stage_arr[line_shapes]
    pos = np.flatnonzero(per_line)
    values = per_line[pos]
    lazy = np.array([stages.is_communicator_init(s) for s in scan.shapes], bool)[line_shapes[pos]]
    trained = np.maximum.accumulate(values >= stages.STAGES.index("training") + 1)
    late = lazy & np.concatenate([[False], trained[:-1]])  # a communicator created after training began
    pos, values = pos[~late], values[~late]
    change = np.ones(len(values), bool)
    change[1:] = values[1:] != values[:-1]
    scan.transitions = [(int(p), int(v)) for p, v in zip(pos[change], values[change], strict=True)]
