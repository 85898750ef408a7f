"""Healthy simulated hosts built from a SKU profile (verification_scripts/profiles.yaml).

Defaults follow FAULTS.md: H100-SXM-8 with NVSwitch, 8 NDR IB HCAs plus one Ethernet port,
driver 535.161.08, CUDA 12.2, NCCL 2.18.5, torch 2.1.
"""

from __future__ import annotations

import hashlib
from typing import Any

from agent.sim.state import (
    Gid,
    Gpu,
    Hca,
    HostState,
    Mount,
    NetIf,
    PcieSwitch,
    SelEvent,
)
from agent.sim.state.gpu import (
    DRIVER_BUILD_DATE,
    GPU_MEM_CLOCK_MHZ,
    GPU_VBIOS,
    NVSWITCH_BUS_IDS,
    NVSWITCH_DEVICE_ID,
)
from agent.sim.state.net import eui64_gid, guid_gid

# HGX baseboard bus ids (8 GPUs) and the NICs that sit on the same PCIe switches.
GPU_BUS_IDS = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
HCA_BUS_IDS = ["1A", "3C", "4D", "5E", "9C", "BC", "CC", "DC"]


def _hex_id(*parts: object, length: int = 8) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:length]


def healthy_host(hostname: str, profile_name: str, profile: dict[str, Any]) -> HostState:
    host = HostState(hostname=hostname, profile=profile_name)
    _gpus(host, profile)
    _network(host, profile)
    _system(host, profile)
    return host


def _gpus(host: HostState, profile: dict[str, Any]) -> None:
    links = int(profile["nvlink_links"])
    count = int(profile["gpu_count"])
    device_id = str(profile.get("pci_device_id", "2330"))
    for i in range(count):
        uuid = "GPU-" + "-".join(_hex_id(host.hostname, "gpu", i, k, length=n)
                                 for k, n in ((0, 8), (1, 4), (2, 4), (3, 4), (4, 12)))
        bus = GPU_BUS_IDS[i % len(GPU_BUS_IDS)]
        switch = f"0000:{int(bus, 16) - 2:02x}:00.0"
        host.gpus.append(Gpu(
            index=i,
            name=str(profile["gpu_name"]),
            bus_id=f"00000000:{bus}:00.0",
            uuid=uuid,
            serial=str(1650923000000 + int(_hex_id(host.hostname, "sn", i, length=6), 16) % 1000000),
            vbios=GPU_VBIOS.get(device_id, "96.00.89.00.01"),
            memory_total_mib=int(profile["memory_mib"]),
            compute_capability=str(profile["compute_capability"]),
            pci_device_id=device_id,
            numa_node=0 if i < count // 2 else 1,
            pcie_switch=switch,
            nic_bus_id=f"0000:{HCA_BUS_IDS[i % len(HCA_BUS_IDS)]}:00.0".lower(),
            nvlink=[float(profile["nvlink_link_gbps"])] * links,
            pcie_gen_current=int(profile["pcie_gen"]),
            pcie_gen_max=int(profile["pcie_gen"]),
            pcie_width_current=int(profile["pcie_width"]),
            pcie_width_max=int(profile["pcie_width"]),
            power_limit_w=float(profile["power_limit_w"]),
            default_power_limit_w=float(profile["power_limit_w"]),
            sm_clock_mhz=int(profile["max_sm_clock_mhz"]),
            max_sm_clock_mhz=int(profile["max_sm_clock_mhz"]),
            mem_clock_mhz=GPU_MEM_CLOCK_MHZ.get(device_id, 2619),
            temperature_c=33 + i % 4,
            memory_temperature_c=39 + i % 3,
            power_draw_w=round(float(profile["power_limit_w"]) * 0.1 + i % 3, 2),
        ))
        host.pcie_switches.append(PcieSwitch(bus_id=switch))
    host.nvswitch_count = 4 if profile.get("nvswitch") else 0
    host.fabric_manager.installed = bool(profile.get("nvswitch"))
    host.fabric_manager.active = bool(profile.get("nvswitch"))
    host.kernel_modules += ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem"]
    host.services.update({"nvidia-persistenced": "active", "nv-hostengine": "active"})
    if profile.get("nvswitch"):
        host.services["nvidia-fabricmanager"] = "active"
    _gpu_boot_log(host, device_id)


