"""Log lines -> 384-d sentence embeddings, each distinct line embedded once.

Lines are normalised before caching and embedding: numbers, hex ids and timestamps become 0, so the many lines
that differ only in step counts, pids, addresses or times share one embedding (the simulator's ~10k tasks reduce to
a few hundred distinct lines). The cost: numeric content (an iteration time) never reaches the log branch; the
metrics carry it. Encoder "minilm" is all-MiniLM-L6-v2 (agent.knowledge.embeddings, offline); "hash" is a
deterministic bag-of-tokens hashing into 384 dimensions, for tests that must not load MiniLM. A checkpoint
records its encoder and refuses the other."""

from __future__ import annotations

import hashlib
import re

import numpy as np

DIM = 384
ENCODERS = ("minilm", "hash")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{2,}\b")
_NUM = re.compile(r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_SPACE = re.compile(r"\s+")


def normalise(line: str) -> str:
    return _SPACE.sub(" ", _NUM.sub("0", _HEX.sub("0", line))).strip()[:400]


def _hash_embed(texts: list[str]) -> np.ndarray:
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for i, text in enumerate(texts):
        for token in re.findall(r"[A-Za-z_]+", text.lower()):
            h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=4).digest(), "little")
            out[i, h % DIM] += 1.0 if h & 1 << 31 else -1.0
        norm = np.linalg.norm(out[i])
        if norm > 0:
            out[i] /= norm
    return out


class LineEncoder:
    """Embeds normalised lines once per process; `table` rows are addressed by `index_of`."""

    def __init__(self, kind: str = "minilm"):
        if kind not in ENCODERS:
            raise ValueError(f"unknown line encoder {kind!r}; choose from {', '.join(ENCODERS)}")
        self.kind = kind
        self._index: dict[str, int] = {}
        self._rows: list[np.ndarray] = []
        self.embedded = 0  # distinct lines embedded so far

    def index_of(self, lines: list[str]) -> list[int]:
        normed = [normalise(line) for line in lines]
        new = list(dict.fromkeys(t for t in normed if t not in self._index))
        if new:
            if self.kind == "minilm":
                from agent.knowledge.embeddings import embed

                vectors = embed(new)
            else:
                vectors = _hash_embed(new)
            for text, vec in zip(new, vectors, strict=True):
                self._index[text] = len(self._rows)
                self._rows.append(vec)
            self.embedded += len(new)
        return [self._index[t] for t in normed]

    def table(self) -> np.ndarray:
        return np.stack(self._rows) if self._rows else np.zeros((0, DIM), dtype=np.float32)
