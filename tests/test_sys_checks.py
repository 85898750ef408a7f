"""System/framework/user-stack check parsers on realistic tool outputs (tests/fixtures/sys) served by fake tools.

A tool that is missing, crashes or prints garbage must never turn into a PASS.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from agent.checks.manifest import load_known_bad, profile
from agent.evidence import assess
from agent.models import CheckResult
from agent.taxonomy import load_taxonomy
from tests.conftest import FakeTools, fixture_text, run_script

H100 = profile("H100-SXM-8")
KNOWN_BAD = load_known_bad()
YEARS = 20 * 365 * 86400  # fixtures carry 2024 dates; a wide window keeps them "recent"


TAXONOMY = load_taxonomy()


def sysfix(name: str) -> str:
    return fixture_text("sys", name)


def params(**extra: Any) -> dict[str, Any]:
    return {"profile": H100, "host": "node-1", "known_bad": KNOWN_BAD, "sample_interval_s": 0.01, **extra}


def missing(fake: FakeTools, *names: str) -> None:
    """Shadow tools that exist on the test machine with a shell's 'not found'."""
    for name in names:
        fake.tool(name, rc=127, stderr=f"sh: 1: {name}: not found\n")


def ids(result: dict[str, Any], severity: str = "FAIL") -> set[str]:
    return {f["id"] for f in result["findings"] if f["severity"] == severity}


def entities(result: dict[str, Any], fid: str) -> set[str]:
    return {f["entity"] for f in result["findings"] if f["id"] == fid}


# ---- system_config ----------------------------------------------------------------------------------------
def healthy_system(fake: FakeTools) -> None:
    fake.file("/proc/self/limits", sysfix("proc_limits_unlimited.txt"))
    fake.tool("df", sysfix("df_shm_host.txt"))
    fake.tool("lspci", sysfix("lspci_vvv_acs_off.txt"))
    for cpu in range(2):
        fake.file(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor", "performance\n")


def test_system_config_healthy_passes(fake_tools: FakeTools) -> None:
    healthy_system(fake_tools)
    result = run_script("system_config.py", fake_tools.env(), params())
    assert result["verdict"] == "PASS", result
    assert result["metrics"]["memlock_soft"] == "unlimited"


def test_memlock_64k_fails(fake_tools: FakeTools) -> None:
    healthy_system(fake_tools)
    fake_tools.file("/proc/self/limits", sysfix("proc_limits_memlock64k.txt"))
    result = run_script("system_config.py", fake_tools.env(), params())
    assert result["verdict"] == "FAIL" and ids(result) == {"memlock"}
    assert "64 KiB" in result["summary"]


def test_shm_64m_from_df_fails(fake_tools: FakeTools) -> None:
    healthy_system(fake_tools)
    fake_tools.tool("df", sysfix("df_shm_64m.txt"))
    result = run_script("system_config.py", fake_tools.env(), params())
    assert ids(result) == {"shm_small"} and result["metrics"]["shm_mib"] == 64


def test_shm_from_proc_mounts_when_df_missing(fake_tools: FakeTools) -> None:
    healthy_system(fake_tools)
    missing(fake_tools, "df")
    fake_tools.file("/proc/mounts", "shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k,inode64 0 0\n")
    result = run_script("system_config.py", fake_tools.env(), params())
    assert ids(result) == {"shm_small"}


def test_acs_src_valid_on_switch_fails_root_port_is_info(fake_tools: FakeTools) -> None:
    healthy_system(fake_tools)
    fake_tools.tool("lspci", sysfix("lspci_vvv_acs.txt"))
    result = run_script("system_config.py", fake_tools.env(), params())
    assert result["verdict"] == "FAIL" and entities(result, "acs_src_valid") == {"0000:16:00.0"}
    assert entities(result, "acs_root_port") == {"0000:00:01.0"}


@pytest.mark.parametrize("lspci", ["missing", "garbage", "crash"])
def test_acs_unreadable_is_unknown_for_acs_alone(fake_tools: FakeTools, lspci: str) -> None:
    # a container sees its memlock limit and /dev/shm, not the PCIe tree: ACS stays unknown, the others are judged
    healthy_system(fake_tools)
    if lspci == "missing":
        missing(fake_tools, "lspci")
    elif lspci == "garbage":
        fake_tools.tool("lspci", "\x00\x01 segfault?\n")
    else:
        fake_tools.tool("lspci", "", rc=139, stderr="Segmentation fault\n")
    result = CheckResult.model_validate(run_script("system_config.py", fake_tools.env(), params()))
    assert "PCIe ACS not checked" in result.summary and "no ACS" not in result.summary
    acs, shm = (TAXONOMY.node(label) for label in ("INTERCONNECT_NETWORKING.PCIE.ACS_P2P_HANG",
                                                   "USER_APPLICATION.CONFIG.CONTAINER_SHM_TOO_SMALL"))
    evidence = assess(acs.evidence, [result], acs.undecided, acs.unseen)
    assert evidence.strength == "unknown" and "could not check PCIe ACS" in evidence.unknown[0]
    assert assess(shm.evidence, [result], shm.undecided, shm.unseen).strength == "none"


def test_acs_and_memlock_unreadable_is_unknown(fake_tools: FakeTools) -> None:
    healthy_system(fake_tools)
    missing(fake_tools, "lspci")
    fake_tools.file("/proc/self/limits", "garbage\n")
    result = run_script("system_config.py", fake_tools.env(), params())
    assert result["verdict"] == "UNKNOWN" and "memlock" in result["summary"] and "PCIe ACS" in result["summary"]


def test_governor_and_nccl_env_warn(fake_tools: FakeTools) -> None:
    healthy_system(fake_tools)
    fake_tools.file("/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "powersave\n")
    result = run_script("system_config.py", fake_tools.env(NCCL_P2P_DISABLE="1"), params())
    assert result["verdict"] == "WARN" and ids(result, "WARN") == {"cpu_governor", "nccl_env"}


# ---- bmc_sel ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("fixture", "kinds"), [
    ("ipmitool_sel_elist_psu.txt", {"psu"}),
    ("ipmitool_sel_elist_power_loss.txt", {"power_loss"}),
    ("ipmitool_sel_elist_thermal.txt", {"thermal_shutdown"}),
    ("ipmitool_sel_elist_board.txt", {"board_critical"}),
])
def test_sel_kinds(fake_tools: FakeTools, fixture: str, kinds: set[str]) -> None:
    fake_tools.tool("ipmitool", sysfix(fixture))
    result = run_script("bmc_sel.py", fake_tools.env(), params(window_s=YEARS))
    assert result["verdict"] == "FAIL" and ids(result) == kinds, result["findings"]


