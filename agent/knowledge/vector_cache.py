"""Vectors of texts that rarely change (the taxonomy's node descriptions), kept on disk beside the ONNX model, so
that a process encodes only the texts no earlier process did: a cold CLI diagnosis otherwise spends a few tenths
of a second (and a second onnxruntime session) re-encoding the same node descriptions on every run.

One file per `scope` (e.g. the taxonomy's digest) and model export: `<model cache>/vectors-<scope>-<model key>.npz`,
each vector under the digest of its text, so a changed text is never served an old vector. Texts not in the file
are encoded in one `embed` call (the batch a run without the cache would have encoded) and the file is rewritten
atomically. A file that cannot be read is treated as empty; one that cannot be written (read-only cache) leaves
the vectors to be encoded again next time: neither changes a result.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from agent.knowledge import embeddings

_lock = threading.Lock()


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def cache_file(scope: str) -> Path:
    """Where `scope`'s vectors for the installed model live (beside its ONNX export when there is one)."""
    path = embeddings.model_dir()
    onnx_file = embeddings.onnx_path(path)
    folder = onnx_file.parent if onnx_file is not None else embeddings.cache_dirs()[0]
    return folder / f"vectors-{scope}-{embeddings.cache_key(path)}.npz"


def _read(file: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(file, allow_pickle=False) as stored:
            keys, vectors = stored["keys"], stored["vectors"]
    except (OSError, ValueError, KeyError):  # missing, truncated or foreign: as if empty
        return {}
    if vectors.ndim != 2 or vectors.shape != (len(keys), embeddings.DIM):
        return {}
    return {str(k): v for k, v in zip(keys, vectors.astype(np.float32), strict=True)}


def _write(file: Path, known: dict[str, np.ndarray]) -> None:
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", suffix=".tmp", dir=file.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as out:
            np.savez(out, keys=np.array(list(known)), vectors=np.stack(list(known.values())))
        os.replace(tmp, file)
    except OSError:
        pass
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def cached_embed(texts: Sequence[str], scope: str) -> np.ndarray:
    """`embeddings.embed(texts)`, with the vectors of `scope` that earlier processes stored taken from disk."""
    if len(texts) == 0:
        return np.zeros((0, embeddings.DIM), dtype=np.float32)
    file = cache_file(scope)
    digests = [text_digest(t) for t in texts]
    with _lock:
        known = _read(file)
        missing = list(dict.fromkeys(t for t, d in zip(texts, digests, strict=True) if d not in known))
        if missing:
            known.update(zip((text_digest(t) for t in missing), embeddings.embed(missing), strict=True))
            _write(file, known)
    return np.stack([known[d] for d in digests])
