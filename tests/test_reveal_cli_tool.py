"""`aidai reveal collect|detect` through Typer's runner, and the Reveal pre-triage tool."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from agent.cli.reveal_cmd import app
from agent.incident import Incident
from agent.reveal import normal
from agent.reveal.tool import labels_for, reveal_pretriage
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
    assert result.hosts == ["h2"]  # judged against the normal learned from the file's start: its peers are calm
    assert [(f.id, f.entity) for f in result.findings] == [("reveal_network", "h2")]
    assert "98–122 s" in result.findings[0].message  # the drop: 100-120 s, in 3-s windows
    assert result.priors == {"INTERCONNECT_NETWORKING": 0.6}
    assert result.data["mode"] == "start" and "learned from its first 20 s" in result.summary
    broken = reveal_pretriage(Incident(text="x", attachments={"telemetry": str(tmp_path / "nope.csv")}))
    assert broken is not None and broken.status == "error"


def test_pretriage_tool_learns_from_a_baseline_when_the_file_is_too_short(tmp_path: Path) -> None:
    df = synthetic(hosts=3, seconds=15, seed=1)
    df.loc[df.host == "h1", "cpu_busy_pct"] = 99.0
    short, healthy = tmp_path / "short.csv", tmp_path / "healthy.csv"
    df.to_csv(short, index=False)
    synthetic(hosts=3, seconds=60, seed=2).to_csv(healthy, index=False)
    alone = reveal_pretriage(Incident(text="x", attachments={"telemetry": str(short)}))
    assert alone is not None and alone.status == "error" and "nothing left to judge" in alone.reason
    result = reveal_pretriage(Incident(text="x", attachments={"telemetry": str(short),
                                                              "telemetry_baseline": str(healthy)}))
    assert result is not None and result.status == "ok" and result.data["mode"] == "baseline"
    assert result.hosts == ["h1"] and [f.id for f in result.findings] == ["reveal_cpu"]
    assert "learned from the baseline" in result.summary


def test_priors_name_a_straggler_only_when_compute_is_off_its_peers() -> None:
    def window(subsystem: str, metric: str) -> normal.Window:
        signal = normal.Signal(metric=metric, subsystem=subsystem, z=9, value=1, normal=0)
        return normal.Window(host="h", start=0, end=3, score=9, subsystems=[subsystem], signals=[signal])

    assert labels_for(window("cpu", "cpu_busy_pct"), off_peers=True) == ("GPU.PERFORMANCE.SLOW_GPU_STRAGGLER",)
    assert labels_for(window("cpu", "cpu_busy_pct"), off_peers=False)[0] == \
        "FRAMEWORK_LIBRARY.PYTORCH.DATALOADER_DEADLOCK"
    assert labels_for(window("network", "tcp_retrans_c"), off_peers=True) == ("INTERCONNECT_NETWORKING",)
    assert labels_for(window("gpu", "gpu0_temp_c"), off_peers=True)[0] == "GPU.THERMAL.OVERHEATING_THROTTLE"
    assert labels_for(window("memory", "cgroup_memory_failcnt"), off_peers=False)[0] == \
        "USER_APPLICATION.CODE.HOST_MEMORY_EXHAUSTED"
