"""The ONNX encoder (onnxruntime + tokenizers, no torch at run time) gives sentence-transformers' vectors.

Real incident lines (driver logs, NCCL, PyTorch tracebacks, a long paste past the 256 word-piece limit) are
embedded both ways; every pair must agree within 1e-3 cosine. sentence-transformers (and torch) are used here
only as the reference."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agent.knowledge import embeddings

ROOT = Path(__file__).resolve().parents[1]

LINES = [
    "NVRM: Xid (PCI:0000:5d:00): 48, pid=2211, name=python, An uncorrectable double bit error (DBE) has been "
    "detected on GPU in the framebuffer at partition 6, subpartition 0.",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.10 GiB of which 1.20 GiB is free.",
    "Failed to initialize NVML: Driver/library version mismatch",
    "node-1:4121:4187 [3] NCCL INFO NET/IB : No device found.",
    "NCCL WARN Bootstrap : no socket interface found",
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
    "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.5",
    "[E ProcessGroupNCCL.cpp:475] [Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=183, "
    "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800394 milliseconds before timing out.",
    "RuntimeError: DataLoader worker (pid 4121) is killed by signal: Bus error. It is possible that dataloader's "
    "workers are out of shared memory.",
    "mlx5_core 0000:17:00.0: mlx5_cmd_out_err:838:(pid 1): QUERY_VPORT_COUNTER(0x770) op_mod(0x0) failed, "
    "status bad parameter(0x3), syndrome (0x1b3d9a), err(-22)",
    "kernel: nvidia-nvswitch2: SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 44 egress non-posted PRIV error",
    "Fabric Manager: fabric manager service is not running; CUDA_ERROR_SYSTEM_NOT_READY (802)",
    "docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].",
    "  ",
    "GPU 3: ECC",
    # a pasted log longer than the model reads (truncated at 256 word pieces, as sentence-transformers does)
    " ".join(f"[{i:05d}] NVRM: Xid (PCI:0000:5d:00): 63, Row Remapper: New row marked for remapping"
             for i in range(40)),
]


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    embeddings._force_offline()
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(embeddings.model_dir()), device="cpu", local_files_only=True)
    return np.asarray(model.encode(LINES, batch_size=8, convert_to_numpy=True, normalize_embeddings=True,
                                   show_progress_bar=False), dtype=np.float32)


def test_onnx_vectors_match_sentence_transformers(reference: np.ndarray) -> None:
    ours = embeddings.embed(LINES)
    assert ours.shape == reference.shape == (len(LINES), embeddings.DIM)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(ours * reference, axis=1)
    assert float(cosines.min()) >= 1 - 1e-3, dict(zip(LINES, cosines.tolist(), strict=True))
    # one at a time (no batch padding) gives the same rows as the batch
    for i in (0, 6, len(LINES) - 1):
        assert float(embeddings.embed([LINES[i]])[0] @ ours[i]) >= 1 - 1e-5


def test_the_encoder_runs_on_onnxruntime_not_torch() -> None:
    model = embeddings.get_model()
    assert isinstance(model, embeddings.Encoder)
    assert model.onnx_file.suffix == ".onnx" and model.onnx_file.is_file()
    assert embeddings.onnx_path() == model.onnx_file


def test_export_goes_to_the_model_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(embeddings.ENV_MODEL_CACHE, str(tmp_path / "cache"))
    assert embeddings.cache_dirs() == [tmp_path / "cache"]
    assert embeddings.onnx_path() is None


def test_a_query_on_a_built_store_imports_no_torch_nor_llama_index(data_dir: Path) -> None:
    """What a cold diagnosis does with the knowledge: a new process queries the seed DB and the KB through Chroma's
    client and the ONNX encoder; torch, transformers, sentence-transformers and LlamaIndex stay unimported."""
    embeddings.export_onnx()  # normally done at install; a no-op when already exported
    code = ("import json, sys\n"
            "from agent.knowledge.incident_db import IncidentDB\n"
            "from agent.knowledge.kb_index import KnowledgeBase\n"
            f"db = IncidentDB(data_dir={str(data_dir)!r})\n"
            "db.ensure_seed()\n"
            "hits = db.query('RuntimeError: CUDA error: uncorrectable ECC error encountered', k=3)\n"
            f"kb = KnowledgeBase(data_dir={str(data_dir)!r}).query('printer noise', k=1)\n"
            "heavy = [m for m in ('torch', 'transformers', 'sentence_transformers', 'llama_index') "
            "if m in sys.modules]\n"
            "print(json.dumps([hits[0].label, len(kb), heavy]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    label, passages, heavy = json.loads(out.stdout.strip().splitlines()[-1])
    assert (label, passages, heavy) == ("GPU.MEMORY.UNCORRECTABLE_ECC", 1, [])