def test_sel_old_events_are_info(fake_tools: FakeTools) -> None:
    fake_tools.tool("ipmitool", sysfix("ipmitool_sel_elist_psu.txt"))
    result = run_script("bmc_sel.py", fake_tools.env(), params())  # default window: 7 days
    assert result["verdict"] == "PASS" and "psu" in ids(result, "INFO")


@pytest.mark.parametrize(("stdout", "rc", "stderr"), [
    ("", 1, "Could not open device at /dev/ipmi0 or /dev/ipmi/0 or /dev/ipmidev/0: No such file or directory\n"),
    ("Segmentation fault\nlorem ipsum\n", 0, ""),
    ("", 137, "Killed\n"),
])
def test_sel_unusable_ipmitool_is_unknown(fake_tools: FakeTools, stdout: str, rc: int, stderr: str) -> None:
    fake_tools.tool("ipmitool", stdout, rc=rc, stderr=stderr)
    assert run_script("bmc_sel.py", fake_tools.env(), params())["verdict"] == "UNKNOWN"


def test_sel_missing_tool_unknown_and_empty_log_passes(fake_tools: FakeTools) -> None:
    assert run_script("bmc_sel.py", fake_tools.env(), params())["verdict"] == "UNKNOWN"
    fake_tools.tool("ipmitool", "SEL has no entries\n")
    assert run_script("bmc_sel.py", fake_tools.env(), params())["verdict"] == "PASS"


# ---- stack_dump ----------------------------------------------------------------------------------------------
def pyspy(fake: FakeTools, dumps: dict[int, str]) -> None:
    cases = "".join(f"  {pid}) cat '{fake.outputs / name}';;\n" for pid, name in dumps.items())
    for name in dumps.values():
        (fake.outputs / name).write_text(sysfix(name))
    fake.script("py-spy", f'case "$3" in\n{cases}  *) echo "Error: No such process (os error 3)" >&2; exit 1;;\nesac\n')


