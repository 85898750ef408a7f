"""Network faults and noise on simulated hosts: each fault fails the right check with the right entity,
noise and healthy hosts do not, missing tools give UNKNOWN, and the renderers keep the real layouts."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.checks.manifest import load_profiles, profile
from agent.sim.faults import FaultError
from agent.sim.faults.network import JOB_LOG
from agent.sim.scenario import create_scenario
from agent.sim.state import HostState
from tests.conftest import fixture_text, run_script, sim_host_env

PASSIVE = ("nic_config", "ib_link_errors", "rdma_userspace", "nccl_env", "roce_config", "gdr_status", "ofed_stack")


def run(env: dict[str, str], check: str, prof: str = "H100-SXM-8", **extra: Any) -> dict[str, Any]:
    params = {"profile": profile(prof), "host": env["HOSTNAME"], "sample_s": 0.05, "server_wait_s": 0.05, **extra}
    return run_script(f"{check}.py", env, params)


def ids(result: dict[str, Any], severity: str | None = None) -> list[tuple[str, str]]:
    return [(f["id"], f["entity"]) for f in result["findings"] if severity in (None, f["severity"])]


def edit_host(env: dict[str, str], change: Callable[[HostState], None]) -> None:
    """Change a materialized host's state; the tool shims read host.json on every call."""
    path = Path(env["AIDAI_SYSROOT"]).parent / "host.json"
    host = HostState.load(path)
    change(host)
    host.save(path)


def tool(env: dict[str, str], *argv: str) -> str:
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, check=False).stdout


# ---- faults -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("fault", "check", "finding"), [
    ({"fault": "ib.port_down", "hca": "mlx5_3"}, "nic_config", ("port_down", "mlx5_3")),
    ({"fault": "ib.port_down", "hca": "mlx5_6"}, "nic_config", ("port_down", "mlx5_6")),
    ({"fault": "ib.verbs_missing"}, "rdma_userspace", ("verbs_missing", "host")),
    ({"fault": "nccl.ib_hca_bad", "value": "mlx5_1"}, "nccl_env", ("ib_hca_not_rail", "mlx5_1")),
    ({"fault": "nccl.ib_hca_bad", "value": "mlx5_0,mlx5_9"}, "nccl_env", ("ib_hca_missing", "mlx5_9")),
    ({"fault": "net.socket_ifname_bad", "var": "NCCL_SOCKET_IFNAME", "value": "eth1"}, "nccl_env",
     ("socket_ifname", "NCCL_SOCKET_IFNAME")),
    ({"fault": "net.socket_ifname_bad", "var": "NCCL_SOCKET_IFNAME", "value": "ib1"}, "nccl_env",
     ("socket_ifname", "NCCL_SOCKET_IFNAME")),
    ({"fault": "net.socket_ifname_bad", "var": "GLOO_SOCKET_IFNAME", "value": "enp0s31f6"}, "nccl_env",
     ("gloo_ifname", "GLOO_SOCKET_IFNAME")),
    ({"fault": "nccl.net_plugin_missing"}, "nccl_env", ("net_plugin_missing", "NCCL_NET_PLUGIN")),
    ({"fault": "gdr.peermem_missing"}, "gdr_status", ("peermem_missing", "nvidia_peermem")),
    ({"fault": "roce.gid_index_bad"}, "nccl_env", ("gid_index_not_v2", "mlx5_0")),
    ({"fault": "roce.gid_index_bad"}, "roce_config", ("gid_index_bad", "mlx5_0")),
    ({"fault": "roce.gid_index_bad", "index": 6}, "nccl_env", ("gid_index_absent", "mlx5_0")),
    ({"fault": "netstack.ofed_hpcx_mismatch"}, "ofed_stack", ("ofed_hpcx_mismatch", "ucx_info -v")),
])
def test_fault_fails_its_check(tmp_path: Path, fault: dict[str, Any], check: str, finding: tuple[str, str]) -> None:
    result = run(sim_host_env(tmp_path / "s", [fault]), check)
    assert result["verdict"] == "FAIL", result
    assert finding in ids(result, "FAIL")


def test_port_down_shows_everywhere_it_should(tmp_path: Path) -> None:
    env = sim_host_env(tmp_path / "s", [{"fault": "ib.port_down", "hca": "mlx5_3"}])
    flaps = run(env, "ib_link_errors")
    assert flaps["verdict"] == "WARN" and ("carrier_lost", "mlx5_3") in ids(flaps, "WARN")
    assert "State: Down" in tool(env, "ibstat", "mlx5_3") and "Physical state: Polling" in tool(env, "ibstat")
    assert "PORT_DOWN (1)" in tool(env, "ibv_devinfo", "-d", "mlx5_3")
    assert "NO-CARRIER" in tool(env, "ip", "-o", "link", "show", "ib2")
    for check in ("rdma_userspace", "nccl_env", "gdr_status", "ofed_stack", "roce_config"):
        assert run(env, check)["verdict"] == "PASS", check


