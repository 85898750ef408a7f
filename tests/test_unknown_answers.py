"""Unknown is not a fault: a check that cannot see what it needs answers UNKNOWN with the reason.

Every script in the manifest is run the way the agent runs it (`python3 SCRIPT`, params JSON on stdin, through
`LocalExecutor` and `to_result`) on a host that shows nothing: an empty system root, and either no tools at
all or tools that refuse with their real error texts (no systemd, no permission, no IB stack, no DCGM host
engine, no BMC device). Each runs once with a realistic profile and once with a profile of all-null
expectations. The same runs on a plain VM's /proc and /sys (tests/fixtures/unknown/plain_host: no GPU, no RDMA
NIC, no systemd) may PASS only where the check saw that its subject is absent and none is expected.

Exceptions: nccl_env decides on the script's own environment alone, so the runs above give it the job's NCCL
variables to check; with none set it PASSes without a tool (its own test says why). Then the cases measured on a
real machine with no GPU, no NVIDIA tools, no InfiniBand and no systemd, as regressions, and null expectations
next to real evidence.
"""

from __future__ import annotations

import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent.checks.manifest import LIB_SCRIPTS, CheckSpec, load_known_bad, load_manifest, profile
from agent.executors.local import LocalExecutor
from agent.models import CheckResult, Verdict, to_result
from tests.conftest import FakeTools, fixture_text, run_script

MANIFEST = load_manifest()
CHECKS = [c.id for c in MANIFEST.checks]
H100 = profile("H100-SXM-8")
NULL_PROFILE: dict[str, Any] = {key: None for key in H100}
NULL_PROFILE["link_layer"] = None
PROFILES = {"H100-SXM-8": H100, "all-null": NULL_PROFILE}
# the job's NCCL settings: they give nccl_env something to check, which needs interfaces and HCAs to see
JOB_ENV = {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0"}

# (stderr, exit code) of each tool when it cannot run or may not look, as the real tool prints it
NO_SYSTEMD = ("System has not been booted with systemd as init system (PID 1). Can't operate.\n"
              "Failed to connect to bus: Host is down\n", 1)
REFUSALS: dict[str, tuple[str, int]] = {
    "dmesg": ("dmesg: read kernel buffer failed: Operation not permitted\n", 1),
    "journalctl": ("Hint: You are currently not seeing messages from other users and the system.\n"
                   "      Users in groups 'adm', 'systemd-journal' can see all messages.\n"
                   "      Pass -q to turn off this notice.\n"
                   "No journal files were opened due to insufficient permissions.\n", 1),
    "systemctl": NO_SYSTEMD,
    # nvidia-smi exits 4 (NVML_ERROR_NO_PERMISSION) with this text
    "nvidia-smi": ("Failed to initialize NVML: Insufficient Permissions\n", 4),
    "lspci": ("pcilib: Cannot open /proc/bus/pci\nlspci: Cannot find any working access method.\n", 1),
    "ibstat": ("ibpanic: [4260] main: can't init UMAD library: (No such file or directory)\n", 255),
    "ibstatus": ("ls: cannot access '/sys/class/infiniband/*/ports': Permission denied\n", 2),
    "ibv_devinfo": ("Failed to get IB devices list: Function not implemented\n", 1),
    "dcgmi": ("Error: unable to establish a connection to the specified host: localhost\n"
              "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n", 255),
    "ipmitool": ("Could not open device at /dev/ipmi0 or /dev/ipmi/0 or /dev/ipmidev/0: No such file or directory\n",
                 1),
    "docker": ("permission denied while trying to connect to the Docker daemon socket at "
               "unix:///var/run/docker.sock: Get \"http://%2Fvar%2Frun%2Fdocker.sock/v1.24/info\": dial unix "
               "/var/run/docker.sock: connect: permission denied\n", 1),
    "py-spy": ("Permission Denied: Try running again with elevated permissions by going 'sudo env \"PATH=$PATH\" "
               "!!'\n", 1),
    "ps": ("Error, do this: mount -t proc proc /proc\n", 1),
}
# every other tool a script may call, refusing in general terms
GENERIC_REFUSED = ("lsmod", "modinfo", "nv-fabricmanager", "nvbandwidth", "ip", "nvidia-ctk", "nvidia-container-cli",
                   "nvidia-container-runtime-hook", "ucx_info", "ofed_info", "rpm", "dpkg-query", "nvcc", "df",
                   "all_reduce_perf", "mpirun", "ib_write_bw", "show_gids")
GENERIC = ("{tool}: Operation not permitted\n", 1)


def tool_dir(root: Path, refusing: bool) -> Path:
    """A PATH directory: only python3, or python3 plus every tool refusing as it really does."""
    bin_dir = root / ("refusing" if refusing else "bare")
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "python3").symlink_to(sys.executable)
    if refusing:
        tools = {**{name: (GENERIC[0].format(tool=name), GENERIC[1]) for name in GENERIC_REFUSED}, **REFUSALS}
        for name, (stderr, rc) in tools.items():
            # printf is a shell builtin: PATH holds nothing else to call
            body = f"#!/bin/sh\nprintf '%s' {shlex.quote(stderr)} >&2\nexit {rc}\n"
            path = bin_dir / name
            path.write_text(body)
            path.chmod(0o755)
    return bin_dir


