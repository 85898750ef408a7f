"""Network check parsers against real tool outputs (tests/fixtures/net) served by fake tools."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from agent.checks.manifest import profile
from tests.conftest import FakeTools, fixture_text, run_script

H100 = profile("H100-SXM-8")
A100 = profile("A100-SXM-8")
IB = "/sys/class/infiniband"


def net(name: str) -> str:
    return fixture_text("net", name)


def params(prof: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"profile": prof or H100, "host": "node-1", "sample_s": 0.05, "server_wait_s": 0.05, **extra}


def missing(fake: FakeTools, *names: str) -> None:
    """Shadow tools that may exist on the test machine with a shell's 'not found'."""
    for name in names:
        fake.tool(name, rc=127, stderr=f"sh: 1: {name}: not found\n")


def no_journal(fake: FakeTools) -> None:
    fake.tool("journalctl", rc=1, stderr="No journal files were found.\n")
    missing(fake, "dmesg")


def port(fake: FakeTools, dev: str, *, state: str = "4: ACTIVE", phys: str = "5: LinkUp",
         rate: str = "400 Gb/sec (4X NDR)", layer: str = "InfiniBand", hca_type: str = "MT4129",
         gids: dict[int, tuple[str, str]] | None = None, netdev: str = "", counters: dict[str, int] | None = None
         ) -> None:
    """One HCA port in the real sysfs layout."""
    base = f"{IB}/{dev}/ports/1"
    for name, text in (("state", state), ("phys_state", phys), ("rate", rate), ("link_layer", layer)):
        fake.file(f"{base}/{name}", text + "\n")
    fake.file(f"{IB}/{dev}/hca_type", hca_type + "\n")
    fake.file(f"{IB}/{dev}/fw_ver", "28.39.1002\n")
    for index, (gid, kind) in (gids or {}).items():
        fake.file(f"{base}/gids/{index}", gid + "\n")
        if kind:
            fake.file(f"{base}/gid_attrs/types/{index}", kind + "\n")
    if netdev:
        fake.file(f"{IB}/{dev}/device/net/{netdev}/operstate", "up\n")
    for name, value in (counters or {}).items():
        fake.file(f"{base}/counters/{name}", f"{value}\n")


def ib_rails(fake: FakeTools, count: int = 8, **overrides: dict[str, Any]) -> None:
    for k in range(count):
        dev = f"mlx5_{k}"
        port(fake, dev, netdev=f"ib{k}", **overrides.get(dev, {}))


def ids(result: dict[str, Any], severity: str | None = None) -> list[tuple[str, str]]:
    return [(f["id"], f["entity"]) for f in result["findings"] if severity in (None, f["severity"])]


# ---- nic_config ---------------------------------------------------------------------------------
def test_ibstat_all_active_roce_host_passes(fake_tools: FakeTools) -> None:
    fake_tools.tool("ibstat", net("gpud_ibstat.47.0.h100.all.active.0.txt"))
    result = run_script("nic_config.py", fake_tools.env(), params())
    assert result["verdict"] == "PASS", result
    assert result["metrics"]["hca_count"] == 8 and result["metrics"]["hca_total"] == 12
    assert result["metrics"]["link_layer"] == "Ethernet"  # RoCE rails: the 400G MT4129 ports


def test_ibstat_some_down_flags_only_the_ethernet_ports(fake_tools: FakeTools) -> None:
    # the 8 InfiniBand rails are Active; mlx5_2/7/8 are ConnectX-6 Dx Ethernet ports (mlx5_2 is the second
    # port of mlx5_1's NIC) -- such uncabled ports occur on healthy hosts, so they only warn
    fake_tools.tool("ibstat", net("gpud_ibstat.47.0.h100.some.down.0.txt"))
    result = run_script("nic_config.py", fake_tools.env(), params())
    assert result["verdict"] == "WARN", result
    assert sorted(e for i, e in ids(result, "WARN") if i == "other_port_down") == ["mlx5_2", "mlx5_7", "mlx5_8"]
    assert result["metrics"]["hca_count"] == 8 and result["metrics"]["link_layer"] == "InfiniBand"