def test_roce_mtu_mismatch_on_node_2_only(tmp_path: Path) -> None:
    faults = [{"fault": "roce.mtu_mismatch", "host": "node-2"}]
    node1 = sim_host_env(tmp_path / "s", faults, hosts=["node-1", "node-2"])
    node2 = sim_host_env(tmp_path / "t", faults, hosts=["node-1", "node-2"], host="node-2")
    first, second = run(node1, "roce_config"), run(node2, "roce_config")
    assert first["verdict"] == "PASS" and first["metrics"]["active_mtu"] == 4096
    assert second["verdict"] == "WARN" and second["metrics"]["active_mtu"] == 1024
    assert ("mtu_low", "mlx5_0") in ids(second, "WARN")
    nic = run(node2, "nic_config")  # the rails became RoCE consistently: still 8 healthy data ports
    assert nic["verdict"] == "PASS" and nic["metrics"]["link_layer"] == "Ethernet"
    assert run(node2, "nccl_env")["verdict"] == "PASS"  # NCCL_IB_GID_INDEX=3 is a RoCE v2 IPv4 GID


def test_fault_job_log_symptoms(tmp_path: Path) -> None:
    env = sim_host_env(tmp_path / "s", [{"fault": "nccl.ib_hca_bad"}])
    log = (Path(env["AIDAI_SYSROOT"]) / JOB_LOG.lstrip("/")).read_text()
    assert "NCCL WARN NET/IB : Unable to open device mlx5_1" in log and "Using network Socket" in log


@pytest.mark.parametrize(("fault", "message"), [
    ({"fault": "ib.port_down", "hca": "mlx5_99"}, "valid: mlx5_0"),
    ({"fault": "ib.port_down", "hca": "mlx5_1"}, "not a GPU rail"),
    ({"fault": "net.socket_ifname_bad", "value": "eth0"}, "usable here: lo, eth0"),
    ({"fault": "nccl.ib_hca_bad", "value": "mlx5_0"}, "selects only GPU rails"),
    ({"fault": "roce.gid_index_bad", "index": 3}, "is a RoCE v2 GID"),
    ({"fault": "roce.mtu_mismatch", "mtu": 4096}, "must be one of"),
    ({"fault": "netstack.ofed_hpcx_mismatch", "ofed": "MLNX_OFED_LINUX-23.10-2.1.3.1"}, "other than"),
])
def test_bad_fault_params_are_errors(tmp_path: Path, fault: dict[str, Any], message: str) -> None:
    with pytest.raises(FaultError, match=message):
        create_scenario(tmp_path / "s", [fault])


# ---- healthy hosts and noise --------------------------------------------------------------------
@pytest.mark.parametrize("prof", sorted(load_profiles()))
def test_healthy_host_passes_every_network_check(tmp_path: Path, prof: str) -> None:
    env = sim_host_env(tmp_path / "s", profile=prof)
    # a host without RDMA NICs cannot show what the RDMA checks look at: they answer UNKNOWN, never FAIL
    allowed = {"PASS"} if profile(prof)["hca_count"] else {"PASS", "UNKNOWN"}
    for check in PASSIVE:
        result = run(env, check, prof)
        assert result["verdict"] in allowed, (check, result["summary"])


@pytest.mark.parametrize("nid", ["noise.ib_symbol_errors", "noise.mlx5_power_msg", "noise.nccl_benign_warn"])
def test_noise_does_not_fail(tmp_path: Path, nid: str) -> None:
    env = sim_host_env(tmp_path / "s", noise=[{"fault": nid}])
    results = {check: run(env, check) for check in PASSIVE}
    assert all(r["verdict"] == "PASS" for r in results.values()), {c: r["summary"] for c, r in results.items()}
    if nid == "noise.ib_symbol_errors":
        assert any(i == "counter_nonzero" for i, _ in ids(results["ib_link_errors"], "INFO"))
    if nid == "noise.mlx5_power_msg":
        assert results["ib_link_errors"]["metrics"]["benign_mlx5_messages"] >= 1
    if nid == "noise.nccl_benign_warn":
        assert "NCCL WARN Could not find real path" in (Path(env["AIDAI_SYSROOT"]) / JOB_LOG.lstrip("/")).read_text()


# ---- active checks ------------------------------------------------------------------------------
def test_active_checks_pass_on_a_healthy_host(tmp_path: Path) -> None:
    env = sim_host_env(tmp_path / "s")
    perf = run(env, "rdma_perftest")
    assert perf["verdict"] == "PASS" and min(perf["metrics"]["bw_gbps"].values()) > 380
    intra = run(env, "nccl_intranode")
    assert intra["verdict"] == "PASS" and intra["metrics"]["busbw"] > 460
    inter = run(env, "nccl_internode")
    assert inter["verdict"] == "PASS" and inter["metrics"]["gdrdma"] and inter["metrics"]["transports"] == ["IBext"]