def run_check(spec: CheckSpec, bin_dir: Path, sysroot: Path, prof: dict[str, Any]) -> CheckResult:
    env = {"PATH": str(bin_dir), "AIDAI_SYSROOT": str(sysroot), **JOB_ENV}
    executor = LocalExecutor(env=env, python=[sys.executable])
    args = {"host": "node-1", "profile": prof, "known_bad": load_known_bad(), "window_s": 7200, "sample_s": 0.05,
            "server_wait_s": 0.05, "sample_interval_s": 0.01}
    return to_result(spec, "node-1", executor.run_script(spec.script_path, args, spec.timeout_s))


def assert_unknown(result: CheckResult, context: str) -> None:
    detail = f"{context}: {result.verdict.value} {result.summary!r} findings={[f.id for f in result.findings]}"
    assert result.verdict == Verdict.UNKNOWN, detail
    assert (result.reason or "").strip() and result.summary.strip(), detail
    assert not result.summary.startswith("script exited"), detail  # the script answered, it did not crash


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("unknown-hosts")
    sysroot = root / "sysroot"
    sysroot.mkdir()
    return {"bare": tool_dir(root, False), "refusing": tool_dir(root, True), "sysroot": sysroot}


@pytest.mark.parametrize("prof", sorted(PROFILES))
@pytest.mark.parametrize("check_id", CHECKS)
def test_tool_missing_is_unknown(hosts: dict[str, Path], check_id: str, prof: str) -> None:
    result = run_check(MANIFEST.get(check_id), hosts["bare"], hosts["sysroot"], PROFILES[prof])
    assert_unknown(result, f"{check_id} with no tools, profile {prof}")
    assert any(word in (result.reason or "").lower() for word in ("not found", "no ", "not ", "cannot", "unknown")), \
        f"{check_id}: the reason does not say what was missing: {result.reason!r}"


@pytest.mark.parametrize("prof", sorted(PROFILES))
@pytest.mark.parametrize("check_id", CHECKS)
def test_refused_tools_are_unknown(hosts: dict[str, Path], check_id: str, prof: str) -> None:
    result = run_check(MANIFEST.get(check_id), hosts["refusing"], hosts["sysroot"], PROFILES[prof])
    assert_unknown(result, f"{check_id} with refusing tools, profile {prof}")


# the measured machine: a plain VM with no GPU, no RDMA NIC, no systemd; its /proc and /sys are readable
PLAIN_HOST = Path(__file__).parent / "fixtures" / "unknown" / "plain_host"
# what that inventory would say of it: no NVIDIA GPU, no RDMA NIC, nothing else known
NO_GPU_PROFILE = {**NULL_PROFILE, "gpu_count": 0, "hca_count": 0, "nvswitch": False, "nvlink_links": 0}
# PASS on the plain host is right only where the check saw that its subject is absent and none is expected
SEEN_ABSENT = {"nic_config", "rdma_userspace", "roce_config", "gdr_status", "ofed_stack", "fabric_manager"}
# ... or where it read what it judges from /proc: system_config's memlock limit and /dev/shm (no RDMA NIC expected, so
# the limit cannot starve one), while PCIe ACS, with no lspci, stays unseen (for the ACS leaf it is unknown)
SEEN_IN_PROC = {"system_config"}


