"""GPU faults on simulated hosts: each makes the right check FAIL on the right GPU, noise and healthy hosts
stay clean, missing tools give UNKNOWN, and the renderers agree with each other and with real formats."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agent.checks.manifest import profile as load_profile
from agent.sim import tools
from agent.sim.faults import FaultError
from agent.sim.scenario import build_hosts, materialize_host, sim_env
from agent.sim.state import HostState
from tests.conftest import FakeTools, run_script, sim_host_env

PASSIVE = ["gpu_inventory", "driver_health", "fabric_manager", "xid_scan", "gpu_memory_errors", "nvlink_status",
           "topology", "pcie_link", "clocks_thermal_power", "dcgm_health", "gpu_processes"]
ACTIVE = ["dcgm_diag", "host_device_bw", "p2p_bw"]


def params(profile: str = "H100-SXM-8") -> dict[str, Any]:
    return {"profile": load_profile(profile), "host": "node-1", "window_s": 7200}


def run_checks(env: dict[str, str], checks: list[str], profile: str = "H100-SXM-8") -> dict[str, dict[str, Any]]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = pool.map(lambda c: run_script(f"{c}.py", env, params(profile)), checks)
    return dict(zip(checks, results, strict=True))


def failing(result: dict[str, Any]) -> set[tuple[str, str]]:
    return {(f["id"], f["entity"]) for f in result["findings"] if f["severity"] == "FAIL"}


# fault spec, check, expected verdict, a (finding id, entity) it must report
CASES = [
    ({"fault": "gpu.ecc_uncorrectable"}, "gpu_memory_errors", "FAIL", ("ecc_uncorrectable", "GPU3")),
    ({"fault": "gpu.ecc_uncorrectable", "gpu": 5}, "xid_scan", "FAIL", ("xid_48", "GPU5")),
    ({"fault": "gpu.row_remap_pending"}, "gpu_memory_errors", "FAIL", ("row_remap_pending", "GPU3")),
    ({"fault": "gpu.row_remap_failure"}, "gpu_memory_errors", "FAIL", ("row_remap_failure", "GPU3")),
    ({"fault": "gpu.row_remap_failure"}, "xid_scan", "FAIL", ("xid_64", "GPU3")),
    ({"fault": "gpu.ecc_contained", "gpu": 2}, "xid_scan", "WARN", ("xid_94", "GPU2")),  # NVIDIA: restart the app
    ({"fault": "gpu.ecc_contained", "kind": "uncontained"}, "xid_scan", "FAIL", ("xid_95", "GPU3")),
    ({"fault": "gpu.inforom_corrupt"}, "gpu_inventory", "FAIL", ("inforom_corrupt", "GPU3")),
    ({"fault": "gpu.inforom_corrupt"}, "gpu_memory_errors", "FAIL", ("inforom_corrupt", "GPU3")),
    ({"fault": "gpu.fallen_off_bus"}, "gpu_inventory", "FAIL", ("gpu_fallen_off_bus", "GPU3")),
    ({"fault": "gpu.fallen_off_bus"}, "xid_scan", "FAIL", ("xid_79", "GPU3")),
    ({"fault": "gpu.fallen_off_bus"}, "pcie_link", "FAIL", ("gpu_fallen_off_bus", "GPU3")),
    ({"fault": "gpu.missing"}, "gpu_inventory", "FAIL", ("missing_gpu", "0000:5d:00")),
    ({"fault": "gpu.faulty"}, "dcgm_health", "FAIL", ("dcgm_driver", "GPU3")),
    # DCGM_FR_MEMORY_MISMATCH: corruption no ECC counter saw, the GPU's fault rather than an ECC event
    ({"fault": "gpu.faulty", "xid": 0}, "dcgm_diag", "FAIL", ("diag_gpu_memory_mismatch", "GPU3")),
    ({"fault": "gpu.slow"}, "clocks_thermal_power", "WARN", None),
    ({"fault": "gpu.power_brake"}, "clocks_thermal_power", "FAIL", ("power_brake", "GPU3")),
    ({"fault": "gpu.thermal_throttle", "gpu": 6}, "clocks_thermal_power", "FAIL", ("overheating", "GPU6")),
    ({"fault": "driver.library_mismatch"}, "driver_health", "FAIL", ("library_mismatch", "node-1")),
    ({"fault": "driver.module_not_loaded"}, "driver_health", "FAIL", ("module_not_loaded", "nvidia")),
    ({"fault": "driver.device_nodes_missing"}, "driver_health", "FAIL", ("device_nodes_missing",
                                                                          "/dev/nvidiactl,/dev/nvidia0")),
    ({"fault": "driver.device_nodes_missing", "nodes": "uvm"}, "driver_health", "FAIL",
     ("device_nodes_missing", "/dev/nvidia-uvm")),
    ({"fault": "driver.persistence_off"}, "driver_health", "FAIL", None),
    ({"fault": "driver.uvm_corrupt"}, "driver_health", "FAIL", ("uvm_errors", "nvidia_uvm")),
    ({"fault": "driver.gsp_bug"}, "xid_scan", "FAIL", ("xid_119", "GPU4")),
    ({"fault": "fabricmanager.down"}, "fabric_manager", "FAIL", ("fm_not_running", "nvidia-fabricmanager")),
    ({"fault": "fabricmanager.down", "reason": "version_mismatch"}, "fabric_manager", "FAIL",
     ("fm_version_mismatch", "nvidia-fabricmanager")),
    ({"fault": "nvlink.link_down", "gpu": 2, "links": [0, 5]}, "nvlink_status", "FAIL", ("nvlink_inactive", "GPU2")),
    ({"fault": "nvlink.link_down"}, "topology", "FAIL", ("nvlink_degraded", "GPU3")),
    ({"fault": "nvlink.link_down"}, "p2p_bw", "FAIL", ("p2p_low_gpu", "GPU3")),
    ({"fault": "nvlink.not_enabled"}, "nvlink_status", "FAIL", ("nvlink_not_active", "node-1")),
    ({"fault": "nvlink.not_enabled"}, "topology", "FAIL", ("nvlink_not_enabled", "node-1")),
    ({"fault": "pcie.link_degraded"}, "pcie_link", "FAIL", ("pcie_width_degraded", "GPU3")),
    ({"fault": "pcie.link_degraded"}, "host_device_bw", "FAIL", ("low_bandwidth", "GPU3")),
    ({"fault": "pcie.acs_enabled"}, "p2p_bw", "FAIL", ("p2p_redirected", "node-1")),
    ({"fault": "topology.misdetected"}, "topology", "FAIL", ("topology_misdetected", "node-1")),
    ({"fault": "user.batch_oom"}, "gpu_processes", "FAIL", ("batch_oom", "GPU0")),
    ({"fault": "user.device_assignment"}, "gpu_processes", "FAIL", ("device_assignment", "GPU0")),
    ({"fault": "user.checkpoint_gpu0"}, "gpu_processes", "FAIL", ("checkpoint_gpu0", "GPU0")),
    ({"fault": "user.mig_misuse"}, "gpu_processes", "FAIL", ("mig_misuse", "CUDA_VISIBLE_DEVICES")),
    ({"fault": "user.illegal_memory_access"}, "xid_scan", "WARN", None),
]


@pytest.mark.parametrize(("spec", "check", "verdict", "finding"), CASES,
                         ids=[f"{c[0]['fault']}-{c[1]}" for c in CASES])
def test_fault_seen_by_check(tmp_path: Path, spec: dict[str, Any], check: str, verdict: str,
                             finding: tuple[str, str] | None) -> None:
    env = sim_host_env(tmp_path / "s", [spec])
    result = run_script(f"{check}.py", env, params())
    assert result["verdict"] == verdict, result
    if finding is not None:
        assert finding in {(f["id"], f["entity"]) for f in result["findings"]}, result["findings"]


def test_illegal_memory_access_is_the_applications(tmp_path: Path) -> None:
    env = sim_host_env(tmp_path / "s", [{"fault": "user.illegal_memory_access", "xid": 13}])
    results = run_checks(env, ["xid_scan", "gpu_memory_errors", "dcgm_health", "gpu_inventory"])
    assert ("xid_app", "GPU3") in {(f["id"], f["entity"]) for f in results["xid_scan"]["findings"]}
    assert results["xid_scan"]["metrics"]["xids"] == {"13": ["GPU3"], "43": ["GPU3"]}
    assert all(results[c]["verdict"] == "PASS" for c in ("gpu_memory_errors", "dcgm_health", "gpu_inventory"))


@pytest.mark.parametrize("profile", ["H100-SXM-8", "H200-SXM-8", "A100-SXM-8"])
def test_healthy_profiles_pass(tmp_path: Path, profile: str) -> None:
    env = sim_host_env(tmp_path / "s", profile=profile)
    results = run_checks(env, PASSIVE + (ACTIVE if profile == "A100-SXM-8" else []), profile)
    assert {c: r["verdict"] for c, r in results.items() if r["verdict"] != "PASS"} == {}


# noise -> the checks that read what it changes (the acceptance matrix runs every check on each noise)
NOISE_CHECKS = {"noise.old_xid13": ["xid_scan", "dcgm_health", "driver_health"],
                "noise.correctable_ecc": ["gpu_memory_errors", "dcgm_health", "gpu_inventory"],
                "noise.idle_clocks": ["clocks_thermal_power", "dcgm_health", "pcie_link", "gpu_processes"]}


@pytest.mark.parametrize("nid", sorted(NOISE_CHECKS))
def test_noise_never_fails(tmp_path: Path, nid: str) -> None:
    env = sim_host_env(tmp_path / "s", noise=[{"fault": nid}])
    results = run_checks(env, NOISE_CHECKS[nid])
    assert {c: r["summary"] for c, r in results.items() if r["verdict"] == "FAIL"} == {}
    if nid == "noise.old_xid13":
        everything = run_script("xid_scan.py", env, {**params(), "window_s": 0})
        assert everything["metrics"]["xids"] == {"13": ["GPU1"]}


def materialized(tmp_path: Path, state: HostState) -> dict[str, str]:
    materialize_host(state, tmp_path / "h")
    env = sim_env(tmp_path / "h", state)
    env.update({"LANG": "C.UTF-8", "HOME": os.environ.get("HOME", "/root")})
    return env


def test_missing_tools_give_unknown(tmp_path: Path) -> None:
    (state,) = build_hosts([], [], hosts=["node-1"])
    state.driver.installed = False
    state.fabric_manager.installed = False
    state.software.packages.clear()
    results = run_checks(materialized(tmp_path, state), ["gpu_inventory", "driver_health", "gpu_memory_errors",
                                                         "nvlink_status", "topology", "clocks_thermal_power",
                                                         "dcgm_health", "gpu_processes", "host_device_bw"])
    assert {c: r["verdict"] for c, r in results.items()} == {c: "UNKNOWN" for c in results}


def test_hostengine_down_gives_unknown_but_diag_runs(tmp_path: Path) -> None:
    (state,) = build_hosts([{"fault": "gpu.ecc_uncorrectable"}], [], hosts=["node-1"])
    state.services["nv-hostengine"] = "inactive"
    env = materialized(tmp_path, state)
    results = run_checks(env, ["dcgm_health", "dcgm_diag"])
    assert results["dcgm_health"]["verdict"] == "UNKNOWN"
    assert results["dcgm_diag"]["verdict"] == "FAIL"  # dcgmi diag starts an embedded host engine


def test_dcgm4_json_and_health_text_parse(tmp_path: Path, fake_tools: FakeTools) -> None:
    (state,) = build_hosts([{"fault": "gpu.row_remap_pending", "gpu": 1}, {"fault": "pcie.link_degraded", "gpu": 2}],
                           [], hosts=["node-1"])
    state.software.packages["datacenter-gpu-manager"] = "1:4.2.3"
    module = __import__("agent.sim.tools.dcgmi", fromlist=["run"])
    modern = module.run(state, ["dcgmi", "diag", "-r", "2", "-j"]).stdout
    assert '"DCGM Diagnostic"' in modern and '"entity_id"' in modern
    fake_tools.tool("dcgmi", modern, rc=226)
    result = run_script("dcgm_diag.py", fake_tools.env(), {})
    assert {("diag_memory", "GPU1"), ("diag_pcie_link", "GPU2")} <= failing(result)
    fake_tools.tool("dcgmi", module.run(state, ["dcgmi", "health", "-g", "0", "-c"]).stdout)
    health = run_script("dcgm_health.py", fake_tools.env(), {})
    assert health["verdict"] == "WARN"
    assert {(f["id"], f["entity"]) for f in health["findings"]} == {("dcgm_memory", "GPU1"), ("dcgm_pcie", "GPU2")}


def test_renderers_agree_on_a_missing_gpu(tmp_path: Path) -> None:
    (state,) = build_hosts([{"fault": "gpu.missing", "gpu": 2}], [], hosts=["node-1"])
    mods = {name: __import__(f"agent.sim.tools.{name}", fromlist=["run"]) for name in ("lspci", "nvidia_smi")}
    lspci = mods["lspci"].run(state, ["lspci", "-d", "10de:", "-nn"]).stdout
    listing = mods["nvidia_smi"].run(state, ["nvidia-smi", "-L"]).stdout
    assert lspci.count("3D controller [0302]") == 8 and lspci.count("[10de:22a3]") == 4
    assert listing.count("GPU ") == 7 and "GPU 6:" in listing and "GPU 7:" not in listing


def test_lspci_acs_and_downgrade_render(tmp_path: Path) -> None:
    (state,) = build_hosts([{"fault": "pcie.link_degraded", "gpu": 0}], [], hosts=["node-1"])
    state.pcie_switches[1].acs_src_valid = True
    lspci = __import__("agent.sim.tools.lspci", fromlist=["run"])
    text = lspci.run(state, ["lspci", "-vvv"]).stdout
    assert text.count("ACSCtl:\tSrcValid+") == 1 and text.count("ACSCtl:\tSrcValid-") == 7
    assert "LnkSta:\tSpeed 32GT/s, Width x8 (downgraded)" in text
    assert lspci.run(state, ["lspci", "-vvv", "-s", "18:00.0"]).stdout.count("\n\n") == 1


def test_nvidia_smi_default_table_layout() -> None:
    (state,) = build_hosts([{"fault": "user.batch_oom"}], [], hosts=["node-1"])
    module = __import__("agent.sim.tools.nvidia_smi", fromlist=["run"])
    lines = module.run(state, ["nvidia-smi"]).stdout.splitlines()
    assert {len(line) for line in lines[1:] if line} == {91}
    assert sum(1 for line in lines if "/usr/bin/python3.10" in line) == 8


def test_driver_error_modes() -> None:
    module = __import__("agent.sim.tools.nvidia_smi", fromlist=["run"])
    for fault, text, rc in (("driver.library_mismatch", "Driver/library version mismatch", 18),
                            ("driver.module_not_loaded", "couldn't communicate with the NVIDIA driver", 9),
                            ("gpu.fallen_off_bus", "Unable to determine the device handle for GPU00000000:5D:00.0: "
                                                   "Unknown Error", 15)):
        (state,) = build_hosts([{"fault": fault}], [], hosts=["node-1"])
        out = module.run(state, ["nvidia-smi", "--query-gpu=index", "--format=csv"])
        assert text in out.stdout and out.rc == rc, (fault, out)


def test_files_follow_driver_state() -> None:
    module = __import__("agent.sim.tools.nvidia_smi", fromlist=["files"])
    (healthy,) = build_hosts([], [], hosts=["node-1"])
    files = module.files(healthy)
    assert "535.161.08" in files["/proc/driver/nvidia/version"] and "/dev/nvidia7" in files
    (unloaded,) = build_hosts([{"fault": "driver.module_not_loaded"}], [], hosts=["node-1"])
    assert module.files(unloaded) == {}
    assert not any("NVRM: loading" in line.text for line in unloaded.journal)


def test_bad_params_name_the_valid_ones() -> None:
    with pytest.raises(FaultError, match=r"no GPU 9 \(GPUs: \[0, 1, 2, 3, 4, 5, 6, 7\]\)"):
        build_hosts([{"fault": "gpu.ecc_uncorrectable", "gpu": 9}], [])
    with pytest.raises(FaultError, match=r"links 0\.\.17"):
        build_hosts([{"fault": "nvlink.link_down", "links": [18]}], [])
    with pytest.raises(FaultError, match="valid: not_running, version_mismatch"):
        build_hosts([{"fault": "fabricmanager.down", "reason": "crashed"}], [])


def test_gpu_commands_have_one_renderer() -> None:
    mapping = tools.command_map()
    for command in ("nvidia-smi", "dcgmi", "lspci", "nvbandwidth", "nv-fabricmanager"):
        assert mapping[command].startswith("agent.sim.tools.")


def test_state_round_trips(tmp_path: Path) -> None:
    (state,) = build_hosts([{"fault": "user.mig_misuse"}, {"fault": "nvlink.link_down"}], [], hosts=["node-1"])
    state.save(tmp_path / "host.json")
    again = HostState.load(tmp_path / "host.json")
    assert again.gpus[0].mig_profile == state.gpus[0].mig_profile and again.gpus[3].nvlink[6] is None
    assert json.loads((tmp_path / "host.json").read_text())["env"]["CUDA_VISIBLE_DEVICES"].startswith("MIG-")