def test_ibstat_rail_down_fails_with_its_name(fake_tools: FakeTools) -> None:
    text = net("gpud_ibstat.47.0.h100.some.down.0.txt")
    head, _, tail = text.partition("CA 'mlx5_3'")
    tail = tail.replace("State: Active", "State: Down", 1)
    tail = tail.replace("Physical state: LinkUp", "Physical state: Polling", 1)
    fake_tools.tool("ibstat", head + "CA 'mlx5_3'" + tail)
    result = run_script("nic_config.py", fake_tools.env(), params())
    assert result["verdict"] == "FAIL"
    assert ("port_down", "mlx5_3") in ids(result, "FAIL")


def test_ibstat_exit_255_is_parsed_and_warned(fake_tools: FakeTools) -> None:
    fake_tools.tool("ibstat", net("gpud_ibstat.39.0.a100.failed.ibpanic.exit-255.0.txt"), rc=255)
    result = run_script("nic_config.py", fake_tools.env(), params(A100))
    assert result["verdict"] == "WARN", result
    assert ("ibstat_failed", "mlx5_8") in ids(result, "WARN")
    assert result["metrics"]["hca_count"] == 8 and result["metrics"]["rates_gbps"] == [200.0]


def test_ibstatus_a100_passes_on_its_profile_and_fails_on_h100(fake_tools: FakeTools) -> None:
    missing(fake_tools, "ibstat")
    fake_tools.tool("ibstatus", net("gpud_ibstatus.39.0.a100.all.active.0.txt"))
    result = run_script("nic_config.py", fake_tools.env(), params(A100))
    assert result["verdict"] == "PASS" and result["metrics"]["source"] == "ibstatus"
    assert result["metrics"]["hca_count"] == 8  # mlx5_8 is the Ethernet VF, not a rail
    result = run_script("nic_config.py", fake_tools.env(), params(H100))
    assert result["verdict"] == "FAIL" and ("rate_degraded", "mlx5_0") in ids(result, "FAIL")


def test_ip_json_with_seven_ib_netdevs_fails_count(fake_tools: FakeTools) -> None:
    missing(fake_tools, "ibstat", "ibstatus")
    fake_tools.tool("ip", net("gcm_ip_json_ib_interfaces_fail.json"))
    result = run_script("nic_config.py", fake_tools.env(), params())
    assert result["verdict"] == "FAIL" and ("ib_netdev_count", "host") in ids(result)
    assert result["metrics"]["ib_netdev_count"] == 7


def test_sysfs_port_down_and_downgraded_rate(fake_tools: FakeTools) -> None:
    missing(fake_tools, "ibstat")
    ib_rails(fake_tools, mlx5_2={"state": "1: DOWN", "phys": "3: Disabled", "rate": "40 Gb/sec (4X QDR)"},
             mlx5_5={"rate": "200 Gb/sec (4X HDR)"})
    result = run_script("nic_config.py", fake_tools.env(), params())
    assert result["verdict"] == "FAIL" and result["metrics"]["source"] == "sysfs"
    assert {("port_down", "mlx5_2"), ("rate_degraded", "mlx5_5")} <= set(ids(result, "FAIL"))


def test_nic_config_without_any_source_is_unknown(fake_tools: FakeTools) -> None:
    missing(fake_tools, "ibstat", "ibstatus", "ip")
    assert run_script("nic_config.py", fake_tools.env(), params())["verdict"] == "UNKNOWN"


# ---- ib_link_errors -----------------------------------------------------------------------------
WIDE = 400 * 86400  # the fixtures' syslog dates have no year; look back far enough to include them


def test_syslog_without_flaps_passes(fake_tools: FakeTools) -> None:
    no_journal(fake_tools)
    fake_tools.file("/var/log/syslog", net("azurehpc_0flap_syslog"))
    result = run_script("ib_link_errors.py", fake_tools.env(), params(window_s=WIDE))
    assert result["verdict"] == "PASS" and result["metrics"]["log_source"] == "/var/log/syslog"


def test_six_lost_carrier_events_fail_the_device(fake_tools: FakeTools) -> None:
    no_journal(fake_tools)
    fake_tools.file("/var/log/syslog", net("azurehpc_1dev_6flap_syslog"))
    result = run_script("ib_link_errors.py", fake_tools.env(), params(window_s=WIDE))
    assert result["verdict"] == "FAIL" and ("link_flapping", "ib6") in ids(result, "FAIL")
    assert result["metrics"]["flaps"] == {"ib6": 6}