@pytest.mark.parametrize("tools", ["bare", "refusing"])
@pytest.mark.parametrize("prof", ["no-GPU", "all-null"])
@pytest.mark.parametrize("check_id", CHECKS)
def test_plain_host_without_gpu_has_no_fault(hosts: dict[str, Path], check_id: str, prof: str, tools: str) -> None:
    """No systemd, no GPU, no InfiniBand is no fault: the machine the product was first tried on."""
    expect = NO_GPU_PROFILE if prof == "no-GPU" else NULL_PROFILE
    result = run_check(MANIFEST.get(check_id), hosts[tools], PLAIN_HOST, expect)
    context = f"{check_id} on a plain host, {tools} tools, profile {prof}: {result.verdict.value} {result.summary!r}"
    assert result.verdict not in (Verdict.FAIL, Verdict.WARN), context
    if prof == "no-GPU" and check_id in SEEN_ABSENT:
        assert result.verdict == Verdict.PASS, context
    elif prof == "no-GPU" and check_id in SEEN_IN_PROC:
        assert result.verdict == Verdict.PASS and "acs_unseen" in {f.id for f in result.findings}, context
    else:
        assert_unknown(result, context)


def test_nccl_env_without_nccl_variables_decides_on_the_environment(hosts: dict[str, Path]) -> None:
    """The one exception: with no NCCL/Gloo variable set there is nothing that could point NCCL at the wrong
    interface or HCA, and the script's own environment is all it reads, so PASS needs no tool."""
    spec = MANIFEST.get("nccl_env")
    env = {"PATH": str(hosts["bare"]), "AIDAI_SYSROOT": str(hosts["sysroot"])}
    result = to_result(spec, "node-1", LocalExecutor(env=env, python=[sys.executable]).run_script(
        spec.script_path, {"host": "node-1", "profile": NULL_PROFILE}, spec.timeout_s))
    assert result.verdict == Verdict.PASS, result.summary
    assert "no NCCL/Gloo network variables set" in result.summary


# ---- the measured cases -----------------------------------------------------------------------------
def isolated(fake: FakeTools) -> dict[str, str]:
    """The fake tools' environment; every other tool a script may call answers "not found", so nothing of this
    machine leaks in (the fakes themselves need /bin's cat)."""
    for name in (*REFUSALS, *GENERIC_REFUSED):
        if not (fake.bin / name).exists():
            fake.tool(name, stderr=f"sh: 1: {name}: not found\n", rc=127)
    return fake.env()


def test_fabric_manager_without_systemd_is_not_a_stopped_service(fake_tools: FakeTools) -> None:
    stderr, rc = NO_SYSTEMD
    fake_tools.tool("systemctl", stderr=stderr, rc=rc)
    # an NVSwitch box whose GPU fabric state cannot be read either: nothing says the service is down
    fake_tools.tool("lspci", "0000:05:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] "
                             "(rev a1)\n")
    env = isolated(fake_tools)
    result = run_script("fabric_manager.py", env, {"profile": H100})
    assert result["verdict"] == "UNKNOWN", result
    assert "systemd" in result["summary"] or "systemctl" in result["summary"], result["summary"]
    assert not [f for f in result["findings"] if f["id"] == "fm_not_running"]


def test_fabric_manager_without_systemd_still_reads_the_gpu_fabric_state(fake_tools: FakeTools) -> None:
    stderr, rc = NO_SYSTEMD
    fake_tools.tool("systemctl", stderr=stderr, rc=rc)
    fake_tools.tool("nvidia-smi", "".join(f"GPU 00000000:{18 + i:02X}:00.0\n    Fabric\n        State"
                                          f"                         : Completed\n        Status"
                                          f"                        : Success\n" for i in range(8)))
    env = isolated(fake_tools)
    result = run_script("fabric_manager.py", env, {"profile": H100})
    assert result["verdict"] == "PASS", result
    assert result["metrics"]["service_state"] is None


@pytest.mark.parametrize("hca_count,verdict", [(0, "PASS"), (None, "UNKNOWN")])
def test_nic_config_on_a_host_without_infiniband(fake_tools: FakeTools, hca_count: int | None,
                                                  verdict: str) -> None:
    fake_tools.file("/sys/class/net/eth0/operstate", "up\n")
    fake_tools.file("/sys/class/net/lo/operstate", "unknown\n")
    fake_tools.tool("ip", '[{"ifname":"lo","link_type":"loopback","operstate":"UNKNOWN"},'
                          '{"ifname":"eth0","link_type":"ether","operstate":"UP"}]')
    env = isolated(fake_tools)
    result = run_script("nic_config.py", env, {"profile": {**NULL_PROFILE, "hca_count": hca_count}})
    assert result["verdict"] == verdict, result
    if verdict == "UNKNOWN":
        assert "hca_count" in result["summary"], result["summary"]


