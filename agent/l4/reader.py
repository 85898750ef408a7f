"""Find a job's log files, name the node each belongs to, and read them (plain or gzip) or say why not.

Layouts: `<node>.log` (one file per node, torchrun `[defaultN]:` prefixes allowed), `<node>/rank<k>.log` (one file
per rank under a node directory), any of them gzipped. Unreadable files are reported, never fatal: a crashed job
leaves truncated archives and core dumps next to its logs.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

# Suffixes that are never logs; skipped silently because they are expected next to logs (checkpoints, dumps).
LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".gz")
SAMPLE_BYTES = 64 * 1024
MAX_CONTROL_FRACTION = 0.05  # text logs have tabs/newlines/ESC colour codes only; binary data has many more
_GZIP_MAGIC = b"\x1f\x8b"
_CONTROL = bytes(c for c in range(32) if c not in (9, 10, 13, 27))
_RANK_FILE = re.compile(r"^(?:rank|worker|proc)[-_]?\d+$", re.I)


class LogError(Exception):
    """A file that cannot be used as a log; the message is the one-line reason for `skipped_files`."""


@dataclass(frozen=True)
class LogFile:
    path: str
    node: str


def _stem(name: str) -> str:
    for suffix in (".gz", ".log", ".txt", ".out", ".err"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def node_of(path: Path, root: Path) -> str:
    """`<node>.log` -> node; `<node>/rank3.log` -> node; a deeper file takes its top directory below root."""
    rel = path.relative_to(root)
    if len(rel.parts) == 1:
        return _stem(rel.parts[0])
    if len(rel.parts) == 2 and not _RANK_FILE.match(_stem(rel.parts[1])):
        return _stem(rel.parts[1])  # `<job>/<node>.log`: a wrapper directory around per-node files
    return rel.parts[0]


def discover(root: str | Path) -> list[LogFile]:
    """Every log-like file below `root`, sorted by path so that runs are reproducible."""
    base = Path(root)
    if not base.exists():
        raise LogError(f"{root}: no such directory")
    if base.is_file():
        return [LogFile(str(base), _stem(base.name))]
    files = [p for p in sorted(base.rglob("*")) if p.is_file() and not p.name.startswith(".")
             and (p.name.endswith(LOG_SUFFIXES) or ".log." in p.name)]
    return [LogFile(str(p), node_of(p, base)) for p in files]


CHUNK_BYTES = 8 * 2**20


def read_chunks(path: str, size: int = CHUNK_BYTES) -> Generator[bytes, None, None]:
    """The file's bytes (gunzipped) in blocks of whole lines of about `size` bytes, streamed: the first 64 KiB are
    checked as read_bytes checks them; a gzip that breaks later raises LogError when the break is reached."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed in the finally below, after the generator is exhausted
    except OSError as exc:
        raise LogError(f"unreadable: {exc.strerror or exc}") from None
    try:
        stream = gzip.GzipFile(fileobj=fh) if fh.read(2) == _GZIP_MAGIC else fh
        fh.seek(0)
        carry = b""
        checked = False
        while True:
            try:
                block = stream.read(size)
            except (EOFError, OSError, zlib.error) as exc:
                raise LogError(f"corrupt or truncated gzip: {exc}") from None
            if not checked:
                _check(block)
                checked = True
            if not block:
                if carry:
                    yield carry
                return
            block = carry + block
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                carry = block
                continue
            carry = block[cut:]
            yield block[:cut]
    finally:
        fh.close()


def _check(sample: bytes) -> None:
    sample = sample[:SAMPLE_BYTES]
    if not sample.strip():
        raise LogError("empty")
    _check_text(sample)


def _check_text(sample: bytes) -> None:
    """Raise LogError when the first SAMPLE_BYTES are not text (NUL bytes, control bytes, invalid UTF-8)."""
    sample = sample[:SAMPLE_BYTES]
    if b"\x00" in sample:
        raise LogError("binary (NUL bytes)")
    control = len(sample) - len(sample.translate(None, _CONTROL))
    if control > MAX_CONTROL_FRACTION * len(sample):
        raise LogError(f"binary ({control} control bytes in the first {len(sample)})")
    text = sample.decode("utf-8", "replace")
    if text.count("\ufffd") > MAX_CONTROL_FRACTION * len(text):
        raise LogError("not text (invalid UTF-8 in most of the first 64 KiB)")


def read_bytes(path: str) -> bytes:
    """The file's bytes (gunzipped); raises LogError for empty, truncated/corrupt gzip and binary files."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise LogError(f"unreadable: {exc.strerror or exc}") from None
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as exc:
            raise LogError(f"corrupt or truncated gzip: {exc}") from None
    if not data.strip():
        raise LogError("empty")
    _check_text(data)
    return data