def test_old_flaps_outside_the_window_are_ignored(fake_tools: FakeTools) -> None:
    no_journal(fake_tools)
    fake_tools.file("/var/log/syslog", net("azurehpc_1dev_6flap_syslog").replace("Aug 17", "Jan  1"))
    result = run_script("ib_link_errors.py", fake_tools.env(), params(window_s=3600))
    assert result["verdict"] in ("PASS", "FAIL")
    if result["verdict"] == "FAIL":  # only when the test runs on Jan 1/2, inside the 24 h window
        assert ("link_flapping", "ib6") in ids(result)


def test_gcm_single_flaps_warn_for_ib_and_inform_for_ethernet(fake_tools: FakeTools) -> None:
    no_journal(fake_tools)
    fake_tools.file("/var/log/syslog", net("gcm_syslog_link_flaps.log"))
    result = run_script("ib_link_errors.py", fake_tools.env(), params(window_s=WIDE))
    assert result["verdict"] == "WARN"
    assert ("carrier_lost", "ib1") in ids(result, "WARN") and ("carrier_lost", "eth0") in ids(result, "INFO")


def test_journal_flaps_and_benign_mlx5_power_message(fake_tools: FakeTools) -> None:
    # minutes before the incident (now): inside the window the script asks journalctl for and filters again
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(time.time() - 600))
    lines = [f"{stamp} node-1 systemd-networkd[1021]: ib2: Lost carrier" for _ in range(5)]
    lines.append(f"{stamp} node-1 kernel: mlx5_core 0000:4d:00.0: mlx5_pcie_event:299:(pid 9): Detected "
                 "insufficient power on the PCIe slot (27W).")
    fake_tools.tool("journalctl", "\n".join(lines) + "\n")
    ib_rails(fake_tools, 4)
    result = run_script("ib_link_errors.py", fake_tools.env(), params())
    assert result["verdict"] == "FAIL" and ("link_flapping", "mlx5_2") in ids(result, "FAIL")
    assert result["metrics"]["benign_mlx5_messages"] == 1


def test_growing_symbol_errors_warn(fake_tools: FakeTools) -> None:
    fake_tools.tool("journalctl", "-- No entries --\n")
    ib_rails(fake_tools, 2, mlx5_1={"counters": {"symbol_error": 3, "link_downed": 0}})
    counter = fake_tools.sysroot / "sys/class/infiniband/mlx5_1/ports/1/counters/symbol_error"
    timer = threading.Timer(0.3, lambda: counter.write_text("9\n"))
    timer.start()
    try:
        result = run_script("ib_link_errors.py", fake_tools.env(), params(sample_s=1.0))
    finally:
        timer.cancel()
    assert result["verdict"] == "WARN" and ("counter_growing", "mlx5_1") in ids(result, "WARN")


def test_static_symbol_errors_only_inform(fake_tools: FakeTools) -> None:
    fake_tools.tool("journalctl", "-- No entries --\n")
    ib_rails(fake_tools, 2, mlx5_1={"counters": {"symbol_error": 3}})
    result = run_script("ib_link_errors.py", fake_tools.env(), params())
    assert result["verdict"] == "PASS" and ("counter_nonzero", "mlx5_1") in ids(result, "INFO")


# ---- rdma_userspace -----------------------------------------------------------------------------
def test_no_ib_devices_found_while_kernel_has_them_fails(fake_tools: FakeTools) -> None:
    ib_rails(fake_tools, 2)
    fake_tools.tool("ibv_devinfo", stderr="No IB devices found\n", rc=255)
    result = run_script("rdma_userspace.py", fake_tools.env(), params())
    assert result["verdict"] == "FAIL" and ("no_verbs_devices", "host") in ids(result)
    assert "libibverbs.so.1 is not installed" in result["summary"]


def test_missing_verbs_library_and_tool_fail(fake_tools: FakeTools) -> None:
    ib_rails(fake_tools, 2)
    missing(fake_tools, "ibv_devinfo")
    result = run_script("rdma_userspace.py", fake_tools.env(), params())
    assert result["verdict"] == "FAIL" and ("verbs_missing", "host") in ids(result)


