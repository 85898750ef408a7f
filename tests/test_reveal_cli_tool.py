"""`aidai reveal collect|detect` through Typer's runner, and the Reveal pre-triage tool."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from agent.cli.reveal_cmd import app
from agent.incident import Incident
from agent.reveal.detect import SignalOut, WindowOut
from agent.reveal.tool import labels_for, reveal_pretriage
from agent.taxonomy import load_taxonomy
from tests.test_reveal_detect import synthetic

runner = CliRunner()


def spiky(tmp_path: Path) -> Path:
    df = synthetic(hosts=3)
    rows = (df.host == "h2") & (df.timestamp >= 1_700_000_100) & (df.timestamp < 1_700_000_120)
    df.loc[rows, "net_eth0_rx_bytes_per_s"] = 1e3
    path = tmp_path / "telemetry.parquet"
    df.to_parquet(path, index=False)
    return path


def test_detect_json_shape(tmp_path: Path) -> None:
    result = runner.invoke(app, ["detect", str(spiky(tmp_path)), "--json", "--self"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"windows", "hosts", "skipped_columns"} <= set(data)
    assert data["skipped_columns"] == ["comment"]
    window = max(data["windows"], key=lambda w: w["score"])  # the network drop
    assert {"start", "end", "host", "subsystems", "signals", "score"} <= set(window)
    assert set(window["signals"][0]) == {"metric", "feature", "detector"}
    assert data["hosts"][0]["host"] == "h2"
    assert any("network" in w["subsystems"] for w in data["windows"] if w["host"] == "h2")


def test_detect_bad_input_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"time": [1, 2], "x": [1, 2]}).to_csv(bad, index=False)
    result = runner.invoke(app, ["detect", str(bad)])
    assert result.exit_code == 2 and "timestamp" in result.output
    assert runner.invoke(app, ["detect", str(tmp_path / "missing.csv")]).exit_code == 2
    assert runner.invoke(app, ["detect", str(bad), "--min-votes", "4"]).exit_code == 2


def test_collect_writes_metrics_and_lists_missing_sources(tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    result = runner.invoke(app, ["collect", "--interval", "0.2", "--duration", "1", "--out", str(out), "--no-perf"])
    assert result.exit_code == 0, result.output
    df = pd.read_parquet(out)
    assert {"timestamp", "host", "cpu_busy_pct", "mem_used_pct"} <= set(df.columns) and len(df) >= 4
    assert "skipped perf" in result.output and "collector overhead" in result.output
    assert runner.invoke(app, ["collect", "--interval", "2", "--duration", "1", "--out", str(out)]).exit_code == 2


def test_pretriage_tool(tmp_path: Path) -> None:
    assert reveal_pretriage(Incident(text="slow training")) is None
    result = reveal_pretriage(Incident(text="slow training", attachments={"telemetry": str(spiky(tmp_path))}))
    assert result is not None and result.status == "ok"
    assert result.hosts[0] == "h2"
    assert any(f.id == "reveal_network" and f.entity == "h2" for f in result.findings)
    assert result.priors and set(result.priors) <= set(load_taxonomy().labels())
    assert max(result.priors.values()) <= 0.6
    assert "INTERCONNECT_NETWORKING" in result.priors
    broken = reveal_pretriage(Incident(text="x", attachments={"telemetry": str(tmp_path / "nope.csv")}))
    assert broken is not None and broken.status == "error"


def test_priors_name_a_straggler_only_when_compute_is_off_its_peers() -> None:
    def window(subsystem: str, metric: str, imbalance: bool) -> WindowOut:
        signal = SignalOut(metric=metric, feature="mean", detector="zscore", z=9, subsystem=subsystem)
        return WindowOut(start=0, end=3, host="h", subsystems=[subsystem], votes=2, score=0.5, imbalance=imbalance,
                         signals=[signal])

    assert labels_for(window("cpu", "cpu_busy_pct", True)) == ("GPU.PERFORMANCE.SLOW_GPU_STRAGGLER",)
    assert labels_for(window("cpu", "cpu_busy_pct", False))[0] == "FRAMEWORK_LIBRARY.PYTORCH.DATALOADER_DEADLOCK"
    assert labels_for(window("network", "tcp_retrans_c", True)) == ("INTERCONNECT_NETWORKING",)
    assert labels_for(window("gpu", "gpu0_temp_c", True))[0] == "GPU.THERMAL.OVERHEATING_THROTTLE"
