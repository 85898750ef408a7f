"""The pre-triage adapter, the prior table, the pattern library and the `l4` CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli.l4_cmd import app
from agent.incident import Incident
from agent.l4.patterns import PatternLibrary
from agent.l4.simulate import JobSpec, simulate_job
from agent.l4.tool import PRIOR_RULES, l4_pretriage, priors_for
from agent.taxonomy import load_taxonomy

runner = CliRunner()


@pytest.fixture(scope="module")
def gpu_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, object]:
    root = tmp_path_factory.mktemp("job")
    truth = simulate_job(root / "failed", JobSpec(ranks=32, fault="gpu", seed=4))
    simulate_job(root / "ok", JobSpec(ranks=16, seed=44))
    return root / "failed", root / "ok", truth


def test_prior_labels_exist_and_map() -> None:
    labels = set(load_taxonomy().labels())
    assert {label for _, label, _ in PRIOR_RULES} <= labels
    assert priors_for(["NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."]) == \
        {"GPU.AVAILABILITY.FALLEN_OFF_BUS": 0.8}
    assert "INTERCONNECT_NETWORKING.IB" in priors_for(["NCCL WARN NET/IB : Got completion from peer 10.0.0.1<1> "
                                                        "with error 12"])
    oom = priors_for(["torch.OutOfMemoryError: CUDA out of memory."])
    assert oom == {"USER_APPLICATION.CONFIG.BATCH_SIZE_OOM": 0.7}
    assert priors_for(["iteration 10/ 100 | lm loss: 2.0"]) == {}


def test_pretriage_tool(gpu_job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    failed, ok, truth = gpu_job
    monkeypatch.setenv("AIDAI_DATA_DIR", str(tmp_path))
    assert l4_pretriage(Incident(text="job died")) is None
    result = l4_pretriage(Incident(text="job died", attachments={"logs": str(failed), "success": str(ok)}))
    assert result is not None and result.status == "ok"
    assert result.hosts[0] == truth.faulty_nodes[0]
    assert result.findings and all(f.id.startswith("l4:") and f.severity == "WARN" for f in result.findings)
    assert result.priors and set(result.priors) <= set(load_taxonomy().labels())
    assert result.data["nodes"][0]["node"] == truth.faulty_nodes[0]


def test_cli_localize_json_learn_and_match(gpu_job, tmp_path: Path) -> None:
    failed, ok, truth = gpu_job
    out = runner.invoke(app, ["localize", str(failed), "--success", str(ok), "--json", "--engine", "local",
                              "--data-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert {"nodes", "events", "stage", "iterations", "patterns", "skipped_files", "lines", "seconds"} <= set(data)
    assert data["nodes"][0]["node"] == truth.faulty_nodes[0] and data["patterns"] == []
    learned = runner.invoke(app, ["learn", str(failed), "--success", str(ok), "--name", "dead-gpu", "--label",
                                  "GPU.HARDWARE.FAULTY_GPU", "--engine", "local", "--data-dir", str(tmp_path)])
    assert learned.exit_code == 0, learned.output
    assert [p.name for p in PatternLibrary(tmp_path / "l4_patterns.json").patterns] == ["dead-gpu"]
    again = json.loads(runner.invoke(app, ["localize", str(failed), "--json", "--engine", "local",
                                           "--data-dir", str(tmp_path)]).stdout)
    assert again["patterns"][0]["name"] == "dead-gpu"
    table = runner.invoke(app, ["localize", str(failed), "--engine", "local", "--data-dir", str(tmp_path)])
    assert table.exit_code == 0 and "suspicious nodes" in table.stdout


def test_cli_bad_input(tmp_path: Path) -> None:
    missing = runner.invoke(app, ["localize", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no such file" in missing.output
    (tmp_path / "empty").mkdir()
    empty = runner.invoke(app, ["localize", str(tmp_path / "empty")])
    assert empty.exit_code == 2 and "no log files" in empty.output
    bad = runner.invoke(app, ["learn", str(tmp_path / "empty"), "--name", "x", "--label", "NOT.A.LABEL"])
    assert bad.exit_code == 2 and "not a taxonomy label" in bad.output