def test_verbs_listing_all_devices_passes(fake_tools: FakeTools) -> None:
    ib_rails(fake_tools, 2)
    fake_tools.tool("ibv_devinfo", "2 HCAs found:\n\tmlx5_0\n\tmlx5_1\n")
    assert run_script("rdma_userspace.py", fake_tools.env(), params())["verdict"] == "PASS"


def test_tool_missing_but_library_present_is_unknown(fake_tools: FakeTools) -> None:
    ib_rails(fake_tools, 1)
    missing(fake_tools, "ibv_devinfo")
    fake_tools.file("/usr/lib/x86_64-linux-gnu/libibverbs.so.1", "")
    fake_tools.file("/etc/libibverbs.d/mlx5.driver", "driver mlx5\n")
    assert run_script("rdma_userspace.py", fake_tools.env(), params())["verdict"] == "UNKNOWN"


def test_no_kernel_devices_is_unknown(fake_tools: FakeTools) -> None:
    fake_tools.tool("ibv_devinfo", stderr="No IB devices found\n", rc=255)
    assert run_script("rdma_userspace.py", fake_tools.env(), params())["verdict"] == "UNKNOWN"


# ---- rdma_perftest ------------------------------------------------------------------------------
def perftest_host(fake: FakeTools, output: str, rc: int = 0, stderr: str = "") -> None:
    port(fake, "mlx5_0", rate="200 Gb/sec (4X HDR)", hca_type="MT4123", netdev="ib0")
    fake.tool("ib_write_bw", output, rc=rc, stderr=stderr)
    missing(fake, "nvidia-smi", "lsmod")


@pytest.mark.parametrize(("name", "gbps"), [("superbench_ib_loopback_8M_size.log", 192.45),
                                            ("superbench_ib_loopback_all_sizes.log", 185.93)])
def test_ib_write_bw_mb_per_sec_logs_against_thresholds(fake_tools: FakeTools, name: str, gbps: float) -> None:
    perftest_host(fake_tools, net(name))
    result = run_script("rdma_perftest.py", fake_tools.env(), params(A100))
    assert result["verdict"] == "PASS", result
    assert result["metrics"]["bw_gbps"]["mlx5_0"] == pytest.approx(gbps, abs=0.01)
    result = run_script("rdma_perftest.py", fake_tools.env(), params(H100))  # 380 Gb/s expected
    assert result["verdict"] == "FAIL" and ("bw_low", "mlx5_0") in ids(result)


def test_ib_write_bw_mib_per_sec_and_gbits_units(fake_tools: FakeTools) -> None:
    text = net("superbench_ib_loopback_8M_size.log").replace("MB/sec", "MiB/sec")
    perftest_host(fake_tools, text)
    result = run_script("rdma_perftest.py", fake_tools.env(), params(A100))
    assert result["metrics"]["bw_gbps"]["mlx5_0"] == pytest.approx(24056.72 * 8 * 1.048576 / 1000, abs=0.01)


def test_ib_write_bw_port_down_error(fake_tools: FakeTools) -> None:
    perftest_host(fake_tools, "", rc=1, stderr=" Port number 1 state is Down\n Couldn't set the link layer\n"
                                                " Couldn't get context for the device\n")
    result = run_script("rdma_perftest.py", fake_tools.env(), params(A100))
    assert result["verdict"] == "FAIL" and ("port_down", "mlx5_0") in ids(result)


def test_ib_write_bw_missing_is_unknown(fake_tools: FakeTools) -> None:
    port(fake_tools, "mlx5_0")
    missing(fake_tools, "ib_write_bw")
    assert run_script("rdma_perftest.py", fake_tools.env(), params())["verdict"] == "UNKNOWN"


# ---- nccl_intranode / nccl_internode ------------------------------------------------------------
def test_superbench_old_layout_uses_largest_size_not_sweep_average(fake_tools: FakeTools) -> None:
    fake_tools.tool("all_reduce_perf", net("superbench_nccl_allreduce.log"))
    result = run_script("nccl_intranode.py", fake_tools.env(), params(A100))
    assert result["verdict"] == "PASS", result
    assert result["metrics"]["size_bytes"] == 8589934592
    assert result["metrics"]["busbw"] == pytest.approx((235.26 + 235.03) / 2, abs=0.01)
    assert result["metrics"]["avg_busbw_sweep"] == pytest.approx(68.4048)


