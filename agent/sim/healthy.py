"""Healthy simulated hosts built from a SKU profile (verification_scripts/profiles.yaml).

Defaults follow FAULTS.md: H100-SXM-8 with NVSwitch, 8 NDR IB HCAs plus one Ethernet port,
driver 535.161.08, CUDA 12.2, NCCL 2.18.5, torch 2.1. Every other profile gets what its hardware
needs: its machine (`sim_machine`), its PCIe layout (agent.sim.layout), no NVSwitch, NVLink or RDMA NIC
where the SKU has none, and a driver and torch new enough for the GPU (B200: R570, torch 2.7 + CUDA 12.8).
"""

from __future__ import annotations

import hashlib
from typing import Any

from agent.checks.versions import vkey
from agent.sim.layout import CONTROL_NIC_BUS, Slot, gpu_slots, rail_bus_id
from agent.sim.state import (
    Gid,
    Gpu,
    Hca,
    HostState,
    Machine,
    Mount,
    NetIf,
    PcieSwitch,
    SelEvent,
)
from agent.sim.state.gpu import DRIVER_BUILD_DATE
from agent.sim.state.hardware import NVSWITCH_BUS_IDS, part
from agent.sim.state.net import eui64_gid, guid_gid
from agent.sim.tools._faketorch import supports
from agent.sim.tools._nvml import bdf_numbers
from agent.sim.tools._versions import driver_max_cuda

MACHINE_KEYS = ("kind", "sys_vendor", "product_name", "instance", "cpus", "smt", "cpu_model")
# torch 2.7.0+cu128 wheels (the first with Blackwell kernels) and what they bundle
BLACKWELL_STACK = {"torch": "2.7.0", "torch_cuda": "12.8", "cuda_toolkit": "12.8", "nccl": "2.26.2",
                   "cudnn": "9.7.1"}
BLACKWELL_ARCH = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]
# the first octets of eth0's MAC by provider (EC2 and GCE assign their own); Azure's OUI otherwise, as before
MAC_PREFIX = {"Amazon EC2": "0e:4a:5c", "Google": "42:01:0a"}


def _hex_id(*parts: object, length: int = 8) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:length]


def healthy_host(hostname: str, profile_name: str, profile: dict[str, Any]) -> HostState:
    host = HostState(hostname=hostname, profile=profile_name)
    _machine(host, profile)
    _software(host, profile)
    slots = _gpus(host, profile)
    _network(host, profile, slots)
    _system(host, profile)
    return host


def _machine(host: HostState, profile: dict[str, Any]) -> None:
    spec = profile.get("sim_machine") or {}
    host.machine = Machine(**{k: spec[k] for k in MACHINE_KEYS if k in spec})
    host.numa_nodes = int(spec.get("numa_nodes", host.numa_nodes))
    host.edac.controllers = host.numa_nodes


def _software(host: HostState, profile: dict[str, Any]) -> None:
    """A driver and a torch build that run this GPU, so a healthy host of a new SKU is healthy."""
    need = profile.get("min_driver")
    if need and vkey(host.driver.kernel_module_version) < vkey(str(need)):
        version = str(need)
        host.driver.version = host.driver.kernel_module_version = host.fabric_manager.version = version
        host.driver.cuda_version = driver_max_cuda(version)
    sw = host.software
    if not supports(sw.torch_arch_list, str(profile["compute_capability"])):
        for key, value in BLACKWELL_STACK.items():
            setattr(sw, key, value)
        sw.torch_arch_list = list(BLACKWELL_ARCH)