def test_active_checks_see_a_down_port(tmp_path: Path) -> None:
    env = sim_host_env(tmp_path / "s", [{"fault": "ib.port_down", "hca": "mlx5_3"}])
    perf = run(env, "rdma_perftest")
    assert perf["verdict"] == "FAIL" and ("port_down", "mlx5_3") in ids(perf, "FAIL")
    inter = run(env, "nccl_internode")
    assert inter["verdict"] == "FAIL" and ("busbw_low", "node-1") in ids(inter, "FAIL")


def test_active_checks_see_missing_gdr(tmp_path: Path) -> None:
    env = sim_host_env(tmp_path / "s", [{"fault": "gdr.peermem_missing"}])
    assert ("gdr_unavailable", "nvidia_peermem") in ids(run(env, "rdma_perftest"), "WARN")
    inter = run(env, "nccl_internode")
    assert inter["verdict"] == "FAIL" and ("no_gdrdma", "node-1") in ids(inter, "WARN")
    cuda = subprocess.run(["ib_write_bw", "-d", "mlx5_0", "--use_cuda=0", "localhost"], env=env,
                          capture_output=True, text=True, check=False)
    assert cuda.returncode == 1 and "Couldn't allocate MR" in cuda.stderr


def test_internode_sees_the_control_plane_hca(tmp_path: Path) -> None:
    inter = run(sim_host_env(tmp_path / "s", [{"fault": "nccl.ib_hca_bad"}]), "nccl_internode")
    assert inter["verdict"] == "FAIL"
    assert {("ib_device_unusable", "mlx5_1"), ("net_socket", "node-1")} <= set(ids(inter, "FAIL"))


def test_intranode_follows_nvlink_and_acs(tmp_path: Path) -> None:
    env = sim_host_env(tmp_path / "s")

    def two_links_down(host: HostState) -> None:
        host.gpus[2].nvlink[0] = host.gpus[2].nvlink[1] = None

    edit_host(env, two_links_down)
    degraded = run(env, "nccl_intranode")
    assert degraded["verdict"] == "FAIL" and 400 < degraded["metrics"]["busbw"] < 460

    def no_nvlink_acs_on(host: HostState) -> None:
        for gpu in host.gpus:
            gpu.nvlink = [None] * len(gpu.nvlink)
        for switch in host.pcie_switches:
            switch.acs_src_valid = True

    edit_host(env, no_nvlink_acs_on)
    hang = run(env, "nccl_intranode")
    assert hang["verdict"] == "FAIL" and [i for i, _ in ids(hang, "FAIL")] == ["hang"]


def test_missing_tools_are_unknown(tmp_path: Path) -> None:
    env = sim_host_env(tmp_path / "s")
    edit_host(env, lambda h: h.software.missing_tools.extend(["all_reduce_perf", "ib_write_bw", "lsmod",
                                                               "ibv_devinfo"]))
    for check in ("nccl_intranode", "nccl_internode", "rdma_perftest", "roce_config"):
        assert run(env, check)["verdict"] == "UNKNOWN", check


# ---- renderer layouts vs. the real samples --------------------------------------------------------
def keys(text: str, start: str) -> list[str]:
    """Field names of the first block starting at `start`, in order."""
    block = text[text.index(start):].split("\n\n")[0].splitlines()
    return [line.split(":")[0].strip() for line in block[1:] if ":" in line][:16]


def test_rendered_layouts_match_real_samples(tmp_path: Path) -> None:
    env = sim_host_env(tmp_path / "s")
    real_ibstat = fixture_text("net", "gpud_ibstat.47.0.h100.some.down.0.txt")
    assert keys(tool(env, "ibstat"), "CA 'mlx5_0'") == keys(real_ibstat, "CA 'mlx5_0'")
    real_status = fixture_text("net", "gpud_ibstatus.39.0.a100.all.active.0.txt")
    assert keys(tool(env, "ibstatus"), "Infiniband") == keys(real_status, "Infiniband")
    real_link = json.loads(fixture_text("net", "gcm_ip_json_ib_interfaces_fail.json"))[0]
    sim_link = next(x for x in json.loads(tool(env, "ip", "-j", "link")) if x["link_type"] == "infiniband")
    assert set(real_link) - {"vfinfo_list"} == set(sim_link)
    real_nccl = fixture_text("net", "gcm_nccltests_all_reduce_a100_8gpu_pass.log")
    sim_nccl = tool(env, "all_reduce_perf", "-b", "1G", "-e", "1G", "-g", "8")
    header = [line for line in real_nccl.splitlines() if line.startswith("#") and "busbw" in line]
    assert header and header[0] in sim_nccl.splitlines()
    row = next(line for line in sim_nccl.splitlines() if line.strip().startswith("1073741824"))
    real_row = next(line for line in real_nccl.splitlines() if line.strip().startswith("1073741824"))
    assert len(row) == len(real_row) and row.index("float") == real_row.index("float")
