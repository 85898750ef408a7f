"""A hashed bag-of-words embedding for tests that exercise the graph, not ranking quality: no model to load."""

from __future__ import annotations

import re
import zlib

import numpy as np


def word_embed(texts: list[str]) -> np.ndarray:
    out = np.zeros((len(texts), 512))
    for i, text in enumerate(texts):
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            out[i, zlib.crc32(word.encode()) % 512] += 1.0
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)