def test_nic_config_still_fails_a_host_that_lost_its_hcas(fake_tools: FakeTools) -> None:
    fake_tools.file("/sys/class/net/eth0/operstate", "up\n")
    env = isolated(fake_tools)
    result = run_script("nic_config.py", env, {"profile": H100})
    assert result["verdict"] == "FAIL" and result["findings"][0]["id"] == "no_rdma_devices", result


@pytest.mark.parametrize("prof", sorted(PROFILES))
def test_container_runtime_on_a_plain_host_without_gpu(fake_tools: FakeTools, prof: str) -> None:
    fake_tools.file("/proc/1/cgroup", "0::/init.scope\n")
    env = isolated(fake_tools)
    result = run_script("container_runtime.py", env, {"profile": PROFILES[prof]})
    assert result["verdict"] != "FAIL", result
    assert result["verdict"] == "UNKNOWN", result


@pytest.mark.parametrize("gpu_count,verdict", [(None, "UNKNOWN"), (0, "PASS"), (8, "FAIL")])
def test_container_without_gpu_devices_fails_only_when_gpus_are_expected(fake_tools: FakeTools,
                                                                         gpu_count: int | None,
                                                                         verdict: str) -> None:
    fake_tools.file("/.dockerenv", "")
    fake_tools.file("/dev/null", "")  # a /dev that lists, without any nvidia node
    env = isolated(fake_tools)
    result = run_script("container_runtime.py", env, {"profile": {**NULL_PROFILE, "gpu_count": gpu_count}})
    assert result["verdict"] == verdict, result


@pytest.mark.parametrize("gpu_count,verdict", [(None, "UNKNOWN"), (0, "PASS"), (8, "FAIL")])
def test_node_provisioning_without_nvidia_gpu(fake_tools: FakeTools, gpu_count: int | None, verdict: str) -> None:
    fake_tools.tool("dpkg-query", "ii \tbash\t5.1-6ubuntu1\nii \tcoreutils\t8.32-4.1ubuntu1\n")
    env = isolated(fake_tools)
    result = run_script("node_provisioning.py", env, {"profile": {**NULL_PROFILE, "gpu_count": gpu_count}})
    assert result["verdict"] == verdict, result


def test_node_provisioning_sees_an_nvidia_gpu_on_the_bus_without_a_profile(fake_tools: FakeTools) -> None:
    fake_tools.tool("dpkg-query", "ii \tbash\t5.1-6ubuntu1\n")
    fake_tools.file("/sys/bus/pci/devices/0000:18:00.0/vendor", "0x10de\n")
    fake_tools.file("/sys/bus/pci/devices/0000:18:00.0/class", "0x030200\n")
    env = isolated(fake_tools)
    result = run_script("node_provisioning.py", env, {"profile": NULL_PROFILE})
    assert result["verdict"] == "FAIL", result


@pytest.mark.parametrize("hca_count,ib_devices,verdict", [(0, False, "PASS"), (None, False, "UNKNOWN"),
                                                          (8, False, "FAIL"), (None, True, "FAIL")])
