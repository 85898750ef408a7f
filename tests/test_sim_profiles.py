"""Every SKU profile in profiles.yaml: its facts are sourced and consistent, and a simulated healthy host of it
shows those facts in every tool (nvidia-smi, lspci, RDMA tools, sysfs, DMI) -- no NVLink, NVSwitch or HCA
where the SKU has none -- while faults render where they apply and are refused where they cannot happen."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.checks.manifest import load_profiles
from agent.checks.manifest import profile as load_profile
from agent.cli.sim_cmd import app
from agent.sim.faults import FaultError
from agent.sim.healthy import healthy_host
from agent.sim.scenario import build_hosts
from agent.sim.state import HostState, hardware
from tests.conftest import run_script, sim_host_env

PROFILES = load_profiles()
NAMES = sorted(PROFILES)
KEYS = ("gpu_count", "gpu_name", "pci_device_id", "memory_mib", "compute_capability", "nvswitch", "nvlink_links",
        "nvlink_link_gbps", "topo_nvlink", "pcie_gen", "pcie_width", "temp_limit_c", "power_limit_w",
        "max_sm_clock_mhz", "hca_count", "ib_rate", "ib_mtu", "h2d_gbps", "p2p_gbps", "nccl_intranode_busbw",
        "nccl_internode_busbw", "ib_write_bw_gbps", "gemm_tflops", "straggler_ratio", "form_factor", "gpu_counts",
        "link_layer", "sources", "sim_machine")
PATH_CELLS = {"PIX", "PXB", "PHB", "NODE", "SYS"}


@pytest.fixture(scope="module")
def envs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """One healthy simulated host per profile, shared by the read-only tests below."""
    root = tmp_path_factory.mktemp("profiles")
    return {name: sim_host_env(root / name, profile=name) for name in NAMES}


def sh(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=60)


def sysroot(env: dict[str, str]) -> Path:
    return Path(env["AIDAI_SYSROOT"])


def nvlink(prof: dict[str, Any]) -> bool:
    return bool(prof["nvlink_links"])


# ---- the profiles themselves ----------------------------------------------------------------------------
def test_the_rented_skus_are_there() -> None:
    for name in ("H100-SXM-8", "H200-SXM-8", "A100-SXM-8", "B200-SXM-8", "H100-PCIe", "A100-PCIe-40", "A100-PCIe-80",
                 "L40S", "L4", "A10G", "RTX-6000-Ada"):
        assert name in PROFILES


@pytest.mark.parametrize("name", NAMES)
def test_profile_is_complete_consistent_and_sourced(name: str) -> None:
    prof = PROFILES[name]
    assert not [k for k in KEYS if k not in prof], f"{name} lacks keys"
    assert prof["sources"] and all(isinstance(s, str) and s.strip() for s in prof["sources"])
    assert re.fullmatch(r"[0-9a-f]{4}", prof["pci_device_id"])
    assert prof["form_factor"] in ("sxm", "pcie")
    assert prof["gpu_count"] in prof["gpu_counts"]
    assert prof["link_layer"] in ("InfiniBand", "Ethernet", None)
    assert (prof["hca_count"] == 0) == (prof["link_layer"] is None)
    if prof["hca_count"] == 0:
        assert prof["ib_rate"] is None and prof["ib_mtu"] is None and prof["ib_write_bw_gbps"] is None
    if not nvlink(prof):
        assert prof["nvlink_link_gbps"] is None and prof["topo_nvlink"] is None and not prof["nvswitch"]
    else:
        assert prof["topo_nvlink"] == f"NV{prof['nvlink_links']}"
    assert prof["sim_machine"]["kind"] in ("vm", "bare-metal")
    assert hardware.part(prof["pci_device_id"]) is not hardware.GENERIC, "the simulator knows the part"


def test_profiles_command_lists_them() -> None:
    result = CliRunner().invoke(app, ["profiles", "--json"])
    assert result.exit_code == 0, result.output
    assert {row["profile"] for row in json.loads(result.output)} == set(PROFILES)


# ---- what a healthy host of each profile shows --------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_query_csv_names_the_sku(envs: dict[str, dict[str, str]], name: str) -> None:
    prof = PROFILES[name]
    out = sh(envs[name], "nvidia-smi", "--query-gpu=name,pci.device_id,memory.total,power.limit",
             "--format=csv,noheader")
    want = f"{prof['gpu_name']}, 0x{prof['pci_device_id'].upper()}10DE, {prof['memory_mib']} MiB, " \
           f"{float(prof['power_limit_w']):.2f} W"
    assert out.returncode == 0 and out.stdout.splitlines() == [want] * prof["gpu_count"]
    q = sh(envs[name], "nvidia-smi", "-q").stdout
    assert q.count(f"Product Name                          : {prof['gpu_name']}") == prof["gpu_count"]
    assert f"Max Power Limit                   : {float(prof['power_limit_w']):.2f} W" in q
    assert f"SM                                : {prof['max_sm_clock_mhz']} MHz" in q


@pytest.mark.parametrize("name", NAMES)
def test_nvlink_status_only_where_the_sku_has_nvlink(envs: dict[str, dict[str, str]], name: str) -> None:
    prof = PROFILES[name]
    out = sh(envs[name], "nvidia-smi", "nvlink", "-s")
    assert out.returncode == 0
    if not nvlink(prof):
        assert out.stdout == "", "a GPU without NVLink prints nothing"
        return
    assert out.stdout.count("GPU ") == prof["gpu_count"]
    speed = f"{float(prof['nvlink_link_gbps']):g}"
    assert out.stdout.count(f": {speed} GB/s") == prof["gpu_count"] * prof["nvlink_links"]


@pytest.mark.parametrize("name", NAMES)
def test_topology_matrix(envs: dict[str, dict[str, str]], name: str) -> None:
    prof = PROFILES[name]
    rows = [line.split("\t") for line in sh(envs[name], "nvidia-smi", "topo", "-m").stdout.splitlines()
            if line.startswith("GPU")]
    assert len(rows) == prof["gpu_count"]
    cells = {c.strip() for row in rows for c in row[1:prof["gpu_count"] + 1]} - {"X"}
    if nvlink(prof):
        assert cells == {prof["topo_nvlink"]}
    else:
        assert cells <= PATH_CELLS
    nics = len(rows[0]) - 1 - prof["gpu_count"] - 3
    assert nics == (prof["hca_count"] + 1 if prof["hca_count"] else 0)  # the rails plus the control-plane port


@pytest.mark.parametrize("name", NAMES)
def test_lspci_lists_gpus_nvswitches_and_nics(envs: dict[str, dict[str, str]], name: str) -> None:
    prof = PROFILES[name]
    nvidia = sh(envs[name], "lspci", "-nn", "-d", "10de:").stdout.splitlines()
    gpus = [line for line in nvidia if re.search(r"\[030[02]\]", line)]
    assert len(gpus) == prof["gpu_count"]
    assert all(f"[10de:{prof['pci_device_id']}]" in line for line in gpus)
    switches = [line for line in nvidia if "[0680]" in line]
    # HGX B200's NVLink 5 switches are no host PCI functions (hardware.py); older HGX boards list theirs
    assert len(switches) == (hardware.part(prof["pci_device_id"]).nvswitch_count
                             if prof["nvswitch"] and name != "B200-SXM-8" else 0)
    mellanox = sh(envs[name], "lspci", "-nn", "-d", "15b3:").stdout.splitlines()
    assert sum("[0207]" in line for line in mellanox) == prof["hca_count"]
    assert len(mellanox) == (prof["hca_count"] + 1 if prof["hca_count"] else 0)


@pytest.mark.parametrize("name", NAMES)
def test_rdma_tools_match_the_nics(envs: dict[str, dict[str, str]], name: str) -> None:
    prof, env = PROFILES[name], envs[name]
    ibstat, devinfo = sh(env, "ibstat"), sh(env, "ibv_devinfo")
    if prof["hca_count"] == 0:
        # libibumad treats a missing /sys/class/infiniband as an empty list: ibstat prints nothing and succeeds
        assert (ibstat.returncode, ibstat.stdout) == (0, "")
        assert devinfo.returncode != 0 and devinfo.stderr == "No IB devices found\n"
        assert not (sysroot(env) / "sys/class/infiniband").exists()
        assert sh(env, "ip", "-o", "link").stdout.count("eth0") == 1, "the Ethernet NIC stays"
        return
    assert ibstat.returncode == 0 and ibstat.stdout.count(f"Link layer: {prof['link_layer']}") == prof["hca_count"]
    assert ibstat.stdout.count(f"Rate: {prof['ib_rate']}") == prof["hca_count"]
    assert devinfo.returncode == 0 and devinfo.stdout.count("hca_id:") == prof["hca_count"] + 1


@pytest.mark.parametrize("name", NAMES)
def test_sysfs_and_dmi_identify_the_machine(envs: dict[str, dict[str, str]], name: str) -> None:
    prof, root = PROFILES[name], sysroot(envs[name])
    devices = {}
    for dev in (root / "sys/bus/pci/devices").iterdir():
        devices[dev.name] = tuple((dev / f).read_text().strip() for f in ("vendor", "device", "class"))
    gpu_class = "0x030000" if hardware.part(prof["pci_device_id"]).pci_class == "0300" else "0x030200"
    gpus = [d for d in devices.values() if d[0] == "0x10de" and d[2] == gpu_class]
    assert gpus == [("0x10de", f"0x{prof['pci_device_id']}", gpu_class)] * prof["gpu_count"]
    assert any(d[2] == "0x068000" for d in devices.values()) == (prof["nvswitch"] and name != "B200-SXM-8")
    nics = sorted(d[2] for d in devices.values() if d[0] == "0x15b3")
    assert nics == (["0x020000"] + ["0x020700"] * prof["hca_count"] if prof["hca_count"] else [])
    machine = prof["sim_machine"]
    dmi = root / "sys/class/dmi/id"
    assert (dmi / "sys_vendor").read_text().strip() == machine["sys_vendor"]
    assert (dmi / "product_name").read_text().strip() == machine["product_name"]
    flags = re.search(r"^flags\s*:(.*)$", (root / "proc/cpuinfo").read_text(), re.M)
    assert flags is not None and ("hypervisor" in flags.group(1).split()) == (machine["kind"] == "vm")


@pytest.mark.parametrize("name", NAMES)
def test_no_fabric_manager_without_nvswitch(envs: dict[str, dict[str, str]], name: str) -> None:
    prof, env = PROFILES[name], envs[name]
    fm = sh(env, "nv-fabricmanager", "--version")
    active = sh(env, "systemctl", "is-active", "nvidia-fabricmanager").stdout.strip()
    kernel = sh(env, "dmesg").stdout
    fabric = re.findall(r"^        State\s+: (.+)$", sh(env, "nvidia-smi", "-q").stdout, re.M)
    if prof["nvswitch"]:
        assert fm.returncode == 0 and active == "active" and set(fabric) == {"Completed"}
    else:
        assert fm.returncode == 127 and active == "inactive" and set(fabric) == {"N/A"}
        assert "nvswitch" not in kernel.lower()


@pytest.mark.parametrize("name", ["L4", "RTX-6000-Ada", "B200-SXM-8"])
def test_inventory_check_passes_on_a_healthy_host(envs: dict[str, dict[str, str]], name: str) -> None:
    result = run_script("gpu_inventory.py", envs[name], {"profile": load_profile(name), "host": "node-1"})
    assert result["verdict"] == "PASS", result["summary"]


def test_a_new_gpu_gets_a_driver_and_torch_that_run_it() -> None:
    host = healthy_host("node-1", "B200-SXM-8", load_profile("B200-SXM-8"))
    assert host.driver.kernel_module_version == "570.133.20" and host.driver.cuda_version == "12.8"
    assert "sm_100" in host.software.torch_arch_list and host.software.torch_cuda == "12.8"


def test_roce_profile_builds_ethernet_rails() -> None:
    prof = {**load_profile("H100-SXM-8"), "link_layer": "Ethernet"}
    host = healthy_host("node-1", "H100-SXM-8", prof)
    rails = [h for h in host.hcas if not h.control_plane]
    assert rails and {h.link_layer for h in rails} == {"Ethernet"} and host.env["NCCL_IB_GID_INDEX"] == "3"


# ---- faults on every profile ----------------------------------------------------------------------------
def hosts_with(name: str, *faults: dict[str, Any]) -> HostState:
    return build_hosts(list(faults), [], name)[0]


@pytest.mark.parametrize("name", NAMES)
def test_gpu_faults_render_on_every_profile(tmp_path: Path, name: str) -> None:
    prof = PROFILES[name]
    device = prof["pci_device_id"]
    ecc = sim_host_env(tmp_path / "ecc", [{"fault": "gpu.ecc_uncorrectable", "gpu": 0}], profile=name)
    rows = sh(ecc, "nvidia-smi", "--query-gpu=index,ecc.errors.uncorrected.volatile.total", "--format=csv,noheader")
    assert rows.stdout.splitlines()[0] == "0, 1"
    assert "NVRM: Xid (PCI:" in sh(ecc, "dmesg").stdout
    missing = sim_host_env(tmp_path / "missing", [{"fault": "gpu.missing", "gpu": prof["gpu_count"] - 1}],
                           profile=name)
    listed = sh(missing, "nvidia-smi", "--query-gpu=index", "--format=csv,noheader").stdout.splitlines()
    assert len(listed) == prof["gpu_count"] - 1, "nvidia-smi lost the GPU"
    assert len(sh(missing, "lspci", "-d", f"10de:{device}").stdout.splitlines()) == prof["gpu_count"], \
        "lspci still lists it"
    sysfs = [d for d in (sysroot(missing) / "sys/bus/pci/devices").iterdir()
             if (d / "device").read_text().strip() == f"0x{device}"]
    assert len(sysfs) == prof["gpu_count"], "and so does /sys/bus/pci"
    gone = sim_host_env(tmp_path / "gone", [{"fault": "gpu.fallen_off_bus", "gpu": 0}], profile=name)
    assert sum("(rev ff)" in line for line in sh(gone, "lspci", "-d", f"10de:{device}").stdout.splitlines()) == 1


@pytest.mark.parametrize("name", NAMES)
def test_nvlink_faults_apply_or_refuse(name: str) -> None:
    if not nvlink(PROFILES[name]):
        for fault in ({"fault": "nvlink.link_down", "gpu": 0}, {"fault": "nvlink.not_enabled"}):
            with pytest.raises(FaultError, match=f"{name} has no NVLink"):
                hosts_with(name, fault)
        return
    host = hosts_with(name, {"fault": "nvlink.link_down", "gpu": 0, "links": [0, 1]})
    assert host.gpu(0).nvlink[:2] == [None, None]


@pytest.mark.parametrize("name", NAMES)
def test_rdma_faults_apply_or_refuse(name: str) -> None:
    if PROFILES[name]["hca_count"] == 0:
        for fault in ({"fault": "ib.port_down"}, {"fault": "roce.mtu_mismatch"}, {"fault": "gdr.peermem_missing"}):
            with pytest.raises(FaultError, match=f"{name} has no RDMA NIC"):
                hosts_with(name, fault)
        return
    host = hosts_with(name, {"fault": "ib.port_down", "hca": "mlx5_3"})
    assert host.hca("mlx5_3").state == "Down"


@pytest.mark.parametrize("name", NAMES)
def test_fabric_manager_fault_needs_nvswitch(name: str) -> None:
    if not PROFILES[name]["nvswitch"]:
        with pytest.raises(FaultError, match=f"{name} has no NVSwitch"):
            hosts_with(name, {"fault": "fabricmanager.down"})
        return
    assert hosts_with(name, {"fault": "fabricmanager.down"}).fabric_manager.active is False


def test_mig_fault_needs_a_mig_capable_gpu() -> None:
    with pytest.raises(FaultError, match="has no MIG"):
        hosts_with("L4", {"fault": "user.mig_misuse"})
    assert hosts_with("A100-PCIe-80", {"fault": "user.mig_misuse"}).gpu(0).mig_mode