def test_rank0_only_work(fake_tools: FakeTools) -> None:
    fake_tools.tool("ps", sysfix("ps_training.txt"))
    fake_tools.file("/proc/51210/environ", "RANK=0\0LOCAL_RANK=0\0")
    fake_tools.file("/proc/51211/environ", "RANK=1\0LOCAL_RANK=1\0")
    pyspy(fake_tools, {51200: "pyspy_torchrun.txt", 51210: "pyspy_rank0_busy.txt", 51211: "pyspy_rank_barrier.txt"})
    result = run_script("stack_dump.py", fake_tools.env(), params())
    assert result["verdict"] == "FAIL" and ids(result) == {"rank0_only_work"}
    assert entities(result, "rank0_only_work") == {"rank 0 (pid 51210)"}
    assert result["metrics"]["kinds"] == {"launcher": 1, "busy": 1, "collective": 1}


def test_error_path_teardown(fake_tools: FakeTools) -> None:
    fake_tools.tool("ps", sysfix("ps_training.txt"))
    fake_tools.file("/proc/51210/environ", "RANK=0\0")
    fake_tools.file("/proc/51211/environ", "RANK=1\0")
    pyspy(fake_tools, {51200: "pyspy_torchrun.txt", 51210: "pyspy_allreduce_native.txt", 51211: "pyspy_teardown.txt"})
    result = run_script("stack_dump.py", fake_tools.env(), params())
    assert ids(result) == {"error_path_hang"} and entities(result, "error_path_hang") == {"rank 1 (pid 51211)"}


def test_dataloader_deadlock(fake_tools: FakeTools) -> None:
    fake_tools.tool("ps", sysfix("ps_dataloader.txt"))
    pyspy(fake_tools, {48213: "pyspy_dataloader_main.txt", 48301: "pyspy_dataloader_worker.txt",
                       48302: "pyspy_dataloader_worker.txt"})
    missing(fake_tools, "nvidia-smi")
    result = run_script("stack_dump.py", fake_tools.env(), params())
    assert ids(result) == {"dataloader_deadlock"} and "acquire (logging/__init__.py:917)" in result["summary"]


def test_all_ranks_in_collective_is_not_a_local_fault(fake_tools: FakeTools) -> None:
    fake_tools.tool("ps", sysfix("ps_training.txt"))
    fake_tools.file("/proc/51210/environ", "RANK=0\0")
    fake_tools.file("/proc/51211/environ", "RANK=1\0")
    pyspy(fake_tools, {51200: "pyspy_torchrun.txt", 51210: "pyspy_allreduce_native.txt",
                       51211: "pyspy_rank_barrier.txt"})
    result = run_script("stack_dump.py", fake_tools.env(), params())
    assert result["verdict"] == "PASS" and "all_in_collective" in ids(result, "INFO")


def test_stack_dump_without_training_processes_passes(fake_tools: FakeTools) -> None:
    fake_tools.tool("ps", "    PID    PPID COMMAND\n      1       0 /sbin/init\n   2210       1 /usr/sbin/slurmd -D\n")
    result = run_script("stack_dump.py", fake_tools.env(), params())
    assert result["verdict"] == "PASS" and "nothing to dump" in result["summary"]


@pytest.mark.parametrize("pyspy_state", ["missing", "garbage", "denied"])
def test_stack_dump_unusable_pyspy_is_unknown(fake_tools: FakeTools, pyspy_state: str) -> None:
    fake_tools.tool("ps", sysfix("ps_training.txt"))
    if pyspy_state == "garbage":
        fake_tools.tool("py-spy", "\x1b[31mthread 'main' panicked at src/main.rs\n")
    elif pyspy_state == "denied":
        fake_tools.tool("py-spy", "", rc=1, stderr="Permission Denied: Try running again with elevated permissions\n")
    result = run_script("stack_dump.py", fake_tools.env(), params())
    assert result["verdict"] == "UNKNOWN", result