def test_system_config_memlock_matters_only_with_rdma(fake_tools: FakeTools, hca_count: int | None,
                                                       ib_devices: bool, verdict: str) -> None:
    fake_tools.file("/proc/self/limits", "Limit                     Soft Limit           Hard Limit           Units\n"
                                         "Max locked memory         65536                65536                bytes\n")
    fake_tools.file("/proc/mounts", "shm /dev/shm tmpfs rw,nosuid,nodev,size=33554432k 0 0\n")
    fake_tools.tool("lspci", "0000:00:00.0 Host bridge: Intel Corporation Device 09a2 (rev 04)\n"
                             "\tControl: I/O- Mem- BusMaster-\n")
    fake_tools.file("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "performance\n")
    if ib_devices:
        fake_tools.file("/sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n")
    env = isolated(fake_tools)
    result = run_script("system_config.py", env, {"profile": {**NULL_PROFILE, "hca_count": hca_count}})
    assert result["verdict"] == verdict, result
    assert ("memlock" in {f["id"] for f in result["findings"] if f["severity"] == "FAIL"}) == (verdict == "FAIL")


def test_script_run_by_hand_assumes_no_sku(fake_tools: FakeTools) -> None:
    """Without a profile a script has no expectations: a one-GPU host is not 'missing 7 GPUs'."""
    fake_tools.tool("nvidia-smi", "0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, GPU-1, 1, 96.00.30.00.01, Enabled, "
                                  "Disabled, Enabled, Default\n")
    fake_tools.tool("lspci", "0000:18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] "
                             "[10de:2330] (rev a1)\n")
    env = isolated(fake_tools)
    result = run_script("gpu_inventory.py", env, None)
    assert result["verdict"] == "PASS", result
    assert result["metrics"]["expected_gpu_count"] is None
    # without the bus to compare with, the driver's list alone cannot show a GPU it never initialised
    fake_tools.tool("lspci", stderr="pcilib: Cannot open /proc/bus/pci\n", rc=1)
    result = run_script("gpu_inventory.py", env, None)
    assert result["verdict"] == "UNKNOWN" and "gpu_count" in result["summary"], result


def test_a_journal_that_hides_the_system_is_not_a_quiet_kernel_log(fake_tools: FakeTools) -> None:
    """Without the adm/systemd-journal group journalctl exits 0 with a hint and no kernel line at all."""
    fake_tools.tool("journalctl", "-- No entries --\n", stderr=REFUSALS["journalctl"][0].replace(
        "No journal files were opened due to insufficient permissions.\n", ""))
    fake_tools.tool("dmesg", stderr=REFUSALS["dmesg"][0], rc=1)
    env = isolated(fake_tools)
    for script in ("xid_scan", "host_memory"):
        result = run_script(f"{script}.py", env, {"profile": H100})
        assert result["verdict"] == "UNKNOWN", result
        assert "not seeing messages" in result["summary"] and "Operation not permitted" in result["summary"], result


def test_driver_health_refused_by_nvml_still_reports_what_the_kernel_log_shows(fake_tools: FakeTools) -> None:
    stderr, rc = REFUSALS["nvidia-smi"]
    fake_tools.tool("nvidia-smi", stderr=stderr, rc=rc)
    fake_tools.file("/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  "
                                                   "Thu Feb 15 2024\n")
    env = isolated(fake_tools)
    result = run_script("driver_health.py", env, {"profile": H100})
    assert result["verdict"] == "UNKNOWN" and "Insufficient Permissions" in result["summary"], result
    assert not [f for f in result["findings"] if f["id"] == "nvidia_smi_error"]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S,000000+00:00", time.gmtime(time.time() - 60))
    fake_tools.tool("dmesg", f"{stamp} nvidia-uvm: uvm_gpu_init failed: error 0x1\n")
    result = run_script("driver_health.py", env, {"profile": H100})
    assert result["verdict"] == "FAIL" and result["findings"][0]["id"] == "uvm_errors", result


# ---- null expectations with real evidence ------------------------------------------------------------------
def gpu_fixture(name: str) -> str:
    return fixture_text("gpu", name)


def test_nvlink_without_expectation_compares_the_gpus_with_each_other(fake_tools: FakeTools) -> None:
    env = isolated(fake_tools)
    fake_tools.tool("nvidia-smi", gpu_fixture("azurehpc_good_nvlink_status.txt"))
    result = run_script("nvlink_status.py", env, {"profile": NULL_PROFILE})
    assert result["verdict"] == "PASS" and result["metrics"]["expected_links"] is None, result
    # GPU6 lost all its links and GPU3 one, while their peers have twelve each
    one = gpu_fixture("azurehpc_good_nvlink_status.txt")  # GPU 7 of an A100 node: twelve links at 25 GB/s
    blocks = {i: one.replace("GPU 7:", f"GPU {i}:", 1) for i in range(8)}
    blocks[6] = blocks[6].splitlines()[0] + "\n\t all links are inactive\n"
    blocks[3] = blocks[3].replace("Link 2: 25 GB/s", "Link 2: <inactive>")
    fake_tools.tool("nvidia-smi", "".join(blocks[i] for i in sorted(blocks)))
    result = run_script("nvlink_status.py", env, {"profile": NULL_PROFILE})
    assert result["verdict"] == "FAIL", result
    assert {f["entity"] for f in result["findings"] if f["severity"] == "FAIL"} == {"GPU3", "GPU6"}


def test_nvlink_all_inactive_without_expectation_is_unknown(fake_tools: FakeTools) -> None:
    env = isolated(fake_tools)
    fake_tools.tool("nvidia-smi", "".join(f"GPU {i}: NVIDIA L40S (UUID: GPU-{i})\n\t all links are inactive\n"
                                          for i in range(2)))
    result = run_script("nvlink_status.py", env, {"profile": NULL_PROFILE})
    assert result["verdict"] == "UNKNOWN" and "nvlink_links" in result["summary"], result
    result = run_script("nvlink_status.py", env, {"profile": {**NULL_PROFILE, "nvlink_links": 0}})
    assert result["verdict"] == "PASS", result


def test_topology_without_expectation_judges_the_pairs_against_each_other(fake_tools: FakeTools) -> None:
    env = isolated(fake_tools)
    text = gpu_fixture("nvsentinel_topo_m_h100_8gpu_mlx5cols.txt")
    fake_tools.tool("nvidia-smi", text)
    result = run_script("topology.py", env, {"profile": NULL_PROFILE})
    assert result["verdict"] == "PASS" and result["metrics"]["not_judged"] == ["GPU-NIC affinity"], result
    rows = [r.replace("NV18", "NV16") if r.startswith("GPU2") else r for r in text.splitlines()]
    rows = [r if r.startswith(("GPU2", "\t")) or not r.startswith("GPU") else
            "\t".join(c if k != 3 else "NV16" for k, c in enumerate(r.split("\t"))) for r in rows]
    fake_tools.tool("nvidia-smi", "\n".join(rows) + "\n")
    result = run_script("topology.py", env, {"profile": NULL_PROFILE})
    assert result["verdict"] == "FAIL", result
    assert {(f["id"], f["entity"]) for f in result["findings"]} == {("nvlink_degraded", "GPU2")}


def test_topology_of_a_pcie_box_without_expectation_is_unknown(fake_tools: FakeTools) -> None:
    env = isolated(fake_tools)
    fake_tools.tool("nvidia-smi", "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
                                  "GPU0\t X \tSYS\t0-15\t0\nGPU1\tSYS\t X \t0-15\t0\n")
    result = run_script("topology.py", env, {"profile": NULL_PROFILE})
    assert result["verdict"] == "UNKNOWN" and "no expectation" in result["summary"], result
    result = run_script("topology.py", env, {"profile": {**NULL_PROFILE, "nvlink_links": 0, "hca_count": 0}})
    assert result["verdict"] == "PASS", result


def test_clocks_without_temperature_limit_still_reads_the_throttle_reasons(fake_tools: FakeTools) -> None:
    env = isolated(fake_tools)
    fake_tools.tool("nvidia-smi", "0, 34, 40, 72.00, 700.00, 700.00, 1980, 1980, 0, 0x0000000000000001\n"
                                  "1, 91, 97, 690.00, 700.00, 700.00, 1100, 1980, 100, 0x0000000000000080\n")
    result = run_script("clocks_thermal_power.py", env, {"profile": NULL_PROFILE})
    fails = {(f["id"], f["entity"]) for f in result["findings"] if f["severity"] == "FAIL"}
    assert fails == {("power_brake", "GPU1")}, result  # 91 C is not compared: no temp_limit_c
    assert result["metrics"]["temp_limit_c"] is None


def test_host_device_bw_without_expectation_reports_but_does_not_judge(fake_tools: FakeTools) -> None:
    env = isolated(fake_tools)
    fake_tools.tool("nvbandwidth", gpu_fixture("superbench_nvbandwidth_results.log"))
    result = run_script("host_device_bw.py", env, {"profile": NULL_PROFILE})
    assert result["verdict"] == "UNKNOWN" and "h2d_gbps" in result["summary"], result
    assert result["metrics"]["host_to_device_gbps"] == {"GPU0": 369.36, "GPU1": 299.33, "GPU2": 412.11}


def p2p_matrix(values: list[list[float | None]]) -> str:
    head = "Running device_to_device_memcpy_read_ce.\nmemcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)\n"
    cols = "          " + "".join(f"{i:>10}" for i in range(len(values))) + "\n"
    rows = "".join(f"{i:>6}" + "".join(f"{'N/A' if v is None else v:>10}" for v in row) + "\n"
                   for i, row in enumerate(values))
    return head + cols + rows + "SUM device_to_device_memcpy_read_ce 1000.00\n"


def test_p2p_without_expectation_still_finds_the_slow_gpu(fake_tools: FakeTools) -> None:
    env = isolated(fake_tools)
    even = [[None if r == c else 390.0 for c in range(4)] for r in range(4)]
    fake_tools.tool("nvbandwidth", p2p_matrix(even))
    result = run_script("p2p_bw.py", env, {"profile": NULL_PROFILE})
    assert result["verdict"] == "UNKNOWN" and "p2p_gbps" in result["summary"], result
    slow = [[None if r == c else (150.0 if 3 in (r, c) else 390.0) for c in range(4)] for r in range(4)]
    fake_tools.tool("nvbandwidth", p2p_matrix(slow))
    result = run_script("p2p_bw.py", env, {"profile": NULL_PROFILE})
    assert {(f["id"], f["entity"]) for f in result["findings"]} == {("p2p_low_gpu", "GPU3")}, result


def test_p2p_at_pcie_rates_fails_only_where_nvlink_is_expected(fake_tools: FakeTools) -> None:
    env = isolated(fake_tools)
    fake_tools.tool("nvbandwidth", p2p_matrix([[None if r == c else 25.0 for c in range(2)] for r in range(2)]))
    assert run_script("p2p_bw.py", env, {"profile": H100})["verdict"] == "FAIL"
    pcie_box = {**NULL_PROFILE, "nvlink_links": 0}
    assert run_script("p2p_bw.py", env, {"profile": pcie_box})["verdict"] == "UNKNOWN"
    assert run_script("p2p_bw.py", env, {"profile": {**pcie_box, "p2p_gbps": 20.0}})["verdict"] == "PASS"


def test_nccl_intranode_needs_a_gpu_count_and_a_busbw_expectation(fake_tools: FakeTools) -> None:
    env = isolated(fake_tools)
    fake_tools.tool("all_reduce_perf", fixture_text("net", "gcm_nccltests_all_reduce_a100_8gpu_pass.log"))
    result = run_script("nccl_intranode.py", env, {"profile": NULL_PROFILE})
    assert result["verdict"] == "UNKNOWN" and "how many GPUs" in result["summary"], result
    result = run_script("nccl_intranode.py", env, {"profile": {**NULL_PROFILE, "gpu_count": 8}})
    assert result["verdict"] == "UNKNOWN" and "nccl_intranode_busbw" in result["summary"], result
    assert result["metrics"]["busbw"] > 0


def test_nic_config_without_count_or_rate_expectations(fake_tools: FakeTools) -> None:
    env = isolated(fake_tools)
    for dev in range(2):
        base = f"/sys/class/infiniband/mlx5_{dev}"
        fake_tools.file(f"{base}/ports/1/state", "4: ACTIVE\n")
        fake_tools.file(f"{base}/ports/1/phys_state", "5: LinkUp\n")
        fake_tools.file(f"{base}/ports/1/rate", "400 Gb/sec (4X NDR)\n")
        fake_tools.file(f"{base}/ports/1/link_layer", "InfiniBand\n")
    result = run_script("nic_config.py", env, {"profile": NULL_PROFILE})
    assert result["verdict"] == "PASS" and "no expectation for hca_count / ib_rate" in result["summary"], result
    result = run_script("nic_config.py", env, {"profile": {**NULL_PROFILE, "hca_count": 8}})
    assert result["verdict"] == "FAIL", result


def test_generic_shims_cover_every_tool_the_scripts_name() -> None:
    """The refusing host must refuse every tool a script calls, or a real one on this machine could answer."""
    named: set[str] = set()
    folder = MANIFEST.checks[0].script_path.parent
    for script in [c.script_path for c in MANIFEST.checks] + [folder / lib for lib in LIB_SCRIPTS]:
        named |= set(re.findall(r'run\(\["([\w.-]+)"', script.read_text()))
    assert named <= set(REFUSALS) | set(GENERIC_REFUSED), named - set(REFUSALS) - set(GENERIC_REFUSED)
