"""System/framework/user-stack faults on simulated hosts: each makes the right check FAIL on the right entity,
healthy hosts and noise make none FAIL, missing tools give UNKNOWN, and the simulated torch raises real errors."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.checks.manifest import load_known_bad, profile
from agent.sim import tools
from agent.sim.scenario import build_hosts, create_scenario, materialize_host, sim_env
from agent.sim.state import HostState
from tests.conftest import run_script

KNOWN_BAD = load_known_bad()
MY_CHECKS = ["system_config", "cuda_exec", "framework_versions", "container_runtime", "stack_dump", "bmc_sel",
             "host_memory", "node_provisioning", "scheduler_events", "storage_purge", "gpu_exec"]


def host_env(root: Path, faults: list[dict[str, Any]] | None = None, noise: list[dict[str, Any]] | None = None,
             prof: str = "H100-SXM-8", mutate: Callable[[HostState], None] | None = None) -> dict[str, str]:
    """One simulated host (optionally edited after its faults) and the environment its checks run with."""
    state = build_hosts(list(faults or []), list(noise or []), prof)[0]
    if mutate:
        mutate(state)
    materialize_host(state, root / "host")
    env = sim_env(root / "host", state)
    env.update({"LANG": "C.UTF-8", "HOME": os.environ.get("HOME", "/root")})
    return env


def check(name: str, env: dict[str, str], prof: str = "H100-SXM-8", **extra: Any) -> dict[str, Any]:
    params = {"profile": profile(prof), "host": "node-1", "known_bad": KNOWN_BAD, "sample_interval_s": 0.01, **extra}
    return run_script(f"{name}.py", env, params)


def fails(result: dict[str, Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in result["findings"]:
        if f["severity"] == "FAIL":
            out.setdefault(f["id"], set()).add(f["entity"])
    return out


ALL_GPUS = ",".join(f"GPU{i}" for i in range(8))
FAULT_CASES: list[tuple[dict[str, Any], list[tuple[str, str, str | None]]]] = [
    ({"fault": "driver.cuda_too_old", "driver": "410.48", "cuda": "10.1"},
     [("cuda_exec", "driver_insufficient", "host"), ("framework_versions", "driver_too_old", "driver 410.48")]),
    ({"fault": "driver.known_bug"}, [("framework_versions", "known_bad_driver", "driver 560.35.03")]),
    ({"fault": "cuda.arch_unsupported", "arch": "sm_86"},
     [("cuda_exec", "no_kernel_image", "GPU0"), ("framework_versions", "arch_unsupported", ALL_GPUS)]),
    ({"fault": "cuda.host_vm_mismatch"},
     [("cuda_exec", "invalid_device_ordinal", "GPU7"), ("framework_versions", "host_vm_cuda_mismatch", "container")]),
    ({"fault": "container.cgroup_access_lost"},
     [("container_runtime", "cgroup_device_access_lost", "devices cgroup")]),
    ({"fault": "container.runtime_not_configured"}, [("container_runtime", "runtime_not_configured", "docker")]),
    ({"fault": "container.toolkit_regression"},
     [("container_runtime", "version_regression", "nvidia-container-toolkit 1.17.7")]),
    ({"fault": "os.memlock_limited"}, [("system_config", "memlock", "ulimit -l")]),
    ({"fault": "fw.nccl_regression", "version": "2.20"}, [("framework_versions", "known_bad_nccl", "NCCL 2.20.5")]),
    ({"fault": "fw.torch_nccl_conflict"}, [("framework_versions", "nccl_library_conflict", "libnccl")]),
    ({"fault": "fw.dataloader_deadlock"}, [("stack_dump", "dataloader_deadlock", "pid 48213")]),
    ({"fault": "fw.deepspeed_bug", "version": "master"},
     [("framework_versions", "known_bad_deepspeed", "DeepSpeed 0.13.2+fa0c9a7")]),
    ({"fault": "fw.accelerate_bug"}, [("framework_versions", "known_bad_accelerate", "Accelerate 0.23.0")]),
    ({"fault": "user.shm_small", "size": "64M"}, [("system_config", "shm_small", "/dev/shm")]),
    ({"fault": "user.rank0_only_work"}, [("stack_dump", "rank0_only_work", "rank 0 (pid 51210)")]),
    ({"fault": "user.error_path_hang"}, [("stack_dump", "error_path_hang", "rank 3 (pid 60113)")]),
    ({"fault": "host.memory_fault"}, [("host_memory", "edac_uncorrected", "CPU_SrcID#0_MC#0_Chan#1_DIMM#0")]),
    ({"fault": "host.hardware_fault"}, [("bmc_sel", "board_critical", "Processor CPU1_Status")]),
    ({"fault": "host.power_event"}, [("bmc_sel", "power_loss", "Power Unit Pwr_Unit_Status")]),
    ({"fault": "facility.thermal_shutdown"}, [("bmc_sel", "thermal_shutdown", "Temperature Inlet_Temp")]),
    ({"fault": "node.not_provisioned"}, [("node_provisioning", "node_not_provisioned", "host")]),
    ({"fault": "scheduler.policy_kill"}, [("scheduler_events", "policy_kill", "job 127017")]),
    ({"fault": "storage.files_purged", "path": "/scratch/data"}, [("storage_purge", "files_purged", "/scratch/data")]),
    ({"fault": "pcie.acs_enabled"}, [("system_config", "acs_src_valid", None)]),
    # GPU-side faults the probes of this domain must see too
    ({"fault": "gpu.faulty", "gpu": 2}, [("gpu_exec", "sdc_mismatch", "GPU2")]),
    ({"fault": "gpu.slow", "gpu": 5}, [("gpu_exec", "straggler", "GPU5")]),
    ({"fault": "gpu.ecc_uncorrectable", "gpu": 7}, [("cuda_exec", "ecc_uncorrectable", "GPU7")]),
    ({"fault": "fabricmanager.down"}, [("cuda_exec", "fabric_not_initialized", "host")]),
    ({"fault": "driver.uvm_corrupt"}, [("cuda_exec", "cuda_unknown_error", "host")]),
]


@pytest.mark.parametrize(("spec", "expect"), FAULT_CASES, ids=[c[0]["fault"] for c in FAULT_CASES])
def test_fault_fails_its_check(tmp_path: Path, spec: dict[str, Any], expect: list[tuple[str, str, str | None]]) -> None:
    if any(name == "system_config" for name, _f, _e in expect) and "lspci" not in tools.command_map():
        pytest.skip("no lspci renderer in this tree")
    env = host_env(tmp_path, [spec])
    for name, fid, entity in expect:
        result = check(name, env, samples=1)
        found = fails(result)
        assert result["verdict"] == "FAIL" and fid in found, result
        if entity is not None:
            assert entity in found[fid], found


def test_version_skew_shows_in_compared_metrics(tmp_path: Path) -> None:
    scenario = create_scenario(tmp_path / "scn", [{"fault": "fw.nccl_version_skew"}], hosts=["node-1", "node-2"])
    metrics = []
    for state in scenario.hosts:
        env = {**sim_env(scenario.host_dir(state.hostname), state), "HOME": os.environ.get("HOME", "/root")}
        result = check("framework_versions", env)
        assert result["verdict"] == "PASS", result
        metrics.append({k: result["metrics"][k] for k in ("torch", "nccl", "driver")})
    assert metrics[0]["nccl"] == "2.18.5" and metrics[1]["nccl"] == "2.14.3"
    assert metrics[0]["torch"] != metrics[1]["torch"] and metrics[0]["driver"] == metrics[1]["driver"]


@pytest.mark.parametrize("prof", ["H100-SXM-8", "H200-SXM-8", "A100-SXM-8"])
def test_healthy_host_has_no_fail(tmp_path: Path, prof: str) -> None:
    env = host_env(tmp_path, prof=prof)
    # only the GPU probes depend on the SKU; the OS checks run once
    for name in MY_CHECKS if prof == "H100-SXM-8" else ["cuda_exec", "framework_versions", "gpu_exec"]:
        result = check(name, env, prof)
        assert result["verdict"] not in ("FAIL", "WARN"), result


@pytest.mark.parametrize("nid", ["noise.old_sel_psu", "noise.host_correctable_ecc"])
def test_system_noise_has_no_fail(tmp_path: Path, nid: str) -> None:
    env = host_env(tmp_path, noise=[{"fault": nid}])
    for name in ("bmc_sel", "host_memory", "scheduler_events"):
        assert check(name, env)["verdict"] == "PASS"


def test_missing_tools_give_unknown(tmp_path: Path) -> None:
    def strip(state: HostState) -> None:
        state.software.missing_tools += ["py-spy", "ipmitool"]
    env = host_env(tmp_path, [{"fault": "user.rank0_only_work"}], mutate=strip)
    for name in ("stack_dump", "bmc_sel"):
        result = check(name, env)
        assert result["verdict"] == "UNKNOWN" and "not found" in result["summary"], result


def test_no_bmc_device_and_no_checkpoint_dir_give_unknown(tmp_path: Path) -> None:
    def no_ipmi(state: HostState) -> None:
        state.software.bmc_device = False
    env = host_env(tmp_path, mutate=no_ipmi)
    assert "Could not open device" in check("bmc_sel", env)["summary"]
    assert check("checkpoint_load", env)["verdict"] == "UNKNOWN"


def test_fault_params_are_validated() -> None:
    from agent.sim.faults import FaultError

    for spec in ({"fault": "driver.known_bug", "version": "latest"},
                 {"fault": "driver.cuda_too_old", "driver": "535.161.08", "cuda": "12.1"},
                 {"fault": "user.shm_small", "size": "8G"}, {"fault": "cuda.arch_unsupported", "arch": "ampere"},
                 {"fault": "fw.nccl_regression", "version": "two"}):
        with pytest.raises(FaultError):
            build_hosts([spec], [])
    # a release no catalogue lists as bad is still a real case: it renders as named (FAULTS.md)
    (host,) = build_hosts([{"fault": "fw.nccl_regression", "version": "2.18.3"}], [])
    assert host.software.nccl == "2.18.3"


# ---- the simulated torch and the renderers ------------------------------------------------------------------------
def py(env: dict[str, str], code: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["python3", "-c", code], env={**env, **extra_env}, capture_output=True, text=True,
                          timeout=60)


def test_fake_torch_reports_the_host(tmp_path: Path) -> None:
    env = host_env(tmp_path)
    code = ("import json, torch, importlib.metadata as m; c = torch.cuda; print(json.dumps([torch.__version__, "
            "torch.version.cuda, c.device_count(), c.get_device_capability(0), c.get_arch_list(), c.nccl.version(), "
            "torch.backends.cudnn.version(), m.version('deepspeed'), m.version('nvidia-nccl-cu12')]))")
    out = json.loads(py(env, code).stdout)
    assert out == ["2.1.2", "12.1", 8, [9, 0], ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
                   [2, 18, 5], 8902, "0.12.6", "2.18.5"]
    assert py(env, "import torch; print(torch.cuda.device_count())", CUDA_VISIBLE_DEVICES="1,2").stdout.strip() == "2"


@pytest.mark.parametrize(("spec", "code", "needle"), [
    ({"fault": "gpu.ecc_uncorrectable", "gpu": 3}, "torch.cuda.set_device(3); torch.ones(4, device='cuda:3')",
     "CUDA error: uncorrectable ECC error encountered"),
    ({"fault": "fabricmanager.down"}, "torch.cuda.init()", "Error 802: system not yet initialized"),
    ({"fault": "driver.cuda_too_old", "driver": "470.223.02", "cuda": "12.1"}, "torch.cuda.init()",
     "CUDA driver version is insufficient for CUDA runtime version"),
    ({"fault": "cuda.arch_unsupported"}, "torch.ones(4, device='cuda:0')",
     "no kernel image is available for execution on the device"),
    ({"fault": "fw.torch_nccl_conflict"}, "pass", "undefined symbol: ncclCommSplit"),
])
def test_fake_torch_raises_real_cuda_errors(tmp_path: Path, spec: dict[str, Any], code: str, needle: str) -> None:
    proc = py(host_env(tmp_path, [spec]), "import torch\n" + code)
    assert proc.returncode != 0 and needle in proc.stderr, proc.stderr[-800:]


def test_renderers_real_layouts(tmp_path: Path) -> None:
    env = host_env(tmp_path, [{"fault": "storage.files_purged", "path": "/scratch/data"},
                              {"fault": "user.error_path_hang"}])
    run = lambda *argv: subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=60)  # noqa: E731
    ps = run("ps", "-eo", "pid,ppid,args").stdout.splitlines()
    assert ps[0] == "    PID    PPID COMMAND" and any(line.startswith("  60113 ") for line in ps)
    dump = run("py-spy", "dump", "--pid", "60113").stdout.splitlines()
    assert dump[0].startswith("Process 60113: /usr/bin/python3 ") and dump[1].startswith("Python v3.10.12 (")
    assert dump[3] == 'Thread 60113 (idle): "MainThread"'
    assert dump[4] == "    destroy_process_group (torch/distributed/distributed_c10d.py:1781)"
    df = run("df", "-k", "/dev/shm", "/scratch/data")
    assert df.returncode == 1 and "df: /scratch/data: No such file or directory" in df.stderr
    header = ["Filesystem", "1K-blocks", "Used", "Available", "Use%", "Mounted", "on"]
    assert df.stdout.splitlines()[0].split() == header
    sel = run("ipmitool", "sel", "elist").stdout.splitlines()
    assert len(sel) == 6 and [f.strip() for f in sel[0].split("|")][3:] == [
        "Event Logging Disabled SEL", "Log area reset/cleared", "Asserted"]
    assert "\tnvidia-driver-535\t535.161.08-0ubuntu1" in run(
        "dpkg-query", "-W", "-f=${db:Status-Abbrev}\t${Package}\t${Version}\n").stdout
    assert run("nvcc", "--version").stdout.splitlines()[3] == "Cuda compilation tools, release 12.2, V12.2.140"
    assert not Path(env["AIDAI_SYSROOT"], "scratch/data").exists()


def test_a_gemm_probe_the_cuda_stack_cannot_run_is_not_a_faulty_gpu(tmp_path: Path) -> None:
    env = host_env(tmp_path, [{"fault": "cuda.arch_unsupported", "arch": "sm_86"}])
    probe = check("gpu_exec", env, samples=1)
    assert probe["verdict"] == "UNKNOWN" and "no kernel image" in probe["summary"]
    assert not fails(probe)  # nothing for GPU.HARDWARE.FAULTY_GPU's rules to match
    assert "no_kernel_image" in fails(check("cuda_exec", env, samples=1))
