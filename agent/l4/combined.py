"""One launcher output for the whole job -> one stream per node.

Most users have a single file for a multi-node job: the DeepSpeed launcher's output (pdsh prefixes each line with
its host, `gpu1504: ...`) or a Slurm job's output written by `srun --label` (`  3: ...`, the task number). L4
compares nodes, so such a file is split by its prefixes into one file per node before it is scanned. srun's own
`srun: error: <host>: task 3: Exited ...` lines name the host of a task; named tasks take their host's name.
Lines without a prefix are the launcher's own (the command it ran, srun's messages) and belong to no node.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

from agent.l4.reader import SAMPLE_BYTES, LogError, LogFile, read_chunks

# pdsh: `host: text`. A host label holds a digit (gpu1504, 10.0.0.7, worker-3): that keeps ordinary `Word: text`
# lines (RuntimeError:, INFO:, Traceback:) out.
_HOST = re.compile(rb"^([A-Za-z0-9][A-Za-z0-9._-]{0,62}): ")
# srun --label: the task number, right-aligned with spaces.
_TASK = re.compile(rb"^ *(\d{1,6}): ")
_SRUN_TASK_HOST = re.compile(rb"srun: error: ([A-Za-z0-9][A-Za-z0-9._-]*): tasks? (\d+)(?:-(\d+))?: ")
MIN_PREFIXED = 0.5  # of the sample's non-empty lines
FLUSH_BYTES = 8 * 2**20  # buffered across all nodes before appending to their files: memory stays bounded


def _label(line: bytes) -> tuple[str, bytes, int] | None:
    """('task'|'host', label, where the text after the prefix starts) for a prefixed line, None otherwise."""
    task = _TASK.match(line)
    if task:
        return "task", task.group(1), task.end()
    host = _HOST.match(line)
    if host and any(48 <= c <= 57 for c in host.group(1)):
        return "host", host.group(1), host.end()
    return None


def prefix_kind(sample: bytes) -> str | None:
    """'task' or 'host' when most of the sample's lines carry one kind of node prefix with at least two different
    labels; None for an ordinary (single-node) log."""
    lines = [ln for ln in sample.splitlines() if ln.strip()]
    labels = [lab for lab in map(_label, lines) if lab]
    if not labels:
        return None
    kind, count = Counter(k for k, *_ in labels).most_common(1)[0]
    if count < MIN_PREFIXED * len(lines) or len({lab for k, lab, _ in labels if k == kind}) < 2:
        return None
    return kind


def split(log: LogFile, out: Path) -> list[LogFile] | None:
    """Per-node files under `out` for a combined launcher output, None when `log` is not one or cannot be read to
    its end (the scan of the file itself then says why). Two streamed passes (the first learns which host ran each
    srun task), so each node's lines keep their order and memory is bounded by FLUSH_BYTES whatever the file's
    size."""
    chunks = read_chunks(log.path, SAMPLE_BYTES)
    try:
        sample = next(chunks, b"")[:SAMPLE_BYTES]
    except LogError:
        return None
    finally:
        chunks.close()
    kind = prefix_kind(sample)
    if kind is None:
        return None
    try:
        task_host = _task_hosts(log) if kind == "task" else {}
        _write_parts(log, kind, task_host, out)
    except LogError:
        for part in out.glob("*.log"):
            part.unlink()
        return None
    return [LogFile(str(p), p.stem) for p in sorted(out.glob("*.log"))]


def _task_hosts(log: LogFile) -> dict[bytes, bytes]:
    task_host: dict[bytes, bytes] = {}
    for line in _lines(log):
        named = _SRUN_TASK_HOST.search(line)
        if named:
            low = int(named.group(2))
            for task in range(low, int(named.group(3) or low) + 1):
                task_host[str(task).encode()] = named.group(1)
    return task_host


def _write_parts(log: LogFile, kind: str, task_host: dict[bytes, bytes], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    buffers: dict[str, list[bytes]] = defaultdict(list)
    buffered = 0
    for line in _lines(log):
        labelled = _label(line)
        if not labelled or labelled[0] != kind:
            continue
        _, label, start = labelled
        if kind == "task":  # the prefixes' characters are ASCII
            name = task_host[label].decode() if label in task_host else f"task{int(label)}"
        else:
            name = label.decode()
        text = line[start:]
        buffers[name].append(text)
        buffered += len(text)
        if buffered >= FLUSH_BYTES:
            _flush(buffers, out)
            buffered = 0
    _flush(buffers, out)


def _lines(log: LogFile) -> Iterator[bytes]:
    """Lines as the scanner cuts them: at \\n only (a progress bar's \\r redraws stay in their line)."""
    for block in read_chunks(log.path):
        lines = block.split(b"\n")
        for line in lines[:-1]:
            yield line + b"\n"
        if lines[-1]:
            yield lines[-1] + b"\n"


def _flush(buffers: dict[str, list[bytes]], out: Path) -> None:
    for name, lines in buffers.items():
        with open(out / f"{name}.log", "ab") as fh:
            fh.write(b"".join(lines))
    buffers.clear()


def expand(files: list[LogFile], out: Path) -> list[LogFile]:
    """A job given as one file that is a combined launcher output becomes its per-node files; any other job is
    left as it is (a job that already has a file per node is not split again)."""
    if len(files) != 1:
        return files
    return split(files[0], out) or files