# ---- host_memory ----------------------------------------------------------------------------------------------
def edac(fake: FakeTools, ue: int, ce: int) -> None:
    base = "/sys/devices/system/edac/mc/mc0"
    fake.file(f"{base}/ue_count", f"{ue}\n")
    fake.file(f"{base}/ce_count", f"{ce}\n")
    fake.file(f"{base}/dimm0/dimm_label", "CPU_SrcID#0_MC#0_Chan#1_DIMM#0\n")
    fake.file(f"{base}/dimm0/dimm_ue_count", f"{ue}\n")
    fake.file(f"{base}/dimm0/dimm_ce_count", f"{ce}\n")


def test_host_memory_uncorrected(fake_tools: FakeTools) -> None:
    edac(fake_tools, ue=1, ce=4)
    fake_tools.tool("journalctl", sysfix("journal_host_memory.txt"))
    result = run_script("host_memory.py", fake_tools.env(), params(window_s=YEARS))
    assert ids(result) == {"edac_uncorrected", "mce_uncorrected"}
    assert entities(result, "edac_uncorrected") == {"CPU_SrcID#0_MC#0_Chan#1_DIMM#0"}


def test_host_memory_few_corrected_pass(fake_tools: FakeTools) -> None:
    edac(fake_tools, ue=0, ce=3)
    fake_tools.tool("journalctl", sysfix("journal_healthy.txt"))
    result = run_script("host_memory.py", fake_tools.env(), params(window_s=YEARS))
    assert result["verdict"] == "PASS" and "edac_corrected" in ids(result, "INFO")


def test_host_memory_without_sources_is_unknown(fake_tools: FakeTools) -> None:
    fake_tools.tool("journalctl", "", rc=1, stderr="No journal files were found.\n")
    missing(fake_tools, "dmesg")
    assert run_script("host_memory.py", fake_tools.env(), params())["verdict"] == "UNKNOWN"


# ---- node_provisioning --------------------------------------------------------------------------------------------
def test_node_not_provisioned(fake_tools: FakeTools) -> None:
    fake_tools.tool("dpkg-query", sysfix("dpkg_bare.txt"))
    fake_tools.tool("modinfo", "", rc=1, stderr="modinfo: ERROR: Module nvidia not found.\n")
    result = run_script("node_provisioning.py", fake_tools.env(), params())
    assert ids(result) == {"node_not_provisioned"} and "container_toolkit" in result["summary"]


def test_node_provisioned(fake_tools: FakeTools) -> None:
    fake_tools.tool("dpkg-query", sysfix("dpkg_gpu.txt"))
    result = run_script("node_provisioning.py", fake_tools.env(), params())
    assert result["verdict"] == "PASS" and result["metrics"]["driver_packages"]


def test_node_provisioning_garbled_dpkg_is_unknown(fake_tools: FakeTools) -> None:
    fake_tools.tool("dpkg-query", "dpkg-query: error: parsing file '/var/lib/dpkg/status' near line 9\n")
    missing(fake_tools, "rpm", "modinfo")
    assert run_script("node_provisioning.py", fake_tools.env(), params())["verdict"] == "UNKNOWN"


# ---- scheduler_events -----------------------------------------------------------------------------------------------
def test_scheduler_kills(fake_tools: FakeTools) -> None:
    fake_tools.tool("journalctl", sysfix("journal_scheduler.txt"))
    result = run_script("scheduler_events.py", fake_tools.env(), params(window_s=YEARS))
    assert ids(result) == {"oom_killer", "memory_limit", "time_limit"}
    assert entities(result, "time_limit") == {"job 127020"}


def test_scheduler_healthy_log_passes_and_unreadable_is_unknown(fake_tools: FakeTools) -> None:
    fake_tools.tool("journalctl", sysfix("journal_healthy.txt"))
    assert run_script("scheduler_events.py", fake_tools.env(), params(window_s=YEARS))["verdict"] == "PASS"
    fake_tools.tool("journalctl", "", rc=1, stderr="Failed to get journal access: Permission denied\n")
    assert run_script("scheduler_events.py", fake_tools.env(), params())["verdict"] == "UNKNOWN"


# ---- storage_purge --------------------------------------------------------------------------------------------------
PURGE_LOG = ("2024-05-14 03:00:01 scratch-purge: removed /scratch/data/train/shard-000000.tar (atime 31d)\n"
             "2024-05-14 03:00:01 scratch-purge: removed /scratch/data/train/shard-000001.tar (atime 31d)\n")