def _gpu_boot_log(host: HostState, device_id: str) -> None:

    """The driver's lines in the ring buffer from boot (see a real H100 boot: no Xid, no NVRM errors)."""
    boot = host.uptime_s
    version = host.driver.kernel_module_version
    lines = ["nvidia: loading out-of-tree module taints kernel.",
             "nvidia: module license 'NVIDIA' taints kernel.",
             "Disabling lock debugging due to kernel taint"]
    if host.nvswitch_count:
        lines.append("nvidia-nvlink: Nvlink Core is being initialized, major device number 511")
        switch_id = NVSWITCH_DEVICE_ID.get(device_id, "22a3")
        lines += [f"nvidia-nvswitch: Probing device 0000:{bus}:00.0, Vendor Id = 0x10de, Device Id = 0x{switch_id}, "
                  "Class = 0x68000" for bus in NVSWITCH_BUS_IDS[:host.nvswitch_count]]
    lines.append(f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {version}  {DRIVER_BUILD_DATE}")
    lines.append(f"nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  {version}  "
                 f"{DRIVER_BUILD_DATE}")
    lines += [f"[drm] [nvidia-drm] [GPU ID 0x0000{gpu.bus_id[9:11].lower()}00] Loading driver" for gpu in host.gpus]
    lines.append("nvidia-uvm: Loaded the UVM driver, major device number 509.")
    for k, text in enumerate(lines):
        host.kernel(text, age_s=boot - 9.5 - 0.05 * k, priority=6)


def _network(host: HostState, profile: dict[str, Any]) -> None:
    host.netifs.append(NetIf(name="lo", kind="loopback", state="UNKNOWN", mtu=65536, mac="00:00:00:00:00:00",
                             ipv4="127.0.0.1", prefixlen=8))
    eth0 = NetIf(name="eth0", kind="ether", mtu=1500, mac="00:0d:3a:" + _mac(host.hostname, "eth0"),
                 ipv4="10.0.0." + str(4 + int(_hex_id(host.hostname, length=2), 16) % 200))
    host.netifs.append(eth0)
    rate = int(profile["ib_rate"])
    count = int(profile["hca_count"])
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
                                 counters=dict(_PORT_COUNTERS), bus_id="0000:06:00.0"))
            _probe_lines(host, "0000:06:00.0", "22.39.1002", 16, boot + 0.4, ethernet=True)
            continue
        netdev = f"ib{ib_index}"
        port_guid = _hex_id(host.hostname, name, "p", length=16)
        bus_id = f"0000:{HCA_BUS_IDS[ib_index % len(HCA_BUS_IDS)]}:00.0".lower()
        firmware = "28.39.1002" if rate >= 400 else "20.39.1002"
        host.netifs.append(NetIf(name=netdev, kind="infiniband", mtu=4092,
                                 mac="00:00:10:29:fe:80:00:00:00:00:00:00:" + _colons(port_guid)))
        host.hcas.append(Hca(
            name=name, rate=rate, link_layer="InfiniBand", netdev=netdev, lid=100 + ib_index, sm_lid=1,
            node_guid="0x" + _hex_id(host.hostname, name, length=16), port_guid="0x" + port_guid,
            gids=[Gid(0, guid_gid(port_guid), "IB/RoCE v1")],
            bus_id=bus_id, numa_node=0 if ib_index < count // 2 else 1,
            ca_type="MT4129" if rate >= 400 else "MT4123", firmware=firmware, counters=dict(_PORT_COUNTERS),
        ))
        _probe_lines(host, bus_id, firmware, 32 if rate >= 400 else 16, boot - ib_index * 0.35, ethernet=False)
        ib_index += 1
    host.kernel_modules += ["mlx5_core", "mlx5_ib", "ib_core", "ib_uverbs", "rdma_ucm"]


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
    for ident, text, age in (
        ("kernel", "EDAC MC0: Giving out device to module skx_edac controller Skylake Socket#0 IMC#0: "
                   "DEV 0000:7e:0c.0 (INTERRUPT)", boot - 8),
        ("kernel", "EDAC MC1: Giving out device to module skx_edac controller Skylake Socket#1 IMC#0: "
                   "DEV 0000:fe:0c.0 (INTERRUPT)", boot - 8),
        ("systemd", "Started Docker Application Container Engine.", boot - 40),
        ("dockerd", "API listen on /run/docker.sock", boot - 40),
        ("systemd", "Started Slurm node daemon.", boot - 45),
        ("slurmd", "slurmd version 23.02.7 started", boot - 45),
        ("slurmd", "CPUs=192 Boards=1 Sockets=2 Cores=48 Threads=2 Memory=2063937 TmpDisk=1031935 Uptime=45 "
                   "CPUSpecList=(null) FeaturesAvail=(null) FeaturesActive=(null)", boot - 44),
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
