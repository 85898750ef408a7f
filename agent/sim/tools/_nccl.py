"""How NCCL (2.18-era) would set itself up on a simulated host under a given environment.

Decides the bootstrap interface, the net plugin, the IB devices and GPUDirect RDMA the way NCCL's
bootstrap.cc / net.cc / net_ib.cc do, and the INFO/WARN lines it prints while doing so. The nccl-tests
renderer turns this plan into bandwidth and output.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from agent.sim.state import Hca, HostState, NetIf
from agent.sim.state.net import nccl_selects
from agent.sim.tools._rdma import gdr_module, verbs_present

SOCKET_BUSBW = 2.8  # GB/s NCCL reaches over TCP on the host's Ethernet port
BOOTSTRAP_ERROR = ("internal error - please report this issue to the NCCL developers / "
                   "Bootstrap : no socket interface found")


@dataclass
class NetPlan:
    bootstrap: NetIf | None
    transport: str  # "IB" | "IBext" | "Socket"
    devices: list[Hca] = field(default_factory=list)
    gdr: bool = False
    info: list[str] = field(default_factory=list)  # NCCL INFO texts, in the order NCCL prints them
    warn: list[str] = field(default_factory=list)  # NCCL WARN texts

    @property
    def error(self) -> str | None:
        """ncclCommInit's failure text (nccl-tests prints it), or None when NCCL initializes."""
        return None if self.bootstrap is not None else BOOTSTRAP_ERROR


def _usable(netif: NetIf) -> bool:
    return netif.admin_up and netif.state in ("UP", "UNKNOWN") and bool(netif.ipv4)


def bootstrap_interface(host: HostState, env: Mapping[str, str]) -> NetIf | None:
    """NCCL's findInterfaces: the user's list, else ib* first, then anything but docker/lo, then lo."""
    usable = [n for n in host.netifs if _usable(n)]
    spec = env.get("NCCL_SOCKET_IFNAME", "")
    if spec:
        return next((n for n in usable if nccl_selects(spec, n.name)), None)
    for wanted in (lambda n: n.name.startswith("ib"),
                   lambda n: not n.name.startswith(("docker", "lo")),
                   lambda n: n.name.startswith("docker"), lambda n: n.name.startswith("lo")):
        found = next((n for n in usable if wanted(n)), None)
        if found is not None:
            return found
    return None


def _plugin(host: HostState, env: Mapping[str, str], info: list[str]) -> bool:
    name = env.get("NCCL_NET_PLUGIN", "")
    if name.lower() == "none":
        return False
    if name:
        lib = name if name.endswith(".so") else f"libnccl-net-{name}.so"
        info.append(f"Plugin name set by env to {lib}")
    else:
        lib = "libnccl-net.so"
    if lib.rsplit("/", 1)[-1] in host.software.nccl_net_plugins:
        info.append("NET/Plugin: Loaded net plugin NCCL RDMA Plugin v7 (v7)")
        return True
    info.append(f"NET/Plugin : dlerror={lib}: cannot open shared object file: No such file or directory "
                f"No plugin found ({lib}), using internal implementation")
    return False


def _devices(host: HostState, env: Mapping[str, str], info: list[str], warn: list[str]) -> list[Hca]:
    if not verbs_present(host):
        info.append("Failed to open libibverbs.so[.1]")
        return []
    spec = env.get("NCCL_IB_HCA", "")
    used = []
    for hca in sorted(host.hcas, key=lambda h: int(re.sub(r"\D", "", h.name) or 0)):
        if spec:
            if not nccl_selects(spec, hca.name, hca.port):
                continue
        elif hca.control_plane:
            continue  # without NCCL_IB_HCA the provider's image restricts NCCL to the GPU rails
        if hca.control_plane:  # an SR-IOV Ethernet VF: visible to verbs, no RDMA resources
            warn.append(f"NET/IB : Unable to open device {hca.name}")
            continue
        if hca.state == "Active":
            used.append(hca)
    if not used:
        info.append("NET/IB : No device found.")
    return used


def plan(host: HostState, env: Mapping[str, str]) -> NetPlan:
    boot = bootstrap_interface(host, env)
    info: list[str] = []
    warn: list[str] = []
    if boot is None:
        warn.append("Bootstrap : no socket interface found")
        return NetPlan(None, "Socket", info=info, warn=warn)
    oob = f"{boot.name}:{boot.ipv4}<0>"
    info.append(f"Bootstrap : Using {oob}")
    plugin = _plugin(host, env, info)
    disabled = env.get("NCCL_IB_DISABLE", "0") == "1" or env.get("NCCL_NET", "").lower() == "socket"
    devices = [] if disabled else _devices(host, env, info, warn)
    if not devices:
        info.append(f"NET/Socket : Using [0]{oob}")
        info.append("Using network Socket")
        return NetPlan(boot, "Socket", info=info, warn=warn)
    listed = " ".join(f"[{i}]{h.name}:{h.port}/{'IB' if h.link_layer == 'InfiniBand' else 'RoCE'}"
                      for i, h in enumerate(devices))
    transport = "IBext" if plugin else "IB"
    if "NCCL_IB_GID_INDEX" in env:
        info.append(f"NCCL_IB_GID_INDEX set by environment to {env['NCCL_IB_GID_INDEX']}.")
    info.append(f"NET/{transport} : Using {listed} ; OOB {oob}")
    info.append(f"Using network {transport}")
    gdr = gdr_module(host) is not None and env.get("NCCL_NET_GDR_LEVEL", "").upper() not in ("0", "LOC")
    if gdr_module(host) is None:
        info += [f"NET/IB : GPU Direct RDMA Disabled for HCA {i} '{h.name}' (no module)"
                 for i, h in enumerate(devices)]
    return NetPlan(boot, transport, devices, gdr, info, warn)