def test_purged_data_dir_fails(fake_tools: FakeTools) -> None:
    missing(fake_tools, "journalctl")
    fake_tools.file("/var/log/scratch-purge.log", PURGE_LOG)
    fake_tools.file("/scratch/README", "scratch\n")
    result = run_script("storage_purge.py", fake_tools.env(), params(window_s=YEARS))
    assert ids(result) == {"files_purged"} and entities(result, "files_purged") == {"/scratch/data"}


def test_partial_purge_warns_and_intact_data_passes(fake_tools: FakeTools) -> None:
    missing(fake_tools, "journalctl")
    fake_tools.file("/var/log/scratch-purge.log", PURGE_LOG)
    fake_tools.file("/scratch/data/train/shard-000002.tar", "x")
    result = run_script("storage_purge.py", fake_tools.env(), params(window_s=YEARS))
    assert result["verdict"] == "WARN" and entities(result, "files_purged") == {"/scratch/data/train"}
    fake_tools.file("/var/log/scratch-purge.log", "")
    result = run_script("storage_purge.py", fake_tools.env(), params(data_paths=["/scratch/data"]))
    assert result["verdict"] == "PASS"


def test_no_purge_logs_no_data_paths_is_unknown(fake_tools: FakeTools) -> None:
    missing(fake_tools, "journalctl")
    assert run_script("storage_purge.py", fake_tools.env(), params())["verdict"] == "UNKNOWN"


# ---- checkpoint_load -------------------------------------------------------------------------------------------------
def safetensors(path: Path, header: dict[str, Any] | bytes, data: int = 16) -> None:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * data)


def test_checkpoint_problems(tmp_path: Path, fake_tools: FakeTools) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    good = {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}
    safetensors(ckpt / "model-00001-of-00005.safetensors", good)
    truncated = {"w": {"dtype": "F32", "shape": [64], "data_offsets": [0, 256]}}
    safetensors(ckpt / "model-00002-of-00005.safetensors", truncated)
    safetensors(ckpt / "model-00003-of-00005.safetensors", b"{not json")
    lfs = "version https://git-lfs.github.com/spec/v1\noid sha256:ab\n"
    (ckpt / "model-00004-of-00005.safetensors").write_text(lfs)
    (ckpt / "pytorch_model.bin").write_bytes(b"PK\x03\x04" + b"\0" * 64)
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        f"layer{i}": f"model-0000{i}-of-00005.safetensors" for i in range(1, 6)}}))
    result = run_script("checkpoint_load.py", fake_tools.env(AIDAI_SYSROOT="/"), params(checkpoint_dir=str(ckpt)))
    assert result["verdict"] == "FAIL"
    messages = " ".join(f["message"] for f in result["findings"])
    for needle in ("MetadataIncompleteBuffer", "InvalidHeaderDeserialization", "Git LFS pointer",
                   "failed finding central directory", "model-00005-of-00005.safetensors, which is missing"):
        assert needle in messages
    assert "model-00001-of-00005.safetensors" not in {f["entity"] for f in result["findings"]}


