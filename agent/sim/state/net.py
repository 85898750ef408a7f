"""Network-side state of a simulated host: RDMA HCAs and network interfaces."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Gid:
    index: int
    gid: str
    kind: str  # "IB/RoCE v1" | "RoCE v2"
    netdev: str = ""


@dataclass
class Hca:
    name: str  # mlx5_0
    ca_type: str = "MT4129"
    firmware: str = "28.39.1002"
    node_guid: str = "0x0000000000000000"
    port: int = 1
    state: str = "Active"  # Active | Down | Initializing | Armed
    physical_state: str = "LinkUp"  # LinkUp | Polling | Disabled
    rate: int = 400  # Gb/s
    link_layer: str = "InfiniBand"  # InfiniBand | Ethernet
    active_mtu: int = 4096
    max_mtu: int = 4096
    netdev: str = ""  # ib0 / eth1 ...
    lid: int = 0
    sm_lid: int = 0
    port_guid: str = "0x0000000000000000"
    gids: list[Gid] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    numa_node: int = 0
    bus_id: str = ""
    control_plane: bool = False  # the provider's management/storage port, not for NCCL


@dataclass
class NetIf:
    name: str
    kind: str = "ether"  # ether | infiniband | loopback
    state: str = "UP"
    mtu: int = 1500
    mac: str = "00:00:00:00:00:00"
    ipv4: str = ""