def test_gcm_new_layout_against_profiles(fake_tools: FakeTools) -> None:
    fake_tools.tool("all_reduce_perf", net("gcm_nccltests_all_reduce_a100_8gpu_pass.log"))
    result = run_script("nccl_intranode.py", fake_tools.env(), params(A100))
    assert result["verdict"] == "PASS" and result["metrics"]["busbw"] == pytest.approx(231.71, abs=0.01)
    result = run_script("nccl_intranode.py", fake_tools.env(), params(H100))
    assert result["verdict"] == "FAIL" and ("busbw_low", "node-1") in ids(result)


def test_wrong_results_fail_as_corruption(fake_tools: FakeTools) -> None:
    text = net("gcm_nccltests_all_reduce_a100_8gpu_pass.log")
    text = text.replace("226.63      0", "226.63   1024").replace("Out of bounds values : 0 OK",
                                                                  "Out of bounds values : 1 FAILED")
    fake_tools.tool("all_reduce_perf", text, rc=1)
    result = run_script("nccl_intranode.py", fake_tools.env(), params(A100))
    assert result["verdict"] == "FAIL" and ("data_corruption", "node-1") in ids(result)


def test_truncated_output_uses_the_rows_it_has(fake_tools: FakeTools) -> None:
    lines = net("gcm_nccltests_all_reduce_a100_8gpu_pass.log").splitlines()
    cut = next(i for i, line in enumerate(lines) if line.lstrip().startswith("268435456"))
    fake_tools.tool("all_reduce_perf", "\n".join(lines[:cut + 1]) + "\n   5368709", rc=1)
    result = run_script("nccl_intranode.py", fake_tools.env(), params(A100))
    assert result["metrics"]["size_bytes"] == 268435456 and result["verdict"] == "FAIL"  # 223 < 228


def test_test_timeout_is_a_hang(fake_tools: FakeTools) -> None:
    head = net("gcm_nccltests_all_reduce_a100_8gpu_pass.log").split("    33554432")[0]
    fake_tools.tool("all_reduce_perf", head + "node-1: Test timeout (240s) common.cu:424\n"
                    " .. node-1 pid 41721: Test failure common.cu:1061\n", rc=4)
    result = run_script("nccl_intranode.py", fake_tools.env(), params(A100))
    assert result["verdict"] == "FAIL" and [i for i, _ in ids(result, "FAIL")] == ["hang"]


def test_mpirun_slots_failure_is_unknown(fake_tools: FakeTools) -> None:
    fake_tools.tool("all_reduce_perf", "")
    fake_tools.tool("mpirun", net("gcm_nccltests_mpirun_slots_failure.log"), rc=1)
    ib_rails(fake_tools, 2)
    result = run_script("nccl_internode.py", fake_tools.env(), params(A100, use_mpirun=True))
    assert result["verdict"] == "UNKNOWN" and "not enough slots" in result["summary"]


def test_all_reduce_perf_missing_is_unknown(fake_tools: FakeTools) -> None:
    assert run_script("nccl_intranode.py", fake_tools.env(), params())["verdict"] == "UNKNOWN"


def test_internode_socket_fallback_fails(fake_tools: FakeTools) -> None:
    text = net("gcm_nccltests_all_reduce_a100_8gpu_pass.log").replace(
        "NCCL version 2.16.2+cuda11.6\n", "NCCL version 2.16.2+cuda11.6\n"
        "node-1:66421:66480 [0] NCCL INFO Using network Socket\n"
        "node-1:66421:66480 [0] NCCL INFO Channel 00/0 : 0[7000] -> 1[f000] [send] via NET/Socket/0\n")
    fake_tools.tool("all_reduce_perf", text)
    ib_rails(fake_tools, 8, **{f"mlx5_{k}": {"rate": "200 Gb/sec (4X HDR)", "hca_type": "MT4123"} for k in range(8)})
    result = run_script("nccl_internode.py", fake_tools.env(), params(A100))
    assert result["verdict"] == "FAIL" and ("net_socket", "node-1") in ids(result, "FAIL")
    assert result["metrics"]["transports"] == ["Socket"]


