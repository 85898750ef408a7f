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
)

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
    for i in range(int(profile["gpu_count"])):
        uuid = "GPU-" + "-".join(_hex_id(host.hostname, "gpu", i, k, length=n)
                                 for k, n in ((0, 8), (1, 4), (2, 4), (3, 4), (4, 12)))
        host.gpus.append(Gpu(
            index=i,
            name=str(profile["gpu_name"]),
            bus_id=f"00000000:{GPU_BUS_IDS[i % len(GPU_BUS_IDS)]}:00.0",
            uuid=uuid,
            serial=str(1650923000000 + int(_hex_id(host.hostname, "sn", i, length=6), 16) % 1000000),
            vbios="96.00.89.00.01",
            memory_total_mib=int(profile["memory_mib"]),
            compute_capability=str(profile["compute_capability"]),
            nvlink=[float(profile["nvlink_link_gbps"])] * links,
            pcie_gen_current=int(profile["pcie_gen"]),
            pcie_gen_max=int(profile["pcie_gen"]),
            pcie_width_current=int(profile["pcie_width"]),
            pcie_width_max=int(profile["pcie_width"]),
            power_limit_w=float(profile["power_limit_w"]),
            default_power_limit_w=float(profile["power_limit_w"]),
            sm_clock_mhz=int(profile["max_sm_clock_mhz"]),
            max_sm_clock_mhz=int(profile["max_sm_clock_mhz"]),
            temperature_c=33 + i % 4,
            memory_temperature_c=39 + i % 3,
        ))
        host.pcie_switches.append(PcieSwitch(bus_id=f"0000:{int(GPU_BUS_IDS[i], 16) - 2:02x}:00.0"))
    host.nvswitch_count = 4 if profile.get("nvswitch") else 0
    host.fabric_manager.installed = bool(profile.get("nvswitch"))
    host.fabric_manager.active = bool(profile.get("nvswitch"))
    host.kernel_modules += ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem"]
    host.services.update({"nvidia-persistenced": "active", "nv-hostengine": "active"})
    if profile.get("nvswitch"):
        host.services["nvidia-fabricmanager"] = "active"


def _network(host: HostState, profile: dict[str, Any]) -> None:
    host.netifs.append(NetIf(name="lo", kind="loopback", mtu=65536, ipv4="127.0.0.1"))
    host.netifs.append(NetIf(name="eth0", kind="ether", mtu=1500, mac="00:0d:3a:" + _mac(host.hostname, "eth0"),
                             ipv4="10.0.0." + str(4 + int(_hex_id(host.hostname, length=2), 16) % 200)))
    rate = int(profile["ib_rate"])
    count = int(profile["hca_count"])
    # mlx5_0 is the IB port of GPU0; mlx5_1 is the host's Ethernet (control-plane) port; mlx5_2.. the rest.
    names = ["mlx5_0", "mlx5_1"] + [f"mlx5_{k}" for k in range(2, count + 1)]
    ib_index = 0
    for name in names:
        if name == "mlx5_1":
            host.hcas.append(Hca(name=name, ca_type="MT4125", firmware="22.39.1002", link_layer="Ethernet",
                                 rate=100, active_mtu=1024, max_mtu=4096, netdev="eth0", control_plane=True,
                                 node_guid="0x" + _hex_id(host.hostname, name, length=16),
                                 port_guid="0x" + _hex_id(host.hostname, name, "p", length=16),
                                 gids=[Gid(0, "fe80:0000:0000:0000:020d:3aff:fe00:0001", "IB/RoCE v1", "eth0"),
                                       Gid(1, "fe80:0000:0000:0000:020d:3aff:fe00:0001", "RoCE v2", "eth0")],
                                 bus_id="0000:06:00.0"))
            continue
        netdev = f"ib{ib_index}"
        host.netifs.append(NetIf(name=netdev, kind="infiniband", mtu=4092, mac="00:00:10:29:fe:80:00:00"))
        host.hcas.append(Hca(
            name=name, rate=rate, link_layer="InfiniBand", netdev=netdev, lid=100 + ib_index, sm_lid=1,
            node_guid="0x" + _hex_id(host.hostname, name, length=16),
            port_guid="0x" + _hex_id(host.hostname, name, "p", length=16),
            bus_id=f"0000:{HCA_BUS_IDS[ib_index % len(HCA_BUS_IDS)]}:00.0".lower(),
            numa_node=0 if ib_index < count // 2 else 1,
            ca_type="MT4129" if rate >= 400 else "MT4123",
            firmware="28.39.1002" if rate >= 400 else "20.39.1002",
            counters={"link_downed": 0, "symbol_error": 0, "link_error_recovery": 0, "port_rcv_errors": 0,
                      "port_rcv_remote_physical_errors": 0, "excessive_buffer_overrun_errors": 0},
        ))
        ib_index += 1
    host.kernel_modules += ["mlx5_core", "mlx5_ib", "ib_core", "ib_uverbs", "rdma_ucm"]


def _mac(*parts: object) -> str:
    digest = _hex_id(*parts, length=6)
    return ":".join(digest[i:i + 2] for i in range(0, 6, 2))


def _system(host: HostState, profile: dict[str, Any]) -> None:
    host.mounts.append(Mount(path="/dev/shm", size_bytes=1 << 40, fstype="tmpfs", source="tmpfs"))
    host.env.update({"NCCL_DEBUG": "WARN", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    host.software.packages.update({
        "nvidia-driver-535": "535.161.08-0ubuntu1",
        "cuda-toolkit-12-2": "12.2.2-1",
        "nvidia-container-toolkit": "1.14.6-1",
        "datacenter-gpu-manager": "1:3.3.5",
        "nvidia-fabricmanager-535": "535.161.08-1",
    })
    host.services.update({"docker": "active", "slurmd": "active"})
