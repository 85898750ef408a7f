"""The `view` of a simulated host (FAULTS.md, "A realistic fleet"): which tools the person diagnosing has, which
refuse to look, and that the checks answer UNKNOWN, never FAIL or WARN, for what a view hides."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.checks.runner import CheckRunner
from agent.cli.sim_cmd import app
from agent.executors.hosts import executors_for
from agent.models import Verdict
from agent.sim.scenario import VIEWS, create_scenario, scenario_from_record
from agent.sim.state import HostState

NOT_FOUND = 127
VM_ABSENT = ["ipmitool", "dcgmi", "all_reduce_perf", "all_gather_perf", "ib_write_bw", "nvbandwidth"]
CONTAINER_ABSENT = [*VM_ABSENT, "journalctl", "systemctl", "lspci", "lsmod", "modinfo", "ibstat", "ibstatus",
                    "ibv_devinfo", "ibv_devices", "show_gids", "ofed_info", "ucx_info", "nv-fabricmanager", "docker",
                    "nvidia-ctk", "nvidia-container-cli"]
# tools every view keeps (argv)
COMMON_WORKING = [["nvidia-smi", "-L"], ["ps", "-eo", "pid,args"], ["df", "-P"],
                  ["dpkg-query", "-W", "-f", "${Package}\\n"]]


def sh(host_dir: Path, command: str) -> subprocess.CompletedProcess[str]:
    """Run a command line as a diagnosing person's shell would, with the host's environment (PATH ends in this
    machine's own /usr/bin, so a missing shim would let the real tool answer)."""
    env = {k: v for line in (host_dir / "activate").read_text().splitlines()
           for k, v in [line.removeprefix("export ").split("=", 1)]}
    env = {k: v.strip("'") for k, v in env.items()}
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("views")
    return {view: create_scenario(base / view, view=view).root for view in VIEWS}


def test_the_default_view_is_bare_metal_with_every_tool(hosts: dict[str, Path], tmp_path: Path) -> None:
    default = create_scenario(tmp_path / "default")
    assert default.view == "bare-metal"
    assert json.loads((default.root / "scenario.json").read_text())["view"] == "bare-metal"
    assert HostState.load(default.root / "host.json").view == "bare-metal"
    for command in ["ipmitool sel elist", "dcgmi nvlink -s", "journalctl -k --no-pager", "dmesg", "lspci -n",
                    "systemctl is-active nvidia-persistenced", "ibstat"]:
        done = sh(hosts["bare-metal"], command)
        assert done.returncode == 0, (command, done.stderr)
    assert (hosts["bare-metal"] / "root/var/log/kern.log").exists()


@pytest.mark.parametrize("view, absent", [("vm", VM_ABSENT), ("container", CONTAINER_ABSENT)])
def test_a_tool_the_view_lacks_is_not_found_as_a_shell_says(hosts: dict[str, Path], view: str,
                                                            absent: list[str]) -> None:
    for command in absent:
        done = sh(hosts[view], f"{command} --version")
        assert (done.returncode, done.stdout, done.stderr) == (NOT_FOUND, "", f"sh: 1: {command}: not found\n"), view


def test_a_vm_keeps_the_os_tools_and_fabric_manager_on_a_full_nvswitch_node(hosts: dict[str, Path]) -> None:
    for command in ["dmesg", "journalctl -k --no-pager", "lspci -n", "ibstat", "ofed_info -s",
                    "nv-fabricmanager --version", "systemctl is-active nvidia-fabricmanager"]:
        done = sh(hosts["vm"], command)
        assert done.returncode == 0, (command, done.stderr)
    # DCGM is not installed: its host engine is no unit of this VM
    assert "nv-hostengine" not in HostState.load(hosts["vm"] / "host.json").services


def test_a_vm_without_nvswitches_has_no_fabric_manager(tmp_path: Path) -> None:
    host = create_scenario(tmp_path / "l40s", profile="L40S", view="vm").root
    done = sh(host, "nv-fabricmanager --version")
    assert done.returncode == NOT_FOUND


def test_a_container_is_refused_the_kernel_log_and_cannot_read_the_hosts_log_files(hosts: dict[str, Path]) -> None:
    done = sh(hosts["container"], "dmesg --time-format iso")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "dmesg: read kernel buffer failed: Operation not permitted\n"
    root = hosts["container"] / "root"
    assert not (root / "var/log/kern.log").exists() and not (root / "var/log/syslog").exists()
    assert not (root / "dev/ipmi0").exists()


def test_a_container_sees_the_gpus_proc_and_sys_and_renders_as_a_container(hosts: dict[str, Path]) -> None:
    for argv in COMMON_WORKING:
        done = sh(hosts["container"], " ".join(f"'{a}'" for a in argv))
        assert done.returncode == 0, (argv, done.stderr)
    assert sh(hosts["container"], "nvidia-smi -L").stdout.count("GPU ") == 8
    root = hosts["container"] / "root"
    assert (root / ".dockerenv").exists() and "docker" in (root / "proc/1/cgroup").read_text()
    assert (root / "proc/meminfo").exists() and (root / "sys/class/infiniband").is_dir()
    state = HostState.load(hosts["container"] / "host.json")
    assert state.container.inside and state.container.nvidia_runtime and state.container.devices_cgroup_ok


def test_an_unknown_view_is_refused_with_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown view 'guest'; valid: bare-metal, vm, container"):
        create_scenario(tmp_path / "x", view="guest")
    assert not (tmp_path / "x").exists()


def test_a_records_view_is_read_and_the_cli_takes_one(tmp_path: Path) -> None:
    records = tmp_path / "r.jsonl"
    records.write_text(json.dumps({"id": "a", "faults": [], "view": "container"}) + "\n")
    assert scenario_from_record(tmp_path / "rec", records, "a").view == "container"
    assert scenario_from_record(tmp_path / "rec", records, "a", view="vm").view == "vm"
    result = CliRunner().invoke(app, ["create", str(tmp_path / "cli"), "--view", "vm"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "cli/scenario.json").read_text())["view"] == "vm"
    result = CliRunner().invoke(app, ["create", str(tmp_path / "bad"), "--view", "guest"])
    assert result.exit_code != 0 and "valid: bare-metal, vm, container" in result.output


def run_checks(root: Path) -> tuple[CheckRunner, dict[str, tuple[Verdict, str]]]:
    runner = CheckRunner(executors_for([f"sim:{root}"]), approve=True, workers=8)
    results = runner.run(runner.passive_ids(include_active=True))
    return runner, {r.check: (r.verdict, r.summary) for r in results}


@pytest.mark.parametrize("view", ["vm", "container"])
def test_a_healthy_host_seen_from_a_narrower_view_fails_and_warns_nothing(hosts: dict[str, Path],
                                                                          view: str) -> None:
    runner, results = run_checks(hosts[view])
    bad = {c: r for c, r in results.items() if r[0] in (Verdict.FAIL, Verdict.WARN)}
    assert not bad
    blind = {c for c, r in results.items() if r[0] == Verdict.UNKNOWN}
    assert {"bmc_sel", "dcgm_health", "dcgm_diag", "p2p_bw", "rdma_perftest"} <= blind
    if view == "container":
        assert {"xid_scan", "scheduler_events"} <= blind
        assert "read kernel buffer failed" in results["xid_scan"][1]
        assert runner.inventories["node-1"].platform == "container"


def test_a_gpu_fault_is_still_failed_from_inside_a_container(tmp_path: Path) -> None:
    root = create_scenario(tmp_path / "ecc", [{"fault": "gpu.ecc_uncorrectable", "gpu": 0}], view="container").root
    _, results = run_checks(root)
    failed = {c for c, r in results.items() if r[0] == Verdict.FAIL}
    assert "gpu_memory_errors" in failed


def test_a_container_without_lsmod_reads_the_hosts_modules_from_proc(hosts: dict[str, Path], tmp_path: Path) -> None:
    # kmod is not in training images, but /proc/modules is the host's: a missing peer-memory module is still seen
    assert sh(hosts["container"], "lsmod").returncode == NOT_FOUND
    modules = (hosts["container"] / "root/proc/modules").read_text()
    assert modules.startswith("nvidia ") and "\nnvidia_peermem 16384 0 - Live 0x0000000000000000 (OE)\n" in modules
    _, healthy = run_checks(hosts["container"])
    assert healthy["gdr_status"][0] == Verdict.PASS
    root = create_scenario(tmp_path / "gdr", [{"fault": "gdr.peermem_missing"}], view="container").root
    assert "nvidia_peermem" not in (root / "root/proc/modules").read_text()
    _, results = run_checks(root)
    assert results["gdr_status"][0] == Verdict.FAIL and "nvidia_peermem" in results["gdr_status"][1]
    assert results["driver_health"][0] == Verdict.PASS
