"""KAIOPS: the task format and generator, the dynamic class-weighted loss, training, checkpoints, the knowledge
graph and the pre-triage tool. Models here are tiny and use the hashing line encoder (no MiniLM load)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from agent.kaiops import CLASSES, METRICS, KaiopsError, checkpoint
from agent.kaiops.dataset import as_tasks, read_metrics_csv, read_tasks, write_tasks
from agent.kaiops.encode import LineEncoder, normalise
from agent.kaiops.generate import generate, make_task
from agent.kaiops.loss import DynamicClassWeightedLoss, class_weights

FIXTURES = Path(__file__).parent / "fixtures" / "kaiops"


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return generate(5, 600)


@pytest.fixture(scope="module")
def tiny(rows: list[dict]) -> checkpoint.Trained:
    from agent.kaiops.train import train

    trained, history = train(as_tasks(rows[:160]), LineEncoder("hash"), epochs=2, seed=0, batch=32)
    assert len(history["history"]) == 2
    return trained


def test_generator_mix_shapes_and_determinism(rows: list[dict]) -> None:
    mix = Counter(r["label"] for r in rows)
    assert set(mix) == set(CLASSES)
    assert 0.74 < mix["Normal"] / len(rows) < 0.87  # KAIOPS: 80.7 %
    assert make_task(5, 3) == rows[3]  # a task depends only on (seed, index)
    assert make_task(6, 3)["metrics"] != rows[3]["metrics"]
    for r in rows:
        assert set(r["metrics"]) <= set(METRICS) and all(len(v) == 30 for v in r["metrics"].values())
    # precursor shapes: a host-memory ramp before the OOM kill, a GPU-memory leak before the CUDA OOM
    oom = [r for r in rows if r["kind"] == "host_oom" and r["label"] == "Software"]
    assert oom and all(r["metrics"]["mem_util"][-1] > r["metrics"]["mem_util"][0] + 20 for r in oom)
    hang = [r for r in rows if r["kind"] == "hang" and r["label"] == "Network"]
    assert hang and all(max(r["metrics"]["gpu_util"][-2:]) < 3 for r in hang)
    assert all(any("Watchdog caught collective operation timeout" in line for line in r["logs"]) for r in hang)


def test_task_file_roundtrip_and_errors(rows: list[dict], tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_tasks(rows[:5], path)
    tasks = read_tasks(path)
    assert [t.id for t in tasks] == [r["id"] for r in rows[:5]]
    lines = path.read_text().splitlines()
    extra = json.loads(lines[0])
    extra["metrics"]["bogus_metric"] = [1.0] * 30  # unknown metrics are ignored
    path.write_text(json.dumps(extra) + "\n" + json.dumps({"id": "x", "label": "Broken"}) + "\n")
    with pytest.raises(KaiopsError, match=r"t.jsonl:2: not a task \(label"):
        read_tasks(path)
    path.write_text(json.dumps(extra) + "\n")
    assert "bogus_metric" not in read_tasks(path)[0].metrics
    with pytest.raises(KaiopsError, match="no such file"):
        read_tasks(tmp_path / "missing.jsonl")
    bad = tmp_path / "m.csv"
    bad.write_text("minute,gpu_util\n0,12\n1,abc\n")
    with pytest.raises(KaiopsError, match=r"m.csv:3: gpu_util = 'abc' is not a number"):
        read_metrics_csv(bad)
    bad.write_text("minute,temperature\n0,12\n")
    with pytest.raises(KaiopsError, match="no known metric column"):
        read_metrics_csv(bad)


def test_normalise_shares_lines_that_differ_in_numbers() -> None:
    a = "[2025-03-14 10:27:00,000] step=39480, lr=[3.0000e-05] host gpu-node-012 0x7f3a"
    b = "[2025-03-14 11:02:13,512] step=41, lr=[2.5e-04] host gpu-node-400 0x11"
    assert normalise(a) == normalise(b)
    enc = LineEncoder("hash")
    assert enc.index_of([a, b, "other line"]) == [0, 0, 1] and enc.embedded == 2


def test_dynamic_weights_move_to_poorly_classified_classes() -> None:
    w = class_weights(np.array([0.99, 0.9, 0.2, 0.05, 0.6]))
    assert int(np.argmax(w)) == 3 and w[0] < w[1] < w[4] < w[2] < w[3]
    loss = DynamicClassWeightedLoss(5, smoothing=0.1)
    logits = torch.randn(8, 5)
    target = torch.tensor([0, 1, 2, 3, 4, 0, 3, 3])
    loss.update(np.ones(5))
    before = float(loss(logits, target))
    loss.update(np.array([1.0, 1.0, 1.0, 0.0, 1.0]))  # class 3 now fails: its samples weigh more
    assert loss.weights[3] > loss.weights[0]
    assert float(loss(logits, target)) != pytest.approx(before)
    # the weighted, smoothed loss is eqs. 5-6: mean over the batch of CE(soft label) x w[target]
    expected = (torch.nn.functional.cross_entropy(logits, target, reduction="none", label_smoothing=0.1)
                * loss.weights[target]).mean()
    assert float(loss(logits, target)) == pytest.approx(float(expected), rel=1e-5)


def test_checkpoint_roundtrip_and_clear_errors(tiny: checkpoint.Trained, rows: list[dict], tmp_path: Path) -> None:
    from agent.kaiops.train import predict_proba

    path = tmp_path / "k.pt"
    checkpoint.save(tiny, path)
    back = checkpoint.load(path)
    enc = LineEncoder("hash")
    tasks = as_tasks(rows[:20])
    a1 = tiny.featurizer.arrays(tasks, enc)
    table = torch.from_numpy(enc.table())
    p1, p2 = predict_proba(tiny.model, a1, table), predict_proba(back.model, a1, table)
    assert p1.shape == (20, 5) and np.allclose(p1, p2) and np.allclose(p1.sum(1), 1, atol=1e-5)
    with pytest.raises(KaiopsError, match="not found"):
        checkpoint.load(tmp_path / "none.pt")
    (tmp_path / "bad.pt").write_bytes(b"\x00garbage" * 50)
    with pytest.raises(KaiopsError, match="corrupt or not a checkpoint"):
        checkpoint.load(tmp_path / "bad.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(KaiopsError, match="not a KAIOPS checkpoint"):
        checkpoint.load(tmp_path / "other.pt")


def test_change_channels_measure_against_the_jobs_own_start() -> None:
    from agent.kaiops.dataset import Task
    from agent.kaiops.features import BASELINE_STEPS, Featurizer

    flat = [50.0] * 30
    ramp = [50.0] * 20 + [50.0 + 4 * i for i in range(1, 11)]
    tasks = [Task(id=i, hosts=["h"], metrics={"mem_util": series}, logs=[], label="Normal")
             for i, series in (("flat", flat), ("ramp", ramp))]
    feat = Featurizer.fit(tasks)
    a = feat.arrays(tasks, LineEncoder("hash"))
    k, j = len(METRICS), METRICS.index("mem_util")
    change = a.metrics[:, :, k + j] * feat.std[j]
    assert np.allclose(change[0], 0) and np.allclose(change[1, :20], 0)
    assert np.allclose(change[1, 20:], [4 * i for i in range(1, 11)], atol=1e-4) and BASELINE_STEPS <= 20
    assert np.all(a.metrics[:, :, 2 * k + j] == 1) and np.all(a.metrics[:, :, 2 * k:2 * k + j] == 0)


def test_host_dropout_hides_the_hosts_in_training_only(tiny: checkpoint.Trained, rows: list[dict]) -> None:
    from dataclasses import replace

    from agent.kaiops.model import Kaiops
    from agent.kaiops.train import tensors

    enc = LineEncoder("hash")
    a = tiny.featurizer.arrays(as_tasks(rows[:8]), enc)
    inputs = tensors(a, torch.from_numpy(enc.table()))
    other = (inputs[0], inputs[1], inputs[2], torch.where(inputs[3] > 0, 1, 0), inputs[4])  # every host unknown
    model = Kaiops(replace(tiny.model.cfg, host_dropout=1.0, dropout=0.0))
    model.load_state_dict(tiny.model.state_dict())
    model.train()

    def seeded(x: tuple) -> torch.Tensor:  # the same dropout masks for both calls
        torch.manual_seed(0)
        return model(*x)

    assert torch.allclose(seeded(inputs), seeded(other), atol=1e-6)  # the branch is dropped for every task
    model.eval()
    assert not torch.allclose(model(*inputs), model(*other), atol=1e-6)


def test_shipped_checkpoint_loads_and_says_how_it_was_made() -> None:
    trained = checkpoint.load()
    assert trained.encoder == "minilm"
    assert trained.info["data_seed"] == 0 and trained.info["data_tasks"] >= 10_000
    assert checkpoint.SHIPPED.stat().st_size < 4 * 2**20


def test_knowledge_graph_root_causes_by_category() -> None:
    from agent.kaiops.encode import _hash_embed
    from agent.kaiops.kg import KnowledgeGraph
    from agent.paths import KNOWLEDGE_DIR

    kg = KnowledgeGraph.build(KNOWLEDGE_DIR, lambda texts: _hash_embed(list(texts)))
    kinds = Counter(d["kind"] for _, d in kg.graph.nodes(data=True))
    assert kinds["FaultCategory"] == 4 and kinds["Symptom"] > 50 and kinds["Term"] > 5 and kinds["Solution"] > 50
    hw = kg.root_cause("Hardware", ["NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."])
    assert hw["root_cause"] == "GPU.AVAILABILITY.FALLEN_OFF_BUS" and hw["solutions"]
    net = kg.root_cause("Network", ["NCCL WARN NET/IB : mlx5_2:1 Got non-fatal async event: port error(10)",
                                    "mlx5_core 0000:5e:00.0 ibp94s0: Link down"])
    assert net["root_cause"].startswith("INTERCONNECT_NETWORKING.IB")
    assert all(c["score"] <= hw["score"] for c in hw["candidates"])
    with pytest.raises(ValueError, match="no knowledge-graph category"):
        kg.root_cause("Normal", [])


def test_temporal_context_off_ignores_when_lines_appeared(tiny: checkpoint.Trained, rows: list[dict]) -> None:
    """The ablation of the temporal-context encoding: with it off the model sees the same lines at any minute."""
    from dataclasses import replace

    from agent.kaiops.model import Kaiops
    from agent.kaiops.train import tensors

    enc = LineEncoder("hash")
    a = tiny.featurizer.arrays(as_tasks(rows[:8]), enc)
    inputs = tensors(a, torch.from_numpy(enc.table()))
    moved = (inputs[0], inputs[1], torch.zeros_like(inputs[2]), inputs[3], inputs[4])  # every line at minute 0
    assert tiny.model.cfg.temporal_context
    assert not torch.allclose(tiny.model(*inputs), tiny.model(*moved), atol=1e-6)
    flat = Kaiops(replace(tiny.model.cfg, temporal_context=False))
    flat.load_state_dict(tiny.model.state_dict())
    flat.eval()
    assert torch.allclose(flat(*inputs), flat(*moved), atol=1e-6)


def test_more_lines_than_minutes_stay_inside_the_window() -> None:
    """A real job's tail has up to 48 lines for 30 minutes: the first lines share minute 0 (never minute -1)."""
    from agent.kaiops.dataset import Task
    from agent.kaiops.features import MAX_LINES, Featurizer

    task = Task(id="t", hosts=["a"], logs=[f"step {i} | loss 0.5" for i in range(MAX_LINES)], label="Normal")
    a = Featurizer.fit([task]).arrays([task], LineEncoder("hash"))
    steps = a.steps[0][a.lines[0] >= 0]
    assert len(steps) == MAX_LINES and steps.min() == 0 and steps.max() == 29
    assert np.all(np.diff(steps) >= 0)


def test_a_lab_job_as_a_kaiops_task() -> None:
    """A real fault-lab telemetry job (a memory limit on one of three nodes): its log tail, its node names, and its
    per-node telemetry binned into 30 steps, the largest node's value per step."""
    from eval.bench_kaiops_lab import CLASS_OF, job_task

    lab = Path(__file__).parent / "fixtures" / "lab_telemetry"
    task = job_task(lab / "361-009")
    assert task.label == "Performance" == CLASS_OF["mem_pressure"]
    assert task.hosts == ["gpu-node-05", "gpu-node-06", "gpu-node-07"]
    assert 0 < len(task.logs) <= 48 and not any(line.startswith("gpu-node-0") for line in task.logs)
    assert set(task.metrics) == {"cpu_util", "mem_util", "net_rx_mbps", "net_tx_mbps", "disk_read_mbps",
                                 "disk_write_mbps"}
    reads = [v for v in task.metrics["disk_read_mbps"] if v is not None]
    assert len(task.metrics["cpu_util"]) == 30 and max(reads) > 100 * (sorted(reads)[len(reads) // 2] + 1)
    assert job_task(lab / "361-013").label == "Normal"