# ---- nccl_env -----------------------------------------------------------------------------------
def ip_addr(*ifaces: tuple[str, str, str]) -> str:
    """`ip -j addr` for (name, operstate, ipv4 or '')."""
    return json.dumps([{"ifname": name, "operstate": state, "link_type": "ether",
                        "addr_info": [{"family": "inet", "local": ip, "prefixlen": 24, "scope": "global"}]
                        if ip else []} for name, state, ip in ifaces])


def nccl_env_host(fake: FakeTools) -> None:
    for name, state in (("lo", "unknown"), ("eth0", "up"), ("ib0", "up"), ("docker0", "down")):
        fake.file(f"/sys/class/net/{name}/operstate", state + "\n")
    fake.tool("ip", ip_addr(("lo", "UNKNOWN", "127.0.0.1"), ("eth0", "UP", "10.0.0.4"), ("ib0", "UP", ""),
                            ("docker0", "DOWN", "172.17.0.1")))
    port(fake, "mlx5_0", netdev="ib0")
    port(fake, "mlx5_1", layer="Ethernet", rate="100 Gb/sec (4X EDR)", hca_type="MT4125", netdev="eth0")


@pytest.mark.parametrize(("env", "verdict", "finding"), [
    ({"NCCL_SOCKET_IFNAME": "eth1"}, "FAIL", ("socket_ifname", "NCCL_SOCKET_IFNAME")),
    ({"NCCL_SOCKET_IFNAME": "ib"}, "FAIL", ("socket_ifname", "NCCL_SOCKET_IFNAME")),  # ib0 has no address
    ({"NCCL_SOCKET_IFNAME": "=eth"}, "FAIL", ("socket_ifname", "NCCL_SOCKET_IFNAME")),  # exact: no 'eth'
    ({"NCCL_SOCKET_IFNAME": "eth"}, "PASS", None),
    ({"NCCL_SOCKET_IFNAME": "^docker,lo"}, "PASS", None),
    ({"NCCL_SOCKET_IFNAME": "^eth,ib,lo,docker"}, "FAIL", ("socket_ifname", "NCCL_SOCKET_IFNAME")),
    ({"NCCL_SOCKET_IFNAME": "lo"}, "WARN", ("socket_ifname_local", "NCCL_SOCKET_IFNAME")),
    ({"GLOO_SOCKET_IFNAME": "eth0"}, "PASS", None),
    ({"GLOO_SOCKET_IFNAME": "eth"}, "FAIL", ("gloo_ifname", "GLOO_SOCKET_IFNAME")),  # Gloo wants exact names
    ({"NCCL_IB_HCA": "mlx5_1"}, "FAIL", ("ib_hca_not_rail", "mlx5_1")),
    ({"NCCL_IB_HCA": "mlx5_9"}, "FAIL", ("ib_hca_missing", "mlx5_9")),
    ({"NCCL_IB_HCA": "^mlx5_1"}, "PASS", None),
    ({"NCCL_IB_HCA": "=mlx5_0:1"}, "PASS", None),
    ({"NCCL_IB_DISABLE": "1"}, "WARN", ("ib_disabled", "NCCL_IB_DISABLE")),
    ({"NCCL_NET_PLUGIN": "aws-ofi"}, "FAIL", ("net_plugin_missing", "NCCL_NET_PLUGIN")),
    ({}, "PASS", None),
])
def test_nccl_env_rules(fake_tools: FakeTools, env: dict[str, str], verdict: str,
                        finding: tuple[str, str] | None) -> None:
    nccl_env_host(fake_tools)
    result = run_script("nccl_env.py", fake_tools.env(**env), params())
    assert result["verdict"] == verdict, result
    if finding:
        assert finding in ids(result)


def test_net_plugin_found_on_ld_library_path(fake_tools: FakeTools) -> None:
    nccl_env_host(fake_tools)
    fake_tools.file("/opt/plugins/libnccl-net-aws-ofi.so", "")
    env = fake_tools.env(NCCL_NET_PLUGIN="aws-ofi", LD_LIBRARY_PATH="/opt/plugins")
    assert run_script("nccl_env.py", env, params())["verdict"] == "PASS"


ROCE_GIDS = {0: ("fe80:0000:0000:0000:ba3f:d2ff:fe12:3456", "IB/RoCE v1"),
             1: ("fe80:0000:0000:0000:ba3f:d2ff:fe12:3456", "RoCE v2"),
             2: ("0000:0000:0000:0000:0000:ffff:c0a8:0105", "IB/RoCE v1"),
             3: ("0000:0000:0000:0000:0000:ffff:c0a8:0105", "RoCE v2"),
             4: ("0000:0000:0000:0000:0000:0000:0000:0000", "")}