def _gpus(host: HostState, profile: dict[str, Any]) -> list[Slot]:
    count = int(profile["gpu_count"])
    device_id = str(profile.get("pci_device_id", "2330")).lower()
    info = part(device_id)
    links = int(profile.get("nvlink_links") or 0)
    speed = profile.get("nvlink_link_gbps")
    form = profile.get("form_factor") or ("sxm" if profile.get("nvswitch") else "pcie")
    slots = gpu_slots(str(form), host.machine.is_vm, count, host.numa_nodes)
    for i, slot in enumerate(slots):
        uuid = "GPU-" + "-".join(_hex_id(host.hostname, "gpu", i, k, length=n)
                                 for k, n in ((0, 8), (1, 4), (2, 4), (3, 4), (4, 12)))
        host.gpus.append(Gpu(
            index=i,
            name=str(profile["gpu_name"]),
            bus_id=slot.bus_id,
            uuid=uuid,
            serial=str(1650923000000 + int(_hex_id(host.hostname, "sn", i, length=6), 16) % 1000000),
            vbios=info.vbios,
            memory_total_mib=int(profile["memory_mib"]),
            compute_capability=str(profile["compute_capability"]),
            pci_device_id=device_id,
            numa_node=slot.numa_node,
            pcie_switch=slot.switch,
            nic_bus_id=slot.nic_bus_id,
            nvlink=[float(speed)] * links if links and speed else [],
            pcie_gen_current=int(profile["pcie_gen"]),
            pcie_gen_max=int(profile["pcie_gen"]),
            pcie_width_current=int(profile["pcie_width"]),
            pcie_width_max=int(profile["pcie_width"]),
            power_limit_w=float(profile["power_limit_w"]),
            default_power_limit_w=float(profile["power_limit_w"]),
            sm_clock_mhz=int(profile["max_sm_clock_mhz"]),
            max_sm_clock_mhz=int(profile["max_sm_clock_mhz"]),
            mem_clock_mhz=info.mem_clock_mhz,
            temperature_c=33 + i % 4,
            memory_temperature_c=39 + i % 3,
            power_draw_w=round(float(profile["power_limit_w"]) * 0.1 + i % 3, 2),
        ))
        if slot.switch and all(s.bus_id != slot.switch for s in host.pcie_switches):
            host.pcie_switches.append(PcieSwitch(bus_id=slot.switch))
    nvswitch = bool(profile.get("nvswitch"))
    host.nvswitch_count = info.nvswitch_count if nvswitch else 0
    host.fabric_manager.installed = host.fabric_manager.active = nvswitch
    host.kernel_modules += ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"]
    if int(profile.get("hca_count") or 0):
        host.kernel_modules.append("nvidia_peermem")  # it needs ib_core, so it loads only beside an RDMA NIC
    host.services.update({"nvidia-persistenced": "active", "nv-hostengine": "active"})
    if nvswitch:
        host.services["nvidia-fabricmanager"] = "active"
    _gpu_boot_log(host, device_id, nvlink=links > 0)
    return slots


