"""Network-side state of a simulated host: RDMA HCAs and network interfaces.

Also how NCCL reads its list-valued variables (NCCL_SOCKET_IFNAME, NCCL_IB_HCA), because the faults
that misconfigure them and the renderers that show NCCL's reaction must agree on that one rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Gid:
    index: int
    gid: str  # "fe80:0000:0000:0000:0c42:a103:00e3:142a", as sysfs prints it
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
    state: str = "UP"  # operational state: UP | DOWN (carrier lost) | UNKNOWN (loopback)
    mtu: int = 1500
    mac: str = "00:00:00:00:00:00"
    ipv4: str = ""  # "10.0.0.4"; empty: no address configured
    prefixlen: int = 24
    admin_up: bool = True  # `ip link set up`; False: neither UP nor NO-CARRIER in the flags


def nccl_list(spec: str) -> tuple[list[tuple[str, int | None]], bool, bool]:
    """Parse an NCCL interface/HCA list: `[^][=]name[:port],...` -> (items, exclude, exact).

    NCCL matches each name as a prefix unless the list starts with '=', and selects everything *not*
    matching when it starts with '^' (both may be combined as '^=').
    """
    text = spec.strip()
    exclude = text.startswith("^")
    if exclude:
        text = text[1:]
    exact = text.startswith("=")
    if exact:
        text = text[1:]
    items: list[tuple[str, int | None]] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, port = part.partition(":")
        items.append((name, int(port) if port.isdigit() else None))
    return items, exclude, exact


def nccl_selects(spec: str, name: str, port: int | None = None) -> bool:
    """Whether NCCL's list `spec` selects device/interface `name` (and `port`, for HCAs)."""
    items, exclude, exact = nccl_list(spec)
    hit = any((name == item if exact else name.startswith(item)) and (want is None or port is None or want == port)
              for item, want in items)
    return hit != exclude


def eui64_gid(mac: str) -> str:
    """The link-local GID a RoCE port derives from its Ethernet MAC (modified EUI-64), in sysfs spelling."""
    octets = [int(o, 16) for o in mac.split(":")]
    eui = [octets[0] ^ 0x02, *octets[1:3], 0xFF, 0xFE, *octets[3:6]]
    return "fe80:0000:0000:0000:" + ":".join(f"{eui[i]:02x}{eui[i + 1]:02x}" for i in range(0, 8, 2))


def ipv4_gid(ipv4: str) -> str:
    """The IPv4-mapped GID of a RoCE port's address (::ffff:a.b.c.d), in sysfs spelling."""
    a, b, c, d = (int(x) for x in ipv4.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


def guid_gid(port_guid: str) -> str:
    """The default (index 0) GID of an InfiniBand port: fe80::<port GUID>."""
    digits = port_guid.lower().removeprefix("0x").rjust(16, "0")
    return "fe80:0000:0000:0000:" + ":".join(digits[i:i + 4] for i in range(0, 16, 4))