@pytest.mark.parametrize(("index", "verdict", "fid"), [("3", "PASS", None), ("0", "FAIL", "gid_index_not_v2"),
                                                       ("4", "FAIL", "gid_index_absent"),
                                                       ("1", "WARN", "gid_index_link_local")])
def test_gid_index_on_roce_rails(fake_tools: FakeTools, index: str, verdict: str, fid: str | None) -> None:
    for k in range(2):
        port(fake_tools, f"mlx5_{k}", layer="Ethernet", gids=ROCE_GIDS, netdev=f"rdma{k}")
    result = run_script("nccl_env.py", fake_tools.env(NCCL_IB_GID_INDEX=index), params())
    assert result["verdict"] == verdict
    if fid:
        assert (fid, "mlx5_0") in ids(result)


# ---- roce_config --------------------------------------------------------------------------------
def devinfo(*ports: tuple[str, int, str]) -> str:
    """rdma-core `ibv_devinfo` text for (dev, active_mtu, link_layer)."""
    enum = {4096: 5, 2048: 4, 1024: 3}
    return "".join(f"hca_id:\t{dev}\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t28.39.1002\n"
                   f"\tvendor_part_id:\t\t\t4129\n\tphys_port_cnt:\t\t\t1\n\t\tport:\t1\n"
                   f"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tmax_mtu:\t\t4096 (5)\n"
                   f"\t\t\tactive_mtu:\t\t{mtu} ({enum[mtu]})\n\t\t\tlink_layer:\t\t{layer}\n\n"
                   for dev, mtu, layer in ports)


def test_roce_mixed_mtu_fails_and_low_mtu_warns(fake_tools: FakeTools) -> None:
    for k in range(2):
        port(fake_tools, f"mlx5_{k}", layer="Ethernet", gids=ROCE_GIDS, netdev=f"rdma{k}")
    fake_tools.tool("ibv_devinfo", devinfo(("mlx5_0", 4096, "Ethernet"), ("mlx5_1", 1024, "Ethernet")))
    result = run_script("roce_config.py", fake_tools.env(), params())
    assert result["verdict"] == "FAIL" and ("mtu_mixed", "host") in ids(result)
    assert result["metrics"]["active_mtu"] == [1024, 4096]
    fake_tools.tool("ibv_devinfo", devinfo(("mlx5_0", 1024, "Ethernet"), ("mlx5_1", 1024, "Ethernet")))
    result = run_script("roce_config.py", fake_tools.env(), params())
    assert result["verdict"] == "WARN" and result["metrics"]["active_mtu"] == 1024


def test_roce_mtu_from_netdev_when_verbs_tools_are_missing(fake_tools: FakeTools) -> None:
    for k in range(2):
        port(fake_tools, f"mlx5_{k}", layer="Ethernet", gids=ROCE_GIDS, netdev=f"rdma{k}")
        fake_tools.file(f"/sys/class/net/rdma{k}/mtu", "9000\n")
    missing(fake_tools, "ibv_devinfo")
    result = run_script("roce_config.py", fake_tools.env(), params())
    assert result["verdict"] == "PASS" and result["metrics"]["active_mtu"] == 4096
    assert result["metrics"]["mtu_source"] == "netdev mtu"


def test_roce_port_without_v2_gid_fails(fake_tools: FakeTools) -> None:
    port(fake_tools, "mlx5_0", layer="Ethernet", gids={0: ROCE_GIDS[0], 2: ROCE_GIDS[2]}, netdev="rdma0")
    fake_tools.tool("ibv_devinfo", devinfo(("mlx5_0", 4096, "Ethernet")))
    result = run_script("roce_config.py", fake_tools.env(), params())
    assert result["verdict"] == "FAIL" and ("no_roce_v2_gid", "mlx5_0") in ids(result)


def test_ib_rails_only_compare_mtu(fake_tools: FakeTools) -> None:
    ib_rails(fake_tools, 2)
    fake_tools.tool("ibv_devinfo", devinfo(("mlx5_0", 4096, "InfiniBand"), ("mlx5_1", 4096, "InfiniBand")))
    result = run_script("roce_config.py", fake_tools.env(), params())
    assert result["verdict"] == "PASS" and result["metrics"]["active_mtu"] == 4096


