"""KAIOPS as an agent tool and a CLI: priors over MAIN categories, skipping without metrics, a clear error on a
bad CSV, and `aidai kaiops` sub-commands (eval --json keys, exit 2 on bad input). Tiny hash-encoder models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli.kaiops_cmd import app
from agent.incident import Incident
from agent.kaiops import CLASSES, checkpoint
from agent.kaiops.dataset import as_tasks, write_tasks
from agent.kaiops.encode import LineEncoder, _hash_embed
from agent.kaiops.generate import generate
from agent.taxonomy import load_taxonomy

FIXTURES = Path(__file__).parent / "fixtures" / "kaiops"
runner = CliRunner()


def _flat(text: str) -> str:  # Rich wraps long messages
    return " ".join(text.split())


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from agent.kaiops.train import train

    d = tmp_path_factory.mktemp("kaiops")
    rows = generate(11, 160)
    write_tasks(rows, d / "train.jsonl")
    write_tasks(generate(12, 60), d / "test.jsonl")
    trained, _ = train(as_tasks(rows), LineEncoder("hash"), epochs=1, seed=0)
    checkpoint.save(trained, d / "tiny.pt")
    return {"train": d / "train.jsonl", "test": d / "test.jsonl", "ckpt": d / "tiny.pt", "dir": d}


@pytest.fixture()
def tiny_tool(files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.kaiops import classify, kg
    from agent.paths import KNOWLEDGE_DIR

    trained = checkpoint.load(files["ckpt"])
    monkeypatch.setattr(classify, "_model", lambda _path: (trained, LineEncoder("hash")))
    graph = kg.KnowledgeGraph.build(KNOWLEDGE_DIR, lambda texts: _hash_embed(list(texts)))
    monkeypatch.setattr(kg, "default_graph", lambda: graph)


def test_tool_priors_over_main_categories(tiny_tool: None) -> None:
    from agent.kaiops.tool import kaiops_pretriage

    incident = Incident(text="job died", hosts=["ssh://root@gpu-node-265:22"],
                        attachments={"metrics": str(FIXTURES / "job_metrics.csv"), "logs": str(FIXTURES / "job.log"),
                                     "hosts": str(FIXTURES / "hosts.txt")})
    result = kaiops_pretriage(incident)
    assert result is not None and result.status == "ok", result
    mains = {n.name for n in load_taxonomy().children()}
    assert set(result.priors) == mains
    assert all(0.0 <= v <= 1.0 for v in result.priors.values())
    probs = result.data["probabilities"]
    assert set(probs) == set(CLASSES) and sum(probs.values()) == pytest.approx(1.0, abs=1e-3)
    assert result.findings[0].id == "kaiops_class"
    assert result.data["metrics_used"] and result.data["lines_used"] > 3


def test_tool_skips_without_metrics_and_reports_bad_csv(tiny_tool: None, tmp_path: Path) -> None:
    from agent.kaiops.tool import kaiops_pretriage

    assert kaiops_pretriage(Incident(text="x", attachments={"logs": str(FIXTURES / "job.log")})) is None
    bad = tmp_path / "bad.csv"
    bad.write_text("when,temperature\n1,2\n")
    result = kaiops_pretriage(Incident(text="x", attachments={"metrics": str(bad)}))
    assert result is not None and result.status == "error" and "no known metric column" in result.reason


def test_cli_eval_json_has_the_keys(files: dict[str, Path]) -> None:
    out = runner.invoke(app, ["eval", "--data", str(files["test"]), "--train", str(files["train"]), "--epochs", "1",
                              "--encoder", "hash", "--json"])
    assert out.exit_code == 0, out.output
    methods = json.loads(out.stdout)["methods"]
    assert {"kaiops", "rf", "dt"} <= set(methods)
    for scores in methods.values():
        assert {"macro_p", "macro_r", "macro_f1", "fnr", "fpr", "per_class"} <= set(scores)
        assert set(scores["per_class"]) == set(CLASSES)


def test_cli_bad_input_exits_2(files: dict[str, Path], tmp_path: Path) -> None:
    out = runner.invoke(app, ["eval", "--data", str(tmp_path / "nope.jsonl")])
    assert out.exit_code == 2 and "no such file" in _flat(out.output)
    out = runner.invoke(app, ["eval", "--seed", "3"])
    assert out.exit_code == 2 and "--tasks" in _flat(out.output)
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    out = runner.invoke(app, ["classify", "--metrics", str(FIXTURES / "job_metrics.csv"), "--checkpoint",
                              str(tmp_path / "bad.pt")])
    assert out.exit_code == 2 and "corrupt" in _flat(out.output)
    out = runner.invoke(app, ["generate", "--out", str(files["dir"] / "g.jsonl"), "--seed", "4", "--tasks", "30"])
    assert out.exit_code == 0 and len((files["dir"] / "g.jsonl").read_text().splitlines()) == 30