def test_checkpoint_good_passes_and_absent_param_is_unknown(tmp_path: Path, fake_tools: FakeTools) -> None:
    safetensors(tmp_path / "model.safetensors", {"__metadata__": {"format": "pt"},
                                                 "w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})
    env = fake_tools.env(AIDAI_SYSROOT="/")
    result = run_script("checkpoint_load.py", env, params(checkpoint_dir=str(tmp_path)))
    assert result["verdict"] == "PASS", result
    assert run_script("checkpoint_load.py", fake_tools.env(), params())["verdict"] == "UNKNOWN"


# ---- probes with a canned python ------------------------------------------------------------------------------
def canned_python(fake: FakeTools, lines: list[dict[str, Any]] | str, tail: str = "") -> None:
    text = lines if isinstance(lines, str) else "\n".join(json.dumps(x) for x in lines)
    (fake.outputs / "probe.out").write_text(text + "\n")
    fake.script("python3", f"cat '{fake.outputs / 'probe.out'}'\n{tail}")


INIT = {"kind": "init", "available": True, "device_count": 4, "errors": [], "warnings": [], "torch": "2.1.2",
        "cuda": "12.1"}


def test_cuda_exec_reports_each_gpu_error(fake_tools: FakeTools) -> None:
    gpus = [{"kind": "gpu", "gpu": i, "ok": True, "error": ""} for i in range(4)]
    gpus[2] = {"kind": "gpu", "gpu": 2, "ok": False, "error": "CUDA error: uncorrectable ECC error encountered\n"
               "CUDA kernel errors might be asynchronously reported at some other API call"}
    canned_python(fake_tools, [{"kind": "imported"}, INIT, *gpus])
    result = run_script("cuda_exec.py", fake_tools.env(), params(profile={**H100, "gpu_count": 4}))
    assert ids(result) == {"ecc_uncorrectable"} and entities(result, "ecc_uncorrectable") == {"GPU2"}
    assert result["metrics"]["ok"] == 3 and result["metrics"]["device_count"] == 4


def test_cuda_exec_init_failure_and_hang(fake_tools: FakeTools) -> None:
    init = {**INIT, "available": False, "device_count": 0,
            "errors": ["Unexpected error from cudaGetDeviceCount(). Error 802: system not yet initialized"]}
    canned_python(fake_tools, [{"kind": "imported"}, init])
    assert ids(run_script("cuda_exec.py", fake_tools.env(), params())) == {"fabric_not_initialized"}
    canned_python(fake_tools, [{"kind": "imported"}, INIT, {"kind": "gpu", "gpu": 0, "ok": True},
                               {"kind": "start", "gpu": 1}], tail="sleep 5\n")
    result = run_script("cuda_exec.py", fake_tools.env(), params(probe_timeout_s=1))
    assert entities(result, "probe_hang") == {"GPU1"}


@pytest.mark.parametrize("output", [
    [{"kind": "import_error", "error": "ModuleNotFoundError: No module named 'torch'"}],
    [{"kind": "imported"}, {**INIT, "cuda": None, "torch": "2.13.0+cpu"}],
    "Traceback (most recent call last):\nSegmentation fault",
])
def test_cuda_exec_cannot_decide(fake_tools: FakeTools, output: Any) -> None:
    canned_python(fake_tools, output)
    assert run_script("cuda_exec.py", fake_tools.env(), params())["verdict"] == "UNKNOWN"


def test_gpu_exec_sdc_and_straggler(fake_tools: FakeTools) -> None:
    rows = [{"kind": "gpu", "gpu": i, "tflops": 660.0 + i, "max_abs_err": 1.6, "ref_scale": 407.0,
             "checksum": 1234.5, "abs_sum": 4.8e9} for i in range(4)]
    rows[1].update(max_abs_err=407.0, checksum=-99.0)
    rows[3].update(tflops=520.0)
    canned_python(fake_tools, [{"kind": "init", "device_count": 4, "torch": "2.1.2"}, *rows])
    result = run_script("gpu_exec.py", fake_tools.env(), params())
    assert entities(result, "sdc_mismatch") == {"GPU1"} and entities(result, "straggler") == {"GPU3"}


def test_gpu_exec_busy_gpus_unknown(fake_tools: FakeTools) -> None:
    oom = "CUDA out of memory. Tried to allocate 256.00 MiB (GPU 0; 79.65 GiB total capacity)"
    canned_python(fake_tools, [{"kind": "init", "device_count": 2},
                               *[{"kind": "gpu", "gpu": i, "error": oom} for i in range(2)]])
    assert run_script("gpu_exec.py", fake_tools.env(), params())["verdict"] == "UNKNOWN"


PROBE = {"python": "3.10.12", "packages": {"torch": "2.1.2", "nvidia-nccl-cu12": "2.18.5", "deepspeed": "0.12.6",
                                           "accelerate": "0.27.2"},
         "torch": "2.1.2", "torch_cuda": "12.1", "cudnn": 8902, "available": True, "device_count": 2,
         "arch_list": ["sm_80", "sm_86", "sm_90"], "capabilities": [[9, 0], [9, 0]], "nccl": [2, 18, 5],
         "nccl_maps": ["/usr/local/lib/python3.10/dist-packages/nvidia/nccl/lib/libnccl.so.2"]}
NVRM = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {}  Sat Feb 17 02:30:11 UTC 2024\n"


def framework(fake: FakeTools, probe: dict[str, Any], driver: str = "535.161.08") -> None:
    canned_python(fake, json.dumps(probe))
    fake.file("/proc/driver/nvidia/version", NVRM.format(driver))
    missing(fake, "nvcc")


def test_framework_healthy_and_metrics(fake_tools: FakeTools) -> None:
    framework(fake_tools, PROBE)
    result = run_script("framework_versions.py", fake_tools.env(), params())
    assert result["verdict"] == "PASS", result
    assert {k: result["metrics"][k] for k in ("torch", "nccl", "driver")} == {
        "torch": "2.1.2", "nccl": "2.18.5", "driver": "535.161.08"}


@pytest.mark.parametrize(("change", "driver", "fid"), [
    ({"torch_cuda": "12.1"}, "470.223.02", "driver_too_old"),
    ({"arch_list": ["sm_70", "sm_75", "sm_80"]}, "535.161.08", "arch_unsupported"),
    ({"nccl": [2, 20, 5], "packages": {**PROBE["packages"], "nvidia-nccl-cu12": "2.20.5"}}, "535.161.08",
     "known_bad_nccl"),
    ({"packages": {**PROBE["packages"], "deepspeed": "0.13.2+fa0c9a7"}}, "535.161.08", "known_bad_deepspeed"),
    ({"nccl_maps": ["/usr/local/nccl/lib/libnccl.so.2.21.5", "/opt/conda/lib/libnccl.so.2"]}, "535.161.08",
     "nccl_library_conflict"),
    ({"import_error": "ImportError: libtorch_cuda.so: undefined symbol: ncclCommRegister"}, "535.161.08",
     "nccl_library_conflict"),
    ({}, "525.85.12", "known_bad_driver_gsp"),
])
def test_framework_failures(fake_tools: FakeTools, change: dict[str, Any], driver: str, fid: str) -> None:
    framework(fake_tools, {**PROBE, **change}, driver)
    result = run_script("framework_versions.py", fake_tools.env(), params())
    assert result["verdict"] == "FAIL" and fid in ids(result), result["findings"]


def test_framework_names_the_versions_its_list_cannot_judge(fake_tools: FakeTools) -> None:
    """A release the known-bad list does not name is said to be unjudged (INFO), so its bug leaf stays open; a listed
    one is a FAIL and is not also called unlisted."""
    framework(fake_tools, {**PROBE, "packages": {**PROBE["packages"], "deepspeed": "0.13.2+fa0c9a7"}})
    result = run_script("framework_versions.py", fake_tools.env(), params())
    unlisted = {f["id"]: f for f in result["findings"] if f["id"].startswith("unlisted_")}
    assert set(unlisted) == {"unlisted_nccl", "unlisted_accelerate", "unlisted_driver"}, result["findings"]
    assert {f["severity"] for f in unlisted.values()} == {"INFO"}
    assert "NCCL 2.18.5 is not in the known-bad list" in unlisted["unlisted_nccl"]["message"]
    assert "known_bad_deepspeed" in ids(result)


def test_framework_without_known_bad_list_is_unknown(fake_tools: FakeTools) -> None:
    framework(fake_tools, PROBE)
    result = run_script("framework_versions.py", fake_tools.env(), {"profile": H100})
    assert result["verdict"] == "UNKNOWN" and "known-bad" in result["summary"]


# ---- container_runtime ----------------------------------------------------------------------------------------------
def test_container_devices_cgroup_lost(fake_tools: FakeTools) -> None:
    fake_tools.file("/.dockerenv", "")
    fake_tools.file("/dev/nvidia0", "")
    fake_tools.file("/dev/nvidiactl", "")
    fake_tools.file("/sys/fs/cgroup/devices/devices.list", "c 1:5 rwm\nc 1:3 rwm\nc *:* m\nb *:* m\nc 136:* rwm\n")
    fake_tools.tool("nvidia-smi", "Failed to initialize NVML: Unknown Error\n", rc=255)
    result = run_script("container_runtime.py", fake_tools.env(), params())
    assert ids(result) == {"cgroup_device_access_lost"}
    assert len([f for f in result["findings"] if f["severity"] == "FAIL"]) == 2
    # the toolkit is a host package: from inside the container its version is said to be unchecked
    assert ids(result, "INFO") == {"toolkit_version_unseen"}


def test_a_container_given_its_gpus_judges_runtime_and_cgroup_not_the_toolkit_version(fake_tools: FakeTools) -> None:
    fake_tools.file("/.dockerenv", "")
    fake_tools.file("/dev/nvidia0", "")
    fake_tools.file("/dev/nvidiactl", "")
    fake_tools.file("/sys/fs/cgroup/devices/devices.list", "c 195:* rwm\nc 1:5 rwm\n")
    fake_tools.tool("nvidia-smi", "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n")
    result = CheckResult.model_validate(run_script("container_runtime.py", fake_tools.env(), params()))
    assert result.verdict == "PASS" and "toolkit version (a host package) not checked" in result.summary, result
    leaves = {label.rpartition(".")[2]: TAXONOMY.node(label) for label in (
        "SYSTEM_SOFTWARE.CONTAINER_TOOLKIT.RUNTIME_NOT_CONFIGURED",
        "SYSTEM_SOFTWARE.CONTAINER_TOOLKIT.CGROUP_DEVICE_ACCESS_LOST",
        "SYSTEM_SOFTWARE.CONTAINER_TOOLKIT.VERSION_REGRESSION")}
    strength = {name: assess(leaf.evidence, [result], leaf.undecided, leaf.unseen) for name, leaf in leaves.items()}
    assert strength["RUNTIME_NOT_CONFIGURED"].strength == strength["CGROUP_DEVICE_ACCESS_LOST"].strength == "none"
    assert strength["VERSION_REGRESSION"].strength == "unknown"
    assert "Toolkit version" in strength["VERSION_REGRESSION"].unknown[0]


def test_container_without_gpu_devices(fake_tools: FakeTools) -> None:
    fake_tools.file("/proc/1/cgroup", "12:devices:/docker/4f2a9c1e7b3d\n")
    result = run_script("container_runtime.py", fake_tools.env(), params())
    assert ids(result) == {"runtime_not_configured"}


def test_docker_without_nvidia_runtime(fake_tools: FakeTools) -> None:
    fake_tools.script("docker", f'[ "$1" = info ] && cat \'{fake_tools.outputs}/docker.info\' || '
                                'echo "Docker version 24.0.7, build afdd53b"\n')
    (fake_tools.outputs / "docker.info").write_text(sysfix("docker_info_no_nvidia.txt"))
    fake_tools.tool("journalctl", 'May 14 03:12:55 node-1 dockerd[2301]: time="2024-05-14T03:12:55Z" level=error '
                    'msg="Handler for POST /v1.43/containers/3f9c/start returned error: could not select device '
                    'driver \\"\\" with capabilities: [[gpu]]"\n')
    result = run_script("container_runtime.py", fake_tools.env(), params())
    assert ids(result) == {"runtime_not_configured"} and 'could not select device driver ""' in result["summary"]


def test_toolkit_known_bad_and_mismatch(fake_tools: FakeTools) -> None:
    fake_tools.script("docker", f'[ "$1" = info ] && cat \'{fake_tools.outputs}/docker.info\' || echo "Docker 24"\n')
    (fake_tools.outputs / "docker.info").write_text(sysfix("docker_info_nvidia.txt"))
    fake_tools.tool("journalctl", "-- No entries --\n")
    fake_tools.tool("nvidia-container-cli", sysfix("nvidia_container_cli_version_1.17.7.txt"))
    fake_tools.tool("nvidia-ctk", "NVIDIA Container Toolkit CLI version 1.17.6\ncommit: 5605d19\n")
    result = run_script("container_runtime.py", fake_tools.env(), params())
    assert ids(result) == {"version_regression", "toolkit_version_mismatch"}


# ---- known_bad.yaml -------------------------------------------------------------------------------------------------
def test_known_bad_entries_are_sourced() -> None:
    assert set(KNOWN_BAD) == {"nccl", "deepspeed", "accelerate", "driver", "driver_gsp", "container_toolkit"}
    for kind, entries in KNOWN_BAD.items():
        for entry in entries:
            assert entry["versions"] and entry["reason"].strip(), (kind, entry)
            assert str(entry["source"]).startswith("https://"), (kind, entry)
