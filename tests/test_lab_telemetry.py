"""The fault lab's per-node telemetry (eval/lab/telemetry.py) and telemetry jobs (eval/lab/run.py draw_telemetry):
the readings from a node's cgroups, processes and sockets, turned into rates. The lab itself (namespaces, cgroups,
launchers) is not run here: it is `python -m eval.lab.run --telemetry`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from eval.lab import telemetry
from eval.lab.run import TELEMETRY_KINDS, draw_telemetry


def fake_groups(root: Path, pids: list[int]) -> dict[str, Path]:
    groups = {c: root / c for c in telemetry.CONTROLLERS}
    for path in groups.values():
        path.mkdir(parents=True)
    (groups["cpuacct"] / "cpuacct.usage").write_text("2500000000\n")
    (groups["cpuacct"] / "cpuacct.stat").write_text(f"user 150\nsystem {telemetry.TICK}\n")
    (groups["cpu"] / "cpu.stat").write_text("nr_periods 10\nnr_throttled 4\nthrottled_time 300000000\n")
    (groups["cpu"] / "cgroup.procs").write_text("".join(f"{p}\n" for p in pids))
    (groups["memory"] / "memory.stat").write_text(
        f"cache 1\nrss 2\ntotal_cache {64 * 2**20}\ntotal_rss {300 * 2**20}\ntotal_pgfault 1000\ntotal_pgmajfault 7\n")
    (groups["memory"] / "memory.failcnt").write_text("3\n")
    (groups["blkio"] / "blkio.throttle.io_service_bytes").write_text("253:0 Read 1024\n253:0 Write 3072\nTotal 4096\n")
    (groups["blkio"] / "blkio.throttle.io_serviced").write_text("253:0 Read 1\n253:0 Write 3\n253:0 Total 4\n")
    return groups


def test_cgroup_readings(tmp_path: Path) -> None:
    got = telemetry.cgroup_counters(fake_groups(tmp_path, []))
    assert got["cpu_usage_c"] == 2.5 and got["cpu_sys_c"] == 1.0
    assert got["cpu_throttled_c"] == pytest.approx(0.3) and got["cpu_throttled_events_c"] == 4
    assert got["mem_rss_mb"] == 300 and got["mem_cache_mb"] == 64 and got["mem_pgmajfault_c"] == 7
    assert got["mem_limit_hit_events_c"] == 3 and got["disk_blkio_kb_c"] == 4 and got["disk_ops_c"] == 4


def test_rates_name_the_metrics_as_reveal_reads_them() -> None:
    prev = {"cpu_usage_c": 1.0, "cpu_throttled_c": 0.0, "mem_pgmajfault_c": 10.0, "net_tx_kb_c": 100.0,
            "net_tx_segs_c": 50.0, "tcp_retrans_c": 2.0, "mem_limit_hit_events_c": 0.0}
    cur = {"cpu_usage_c": 1.25, "cpu_throttled_c": 0.1, "mem_pgmajfault_c": 14.0, "net_tx_kb_c": 300.0,
           "net_tx_segs_c": 250.0, "tcp_retrans_c": 22.0, "mem_limit_hit_events_c": 5.0, "mem_rss_mb": 300.0}
    got = telemetry.rates(prev, cur, 0.5)
    assert got["cpu_usage_pct"] == 50.0 and got["cpu_throttled_pct"] == 20.0
    assert got["mem_pgmajfault_events"] == 8.0 and got["mem_limit_hit_events"] == 10.0
    assert got["net_tx_kb_per_s"] == 400.0 and got["tcp_retrans_events"] == 40.0
    assert got["tcp_retrans_pct"] == 10.0  # 20 of the 200 segments sent were retransmissions
    assert got["mem_rss_mb"] == 300.0
    # a counter that went backwards (a process left the group) is no negative rate
    assert telemetry.rates({"cpu_usage_c": 5.0}, {"cpu_usage_c": 4.0}, 1.0)["cpu_usage_pct"] == 0.0


def test_process_counters_survive_processes_that_exit(tmp_path: Path) -> None:
    """The node's own processes are real ones here: this test's process stands in for a rank."""
    import os

    groups = fake_groups(tmp_path, [os.getpid()])
    procs = telemetry.Processes()
    first = procs.update(groups)
    assert first["proc_threads"] >= 1 and first["ctxt_voluntary_c"] > 0
    (groups["cpu"] / "cgroup.procs").write_text("")  # it left: what it did stays counted
    assert procs.update(groups)["ctxt_voluntary_c"] == first["ctxt_voluntary_c"]


SS = """ESTAB 0 0 [::ffff:127.0.5.10]:29400 [::ffff:127.0.5.11]:40000 users:(("python",pid=11,fd=3))
\t cubic wscale:7,7 bytes_sent:4096 bytes_received:2048 segs_out:40 segs_in:30 retrans:0/3 rcv_space:1
ESTAB 0 0 [::ffff:127.0.5.11]:40000 [::ffff:127.0.5.10]:29400 users:(("python",pid=22,fd=5))
\t cubic bytes_sent:1024 bytes_received:4096 segs_out:10 segs_in:40
ESTAB 0 0 127.0.0.1:5000 127.0.0.1:6000 users:(("sshd",pid=99,fd=5))
\t cubic bytes_sent:99999 segs_out:999 retrans:0/99
"""


def test_sockets_belong_to_the_node_that_owns_them(monkeypatch: pytest.MonkeyPatch) -> None:
    outputs = [SS, SS.replace("bytes_sent:4096", "bytes_sent:14336").replace("retrans:0/3", "retrans:1/5")]

    def fake_run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        assert argv[0] == "ss"
        return subprocess.CompletedProcess(argv, 0, outputs.pop(0), "")

    monkeypatch.setattr(telemetry.subprocess, "run", fake_run)
    sockets = telemetry.Sockets(["a", "b"])
    owner = {"11": "a", "22": "b"}
    first = sockets.update(owner)
    assert first["a"]["net_tx_kb_c"] == 4 and first["a"]["tcp_retrans_c"] == 3 and first["a"]["net_rx_segs_c"] == 30
    assert first["b"]["net_rx_kb_c"] == 4 and first["b"]["tcp_retrans_c"] == 0
    second = sockets.update(owner)
    assert second["a"]["net_tx_kb_c"] == 14 and second["a"]["tcp_retrans_c"] == 5
    assert second["b"] == first["b"]  # nothing new on b; the sshd socket belongs to no node


def test_telemetry_jobs_are_drawn_from_seed_and_index() -> None:
    specs = [draw_telemetry(362, k) for k in range(len(TELEMETRY_KINDS))]
    assert [s["fault"]["kind"] for s in specs] == list(TELEMETRY_KINDS)
    assert draw_telemetry(362, 3) == draw_telemetry(362, 3) and draw_telemetry(362, 3) != draw_telemetry(363, 3)
    for spec in specs:
        assert spec["telemetry"] and len(spec["nodes"]) == 3 and spec["nproc"] == 1
        assert len(set(spec["cgroups"])) == 3 and 12 <= spec["fault"]["duration_s"] <= 18
        assert 80 <= spec["fault"]["after_steps"] <= 110 < spec["config"]["steps"]
    with pytest.raises(ValueError, match="unknown telemetry anomaly"):
        telemetry.Anomaly("tc_netem_delay", "n", "127.0.0.1", {}, Path("."))