def _gpu_boot_log(host: HostState, device_id: str, nvlink: bool) -> None:
    """The driver's lines in the ring buffer from boot (see a real H100 boot: no Xid, no NVRM errors)."""
    boot = host.uptime_s
    version = host.driver.kernel_module_version
    lines = ["nvidia: loading out-of-tree module taints kernel.",
             "nvidia: module license 'NVIDIA' taints kernel.",
             "Disabling lock debugging due to kernel taint"]
    if nvlink:
        lines.append("nvidia-nvlink: Nvlink Core is being initialized, major device number 511")
    switch_id = part(device_id).nvswitch_id
    if host.nvswitch_count and switch_id:
        lines += [f"nvidia-nvswitch: Probing device 0000:{bus}:00.0, Vendor Id = 0x10de, Device Id = 0x{switch_id}, "
                  "Class = 0x68000" for bus in NVSWITCH_BUS_IDS[:host.nvswitch_count]]
    lines.append(f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {version}  {DRIVER_BUILD_DATE}")
    lines.append(f"nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  {version}  "
                 f"{DRIVER_BUILD_DATE}")
    lines += [f"[drm] [nvidia-drm] [GPU ID 0x{_drm_gpu_id(gpu.bus_id):08x}] Loading driver" for gpu in host.gpus]
    lines.append("nvidia-uvm: Loaded the UVM driver, major device number 509.")
    for k, text in enumerate(lines):
        host.kernel(text, age_s=boot - 9.5 - 0.05 * k, priority=6)


def _drm_gpu_id(bus_id: str) -> int:
    """nvidia-drm's GPU ID: domain << 16 | bus << 8 | devfn (0000:18:00.0 -> 0x00001800)."""
    domain, bus, device, function = bdf_numbers(bus_id)
    return domain << 16 | bus << 8 | device << 3 | function


def _network(host: HostState, profile: dict[str, Any], slots: list[Slot]) -> None:
    host.netifs.append(NetIf(name="lo", kind="loopback", state="UNKNOWN", mtu=65536, mac="00:00:00:00:00:00",
                             ipv4="127.0.0.1", prefixlen=8))
    prefix = MAC_PREFIX.get(host.machine.sys_vendor, "00:0d:3a")
    eth0 = NetIf(name="eth0", kind="ether", mtu=1500, mac=f"{prefix}:" + _mac(host.hostname, "eth0"),
                 ipv4="10.0.0." + str(4 + int(_hex_id(host.hostname, length=2), 16) % 200))
    host.netifs.append(eth0)
    count = int(profile.get("hca_count") or 0)
    if not count:
        _no_rdma(host)
        return
    rate = int(profile["ib_rate"])
    boot = host.uptime_s - 8.0  # driver probe, seconds after power-on
    # mlx5_0 is the IB port of GPU0; mlx5_1 is the host's Ethernet (control-plane) port; mlx5_2.. the rest.
    names = ["mlx5_0", "mlx5_1"] + [f"mlx5_{k}" for k in range(2, count + 1)]
    ib_index = 0
    for name in names:
        if name == "mlx5_1":
            eth_gid = eui64_gid(eth0.mac)
            host.hcas.append(Hca(name=name, ca_type="MT4125", firmware="22.39.1002", link_layer="Ethernet",
                                 rate=100, active_mtu=1024, max_mtu=4096, netdev="eth0", control_plane=True,
                                 node_guid="0x" + _hex_id(host.hostname, name, length=16),
                                 port_guid="0x" + _hex_id(host.hostname, name, "p", length=16),
                                 gids=[Gid(0, eth_gid, "IB/RoCE v1", "eth0"), Gid(1, eth_gid, "RoCE v2", "eth0")],
                                 counters=dict(_PORT_COUNTERS), bus_id=CONTROL_NIC_BUS))
            _probe_lines(host, CONTROL_NIC_BUS, "22.39.1002", 16, boot + 0.4, ethernet=True)
            continue
        netdev = f"ib{ib_index}"
        port_guid = _hex_id(host.hostname, name, "p", length=16)
        bus_id = rail_bus_id(ib_index, slots)
        numa = slots[ib_index].numa_node if ib_index < len(slots) else (0 if ib_index < count // 2 else 1)
        firmware = "28.39.1002" if rate >= 400 else "20.39.1002"
        host.netifs.append(NetIf(name=netdev, kind="infiniband", mtu=4092,
                                 mac="00:00:10:29:fe:80:00:00:00:00:00:00:" + _colons(port_guid)))
        host.hcas.append(Hca(
            name=name, rate=rate, link_layer="InfiniBand", netdev=netdev, lid=100 + ib_index, sm_lid=1,
            node_guid="0x" + _hex_id(host.hostname, name, length=16), port_guid="0x" + port_guid,
            gids=[Gid(0, guid_gid(port_guid), "IB/RoCE v1")],
            bus_id=bus_id, numa_node=numa,
            ca_type="MT4129" if rate >= 400 else "MT4123", firmware=firmware, counters=dict(_PORT_COUNTERS),
        ))
        _probe_lines(host, bus_id, firmware, 32 if rate >= 400 else 16, boot - ib_index * 0.35, ethernet=False)
        ib_index += 1
    host.kernel_modules += ["mlx5_core", "mlx5_ib", "ib_core", "ib_uverbs", "rdma_ucm"]
    if profile.get("link_layer") == "Ethernet":
        _roce(host)


def _no_rdma(host: HostState) -> None:
    """A host without RDMA NICs: the distro's rdma-core tools are there (and find no device), no MLNX_OFED,
    no HPC-X, no NCCL net plugin."""
    sw = host.software
    sw.ofed = sw.hpcx_ofed = None
    sw.nccl_net_plugins = []


def _roce(host: HostState) -> None:
    """GPU rails in Ethernet mode (RoCE v2), with NCCL pointed at the IPv4-mapped RoCE v2 GID as on OCI/GCP."""
    from agent.sim.faults.network import make_roce

    make_roce(host)
    host.env["NCCL_IB_GID_INDEX"] = "3"


_PORT_COUNTERS = {"link_downed": 0, "symbol_error": 0, "link_error_recovery": 0, "port_rcv_errors": 0,
                  "port_rcv_remote_physical_errors": 0, "excessive_buffer_overrun_errors": 0,
                  "local_link_integrity_errors": 0}


def _probe_lines(host: HostState, bus_id: str, firmware: str, gts: int, age_s: float, ethernet: bool) -> None:
    """What mlx5_core logs while probing one function at boot (gpud healthy H100 boot log)."""
    gbps = {32: "504.112", 16: "252.048"}[gts]
    host.kernel(f"mlx5_core {bus_id}: firmware version: {firmware}", age_s=age_s, priority=6)
    host.kernel(f"mlx5_core {bus_id}: {gbps} Gb/s available PCIe bandwidth ({gts}.0 GT/s PCIe x16 link)",
                age_s=age_s - 0.0001, priority=6)
    host.kernel(f"mlx5_core {bus_id}: Port module event: module 0, Cable plugged", age_s=age_s - 0.35, priority=6)
    if ethernet:
        host.kernel(f"mlx5_core {bus_id}: MLX5E: StrdRq(1) RqSz(8) StrdSz(2048) RxCqeCmprss(0 enhanced)",
                    age_s=age_s - 0.5, priority=6)


def _colons(hex_text: str) -> str:
    return ":".join(hex_text[i:i + 2] for i in range(0, len(hex_text), 2))


def _mac(*parts: object) -> str:
    digest = _hex_id(*parts, length=6)
    return ":".join(digest[i:i + 2] for i in range(0, 6, 2))


def _system(host: HostState, profile: dict[str, Any]) -> None:
    """OS, storage, services, logs and BMC of a healthy node; the NVIDIA packages derive from the versions."""
    host.mounts += [
        Mount(path="/", size_bytes=2 << 40, used_bytes=180 << 30, fstype="ext4", source="/dev/root"),
        Mount(path="/dev/shm", size_bytes=1 << 40, fstype="tmpfs", source="tmpfs"),
        Mount(path="/scratch", size_bytes=28 << 40, used_bytes=9 << 40, fstype="xfs", source="/dev/md0"),
    ]
    host.env.update({"NCCL_DEBUG": "WARN", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    host.software.packages.update({
        "docker-ce": "5:24.0.7-1~ubuntu.22.04~jammy",
        "containerd.io": "1.6.27-1",
        "slurm-wlm": "23.02.7-1",
        "ipmitool": "1.8.18-11ubuntu2.1",
        "datacenter-gpu-manager": "1:3.3.5",
        "openssh-server": "1:8.9p1-3ubuntu0.6",
    })
    host.services.update({"docker": "active", "slurmd": "active"})
    # the job's data set on local scratch (tiny stand-ins for its shards)
    for split, shard in (("train", 0), ("train", 1), ("val", 0)):
        host.files[f"/scratch/data/{split}/shard-{shard:06d}.tar"] = f"{split} shard {shard}\n"
    host.files["/var/log/scratch-purge.log"] = ""  # the site's scratch purge runs; it has removed nothing
    boot = host.uptime_s
    machine = host.machine
    threads = 2 if machine.smt else 1
    cores = machine.cpus // threads // max(host.numa_nodes, 1)
    for mc in range(host.edac.controllers):
        host.log("kernel", f"EDAC MC{mc}: Giving out device to module skx_edac controller Skylake Socket#{mc} IMC#0: "
                           f"DEV 0000:{0x7e + 0x80 * mc:02x}:0c.0 (INTERRUPT)", age_s=boot - 8)
    for ident, text, age in (
        ("systemd", "Started Docker Application Container Engine.", boot - 40),
        ("dockerd", "API listen on /run/docker.sock", boot - 40),
        ("systemd", "Started Slurm node daemon.", boot - 45),
        ("slurmd", "slurmd version 23.02.7 started", boot - 45),
        ("slurmd", f"CPUs={machine.cpus} Boards=1 Sockets={host.numa_nodes} Cores={cores} Threads={threads} "
                   "Memory=2063937 TmpDisk=1031935 Uptime=45 CPUSpecList=(null) FeaturesAvail=(null) "
                   "FeaturesActive=(null)", boot - 44),
        ("slurmd", "launch task StepId=127000.0 request from UID:1000 GID:1000 HOST:10.0.0.5 PORT:39514", 7 * 3600),
        ("slurmstepd", "[127000.batch] done with job", 6 * 3600),
        ("scratch-purge", "policy scratch-30d (atime > 30 days) on /scratch: 0 files removed", 20 * 3600),
    ):
        host.log(ident, text, age_s=age)
    # a BMC log that has seen boots and supply presence checks, nothing critical
    for age, sensor, event in (
        (45 * 86400, "Event Logging Disabled SEL", "Log area reset/cleared"),
        (boot + 300, "System ACPI Power State ACPI", "S0/G0: working"),
        (boot + 280, "Power Supply PSU1", "Presence detected"),
        (boot + 280, "Power Supply PSU2", "Presence detected"),
        (boot + 120, "System Event BIOS Evt", "Timestamp Clock Sync"),
        (boot + 60, "OS Boot OS Boot", "C: boot completed"),
    ):
        host.sel.append(SelEvent(age_s=age, sensor=sensor, event=event))