# ---- gdr_status ---------------------------------------------------------------------------------
LSMOD = ("Module                  Size  Used by\nnvidia_peermem         16384  0\n"
         "nvidia              56463360  1 nvidia_peermem\n")


def test_gdr_with_peermem_and_benign_kmsg_errors(fake_tools: FakeTools) -> None:
    port(fake_tools, "mlx5_0")
    fake_tools.tool("lsmod", LSMOD)
    fake_tools.tool("journalctl", net("gpud_kmsg.peermem.log"))
    result = run_script("gdr_status.py", fake_tools.env(), params())
    assert result["verdict"] == "PASS" and result["metrics"]["peermem_log_errors"] == 7
    assert ("peermem_runtime_error", "nvidia_peermem") in ids(result, "INFO")


def test_gdr_without_peermem_fails(fake_tools: FakeTools) -> None:
    port(fake_tools, "mlx5_0")
    fake_tools.tool("lsmod", LSMOD.replace("nvidia_peermem         16384  0\n", ""))
    fake_tools.tool("journalctl", "-- No entries --\n")
    result = run_script("gdr_status.py", fake_tools.env(), params())
    assert result["verdict"] == "FAIL" and ("peermem_missing", "nvidia_peermem") in ids(result)


def test_gdr_level_loc_warns(fake_tools: FakeTools) -> None:
    port(fake_tools, "mlx5_0")
    fake_tools.tool("lsmod", LSMOD)
    fake_tools.tool("journalctl", "-- No entries --\n")
    result = run_script("gdr_status.py", fake_tools.env(NCCL_NET_GDR_LEVEL="LOC"), params())
    assert result["verdict"] == "WARN" and ("gdr_level_off", "NCCL_NET_GDR_LEVEL") in ids(result)


def test_gdr_without_module_list_is_unknown(fake_tools: FakeTools) -> None:
    port(fake_tools, "mlx5_0")
    missing(fake_tools, "lsmod")
    assert run_script("gdr_status.py", fake_tools.env(), params())["verdict"] == "UNKNOWN"


# ---- ofed_stack ---------------------------------------------------------------------------------
UCX = ("# Library version: 1.15.0\n# Configured with: --disable-logging --prefix=/build-result/"
       "hpcx-v2.17.1-gcc-MLNX_OFED_LINUX-23.10-1.1.9.0-ubuntu22.04-cuda12-x86_64/ucx --with-verbs\n")


@pytest.mark.parametrize(("ofed", "verdict"), [("MLNX_OFED_LINUX-23.10-1.1.9.0:", "PASS"),
                                               ("MLNX_OFED_LINUX-5.8-1.1.2.1:", "FAIL")])
def test_ofed_against_hpcx_build(fake_tools: FakeTools, ofed: str, verdict: str) -> None:
    fake_tools.tool("ofed_info", ofed + "\n")
    fake_tools.tool("ucx_info", UCX)
    result = run_script("ofed_stack.py", fake_tools.env(), params())
    assert result["verdict"] == verdict and result["metrics"]["hpcx_ofed"] == ["23.10-1.1.9.0"]


def test_hpcx_dir_name_is_enough(fake_tools: FakeTools) -> None:
    fake_tools.tool("ofed_info", "MLNX_OFED_LINUX-24.04-0.6.6.0:\n")
    missing(fake_tools, "ucx_info")
    fake_tools.file("/opt/hpcx-v2.17.1-gcc-MLNX_OFED_LINUX-23.10-1.1.9.0-ubuntu22.04-cuda12-x86_64/hpcx-init.sh", "")
    result = run_script("ofed_stack.py", fake_tools.env(), params())
    assert result["verdict"] == "FAIL" and result["metrics"]["ofed"] == "24.04-0.6.6.0"


def test_no_hpcx_is_unknown(fake_tools: FakeTools) -> None:
    fake_tools.tool("ofed_info", "MLNX_OFED_LINUX-23.10-1.1.9.0:\n")
    missing(fake_tools, "ucx_info")
    assert run_script("ofed_stack.py", fake_tools.env(), params())["verdict"] == "UNKNOWN"
