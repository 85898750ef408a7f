"""Reveal against a learned normal (agent/reveal/normal.py): learned from the file's start, from a healthy baseline
run, or both; the host, the subsystem and the metrics that moved are named; clean runs stay quiet."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from agent.cli.reveal_cmd import app
from agent.reveal import frame, normal

T0 = 1_700_000_000.0


def job(hosts: int = 3, seconds: int = 120, interval: float = 0.5, seed: int = 0, names: str = "n{}") -> pd.DataFrame:
    """A training-like job: per host a noisy CPU share, steady memory, traffic, a silent retransmission counter,
    a GPU whose memory in use never moves, and a static limit."""
    rng = np.random.default_rng(seed)
    n = int(seconds / interval)
    parts = []
    for h in range(hosts):
        parts.append(pd.DataFrame({
            "timestamp": T0 + interval * np.arange(n), "host": names.format(h),
            "cpu_usage_pct": 30 + 3 * rng.standard_normal(n),
            "mem_rss_mb": 350 + 0.5 * rng.standard_normal(n),
            "net_tx_kb_per_s": 800 * (1 + 0.05 * rng.standard_normal(n)),
            "disk_write_kb_per_s": np.abs(20 * rng.standard_normal(n)),
            "tcp_retrans_events": rng.poisson(0.02, n).astype(float),
            "gpu0_mem_used_mib": np.full(n, 20_000.0),
            "mem_limit_mb": np.full(n, 4096.0),
        }))
    return pd.concat(parts, ignore_index=True)


def during(df: pd.DataFrame, host: str, start: float, end: float) -> pd.Series:
    return (df.host == host) & (df.timestamp >= T0 + start) & (df.timestamp < T0 + end)


def test_clean_runs_stay_quiet() -> None:
    flagged = judged = 0
    for seed in range(5):
        report = normal.run(frame.from_frame(job(seed=seed)))
        flagged += len(report.windows)
        judged += report.judged_windows
    assert judged > 1000
    assert flagged / judged <= 0.01
    assert "mem_limit_mb" not in report.metrics and "cpu_usage_pct" in report.metrics


def test_cpu_anomaly_on_one_node_is_found_on_that_node() -> None:
    df = job(seed=1)
    rows = during(df, "n1", 60, 80)
    df.loc[rows, "cpu_usage_pct"] += 60
    report = normal.run(frame.from_frame(df))
    top = report.events[0]
    assert top.host == "n1" and top.subsystems[0] == "cpu" and top.metrics[0] == "cpu_usage_pct"
    assert T0 + 55 <= top.start <= T0 + 62 and T0 + 78 <= top.end <= T0 + 86
    assert report.hosts[0].host == "n1"
    assert {w.host for w in report.windows} == {"n1"}
    signal = max(report.windows, key=lambda w: w.score).signals[0]
    assert signal.metric == "cpu_usage_pct" and signal.z > normal.Z_FLAG and signal.value > signal.normal + 40


def test_a_metric_that_sat_still_counts_when_it_moves() -> None:
    """The GPU's memory in use never moved while the normal was learned: a second process's allocation is an
    anomaly of the size of its change (the floor), not ignored as static and not infinitely many sigmas."""
    df = job(hosts=1, seed=2)
    rows = during(df, "n0", 50, 76)
    df.loc[rows, "gpu0_mem_used_mib"] = 60_000.0
    report = normal.run(frame.from_frame(df))
    assert report.events and report.events[0].subsystems == ["gpu"]
    assert report.events[0].metrics[0] == "gpu0_mem_used_mib"
    z = report.windows[0].signals[0].z
    assert normal.Z_FLAG < z < 100
    assert not report.peers  # one host: no peers to compare with


def test_what_every_node_shows_at_once_is_not_one_nodes_anomaly() -> None:
    df = job(seed=3)
    df.loc[(df.timestamp >= T0 + 60) & (df.timestamp < T0 + 80), "net_tx_kb_per_s"] *= 0.3  # the whole job
    assert normal.run(frame.from_frame(df)).windows == []
    # with one host there is nothing to compare with: the same slowdown is this host's anomaly
    one = df[df.host == "n0"]
    assert normal.run(frame.from_frame(one)).events[0].metrics[0] == "net_tx_kb_per_s"


def test_retransmissions_burst_is_a_network_anomaly() -> None:
    df = job(seed=4)
    rows = during(df, "n2", 70, 90)
    df.loc[rows, "tcp_retrans_events"] = 30.0
    top = normal.run(frame.from_frame(df)).events[0]
    assert top.host == "n2" and top.subsystems == ["network"] and top.metrics[0] == "tcp_retrans_events"


def test_learned_from_a_baseline_run_judges_from_the_first_window() -> None:
    base = job(seed=5, names="old{}")  # an earlier healthy run of the job, on other nodes
    df = job(seed=6)
    df.loc[during(df, "n0", 5, 25), "cpu_usage_pct"] += 60  # early: inside what the start would learn from
    start_only = normal.run(frame.from_frame(df))
    assert all(w.start >= T0 + normal.LEARN_S for w in start_only.windows)
    both = normal.run(frame.from_frame(df), [frame.from_frame(base)], learn_start=False)
    assert both.mode == "baseline" and both.hosts[0].learned_from == "baseline (pooled hosts)"
    assert both.events[0].host == "n0" and both.events[0].start <= T0 + 8
    same = normal.run(frame.from_frame(df), [frame.from_frame(job(seed=7))])
    assert same.mode == "start+baseline" and {h.learned_from for h in same.hosts} == {"start+baseline"}


def test_skip_and_until_bound_what_is_judged() -> None:
    df = job(seed=8)
    report = normal.run(frame.from_frame(df), skip_s=10, learn_s=20, until_s=100)
    starts = [w.start for w in report.windows]
    assert all(s >= T0 + 30 and s + report.window_s <= T0 + 100 for s in starts)
    per_host = report.judged_windows / 3
    assert 60 <= per_host <= 70  # 30 s to 100 s at 1 s strides, 3 s windows
    with pytest.raises(frame.FrameError, match="to learn the normal from"):
        normal.run(frame.from_frame(df), learn_s=1.0)
    with pytest.raises(ValueError, match="nothing to learn"):
        normal.run(frame.from_frame(df), learn_start=False)


def test_cli_detect_learns_the_normal_by_default(tmp_path: Path) -> None:
    df = job(seed=9)
    df.loc[during(df, "n2", 60, 80), "mem_rss_mb"] += 300
    path = tmp_path / "tel.csv"
    df.to_csv(path, index=False)
    runner = CliRunner()
    result = runner.invoke(app, ["detect", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["mode"] == "start" and data["events"][0]["host"] == "n2"
    assert data["events"][0]["subsystems"] == ["memory"]
    text = runner.invoke(app, ["detect", str(path), "--baseline", str(path), "--learn", "15"])
    assert text.exit_code == 0 and "anomalies (strongest first)" in text.output and "n2" in text.output
    assert runner.invoke(app, ["detect", str(path), "--learn", "0"]).exit_code == 2


LAB = Path(__file__).parent / "fixtures" / "lab_telemetry"  # two real fault-lab telemetry jobs (dev seed 361)


def test_real_lab_jobs_memory_limit_found_on_its_node_and_a_clean_job_stays_quiet() -> None:
    from eval.bench_reveal_lab import judge

    pressure = judge(LAB / "361-009", None, True)
    assert pressure["kind"] == "mem_pressure" and pressure["host"] == "gpu-node-06"
    assert pressure["found"] and pressure["node_right"] and pressure["subsystem"].startswith("memory")
    assert pressure["peak"] > 3 * normal.Z_FLAG
    clean = judge(LAB / "361-013", None, True)
    assert clean["clean"] and clean["judged"] > 60 and clean["flagged"] == 0
    # the clean job as the earlier healthy run of the same job: the memory limit is still found, every window judged
    both = judge(LAB / "361-009", LAB / "361-013" / "telemetry.csv", False)
    assert both["node_right"] and both["before"] > pressure["before"] and both["before_flagged"] == 0
