"""Spellings shared by the RDMA renderers (ibstat, ibv_devinfo, sysfs, perftest, NCCL).

Kept in one place so every tool shows a port the same way: a rate of 400 is "400 Gb/sec (4X NDR)" in
sysfs and ibstatus, "Rate: 400" in ibstat, and a 4096-byte MTU is "4096 (5)" in ibv_devinfo.
"""

from __future__ import annotations

from agent.sim.state import Hca, HostState

RATE_NAMES = {800: "4X XDR", 400: "4X NDR", 200: "4X HDR", 100: "4X EDR", 56: "4X FDR", 50: "2X HDR",
              40: "4X QDR", 25: "1X EDR", 20: "4X DDR", 10: "4X SDR"}
MTU_ENUM = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}
STATE_NUM = {"Down": 1, "Initializing": 2, "Armed": 3, "Active": 4}
STATE_SYSFS = {"Down": "DOWN", "Initializing": "INIT", "Armed": "ARMED", "Active": "ACTIVE"}
STATE_VERBS = {"Down": "PORT_DOWN", "Initializing": "PORT_INIT", "Armed": "PORT_ARMED", "Active": "PORT_ACTIVE"}
PHYS_NUM = {"Sleep": 1, "Polling": 2, "Disabled": 3, "PortConfigurationTraining": 4, "LinkUp": 5,
            "LinkErrorRecovery": 6, "Phy Test": 7}
# ConnectX PCI device ids as ibv_devinfo's vendor_part_id shows them
PART_IDS = {"MT4123": 4123, "MT4125": 4125, "MT4129": 4129, "MT4131": 4131}
# perftest's and NCCL's usable fraction of the line rate on a healthy port (Azure NHC logs: 390.98 of 400)
WIRE_EFFICIENCY = 0.9775


def rate_text(rate: int) -> str:
    return f"{rate} Gb/sec ({RATE_NAMES.get(rate, '4X')})"


def state_sysfs(hca: Hca) -> str:
    return f"{STATE_NUM.get(hca.state, 1)}: {STATE_SYSFS.get(hca.state, 'DOWN')}"


def phys_sysfs(hca: Hca) -> str:
    return f"{PHYS_NUM.get(hca.physical_state, 3)}: {hca.physical_state}"


def guid_colon(guid: str) -> str:
    """0x0123456789abcdef -> 0123:4567:89ab:cdef (ibv_devinfo, sysfs node_guid)."""
    digits = guid.lower().removeprefix("0x").rjust(16, "0")
    return ":".join(digits[i:i + 4] for i in range(0, 16, 4))


def mtu_text(mtu: int) -> str:
    return f"{mtu} ({MTU_ENUM.get(mtu, 3)})"


def is_up(hca: Hca) -> bool:
    return hca.state == "Active" and hca.physical_state == "LinkUp"


def data_hcas(host: HostState) -> list[Hca]:
    """The ports the GPU fabric uses (every HCA but the provider's control-plane port)."""
    return [h for h in host.hcas if not h.control_plane]


def verbs_present(host: HostState) -> bool:
    """rdma-core user space (libibverbs + providers) installed."""
    return host.software.rdma_core


def gdr_module(host: HostState) -> str | None:
    """The loaded GPUDirect RDMA peer-memory module, if any."""
    for name in ("nvidia_peermem", "nv_peer_mem"):
        if name in host.kernel_modules:
            return name
    return None


def roce_gid_index(hca: Hca) -> int | None:
    """Index of the port's first RoCE v2 GID with an IPv4-mapped address (what NCCL and perftest want)."""
    for gid in hca.gids:
        if gid.kind == "RoCE v2" and ":ffff:" in gid.gid:
            return gid.index
    return None
