"""Network faults and noise for simulated hosts: RDMA ports, verbs, GPUDirect, RoCE, OFED/HPC-X and
the NCCL/Gloo network environment.

Each fault changes the host state the real tools read (port state, GID table, env, modules, packages)
and writes the job-side symptom FAULTS.md names into the job's log (JOB_LOG), as NCCL prints it.
"""

from __future__ import annotations

import re
from typing import Any

from agent.sim.faults.registry import FaultError, Param, fault, noise
from agent.sim.state import Gid, Hca, HostState, NetIf
from agent.sim.state.net import eui64_gid, ipv4_gid, nccl_list, nccl_selects

JOB_LOG = "/var/log/job/rank0.log"  # the training job's stdout/stderr as the scheduler keeps it
JOB_PID = 2871
NETDEV_MTU_FOR = {256: 576, 512: 1000, 1024: 1500, 2048: 2200, 4096: 9000}  # RoCE active MTU <- netdev MTU
LEAF = "INTERCONNECT_NETWORKING"


# ---- helpers ------------------------------------------------------------------------------------
def job_log(host: HostState, *lines: str) -> None:
    host.files[JOB_LOG] = host.files.get(JOB_LOG, "") + "".join(line + "\n" for line in lines)


def nccl_line(host: HostState, level: str, text: str, rank: int = 0) -> str:
    return f"{host.hostname}:{JOB_PID + rank}:{JOB_PID + 64 + rank} [{rank}] NCCL {level} {text}"


def data_hcas(host: HostState) -> list[Hca]:
    return [h for h in host.hcas if not h.control_plane]


def require_rails(host: HostState, fid: str) -> list[Hca]:
    """The host's GPU rails; a fault about RDMA ports cannot happen on a host that has none."""
    rails = data_hcas(host)
    if not rails:
        raise FaultError(f"{fid}: {host.profile} has no RDMA NIC (no InfiniBand or RoCE ports to break)")
    return rails


def _usable(netif: NetIf) -> bool:
    return netif.admin_up and netif.state in ("UP", "UNKNOWN") and bool(netif.ipv4)


def _octet(host: HostState) -> int:
    eth = next((n for n in host.netifs if n.name == "eth0" and n.ipv4), None)
    return int(eth.ipv4.rsplit(".", 1)[1]) if eth else 10


def make_roce(host: HostState, netdev_mtu: int = 9000) -> None:
    """Turn the host's GPU rails into RoCE v2 ports (Ethernet link layer, IPv4 GIDs), as on OCI/GCP.

    The same ConnectX adapters run in Ethernet mode: each gets an `rdmaN` netdev with an address and
    the standard mlx5 GID table (0/1: link-local v1/v2, 2/3: IPv4-mapped v1/v2); the active MTU
    follows the netdev MTU.
    """
    active = max(mtu for mtu, netdev in NETDEV_MTU_FOR.items() if netdev <= netdev_mtu)
    for k, hca in enumerate(data_hcas(host)):
        if hca.link_layer == "InfiniBand":
            host.netifs = [n for n in host.netifs if n.name != hca.netdev]
            suffix = hca.port_guid.removeprefix("0x")[-6:]
            mac = "b8:3f:d2:" + ":".join(suffix[i:i + 2] for i in range(0, 6, 2))
            netif = NetIf(name=f"rdma{k}", kind="ether", mtu=netdev_mtu, mac=mac,
                          ipv4=f"192.168.{k + 1}.{_octet(host)}")
            host.netifs.append(netif)
            link_local, mapped = eui64_gid(mac), ipv4_gid(netif.ipv4)
            hca.gids = [Gid(0, link_local, "IB/RoCE v1", netif.name), Gid(1, link_local, "RoCE v2", netif.name),
                        Gid(2, mapped, "IB/RoCE v1", netif.name), Gid(3, mapped, "RoCE v2", netif.name)]
            hca.port_guid = "0x" + link_local.replace(":", "")[16:]
            hca.link_layer, hca.netdev, hca.lid, hca.sm_lid = "Ethernet", netif.name, 0, 0
        else:
            netif = next(n for n in host.netifs if n.name == hca.netdev)
            netif.mtu = netdev_mtu
        hca.active_mtu = min(active, hca.max_mtu)


# ---- faults -------------------------------------------------------------------------------------
@fault("netstack.ofed_hpcx_mismatch", "SYSTEM_SOFTWARE.NETWORK_STACK.OFED_HPCX_VERSION_MISMATCH",
       Param("ofed", str, "MLNX_OFED_LINUX-5.8-1.1.2.1", help="the MLNX_OFED the host runs"))
def ofed_hpcx_mismatch(host: HostState, p: dict[str, Any]) -> None:
    """The host runs another MLNX_OFED release than the one its HPC-X/UCX was built for."""
    built_for = host.software.hpcx_ofed
    if built_for is None:
        raise FaultError("netstack.ofed_hpcx_mismatch: the host has no HPC-X to mismatch")
    release = re.compile(r"(\d+\.\d+)-\d")
    mine, theirs = release.search(p["ofed"]), release.search(built_for)
    if mine is None or (theirs is not None and mine.group(1) == theirs.group(1)):
        raise FaultError(f"netstack.ofed_hpcx_mismatch: ofed={p['ofed']!r} must be an MLNX_OFED_LINUX-X.Y-... "
                         f"release other than the one HPC-X was built for ({built_for})")
    host.software.ofed = p["ofed"]
    job_log(host, f"[1712345678.123456] [{host.hostname}:{JOB_PID}:0]    ucp_context.c:1085 UCX  WARN  "
                  "network device 'mlx5_0:1' is not available, please use one or more of: 'eth0'(tcp), 'lo'(tcp)")


@fault("net.socket_ifname_bad", f"{LEAF}.SOCKET.IFNAME_MISCONFIG",
       Param("var", str, "NCCL_SOCKET_IFNAME", choices=("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")),
       Param("value", str, "eth1", help="interface list the job sets"))
def socket_ifname_bad(host: HostState, p: dict[str, Any]) -> None:
    """The job's socket-interface variable names an interface that is missing, down or has no address."""
    var, value = p["var"], p["value"]
    usable = [n.name for n in host.netifs if _usable(n)]
    if var == "NCCL_SOCKET_IFNAME":
        broken = not any(nccl_selects(value, name) for name in usable)
    else:  # Gloo takes exact names and needs every one of them
        broken = any(name not in usable for name in value.split(","))
    if not broken:
        raise FaultError(f"net.socket_ifname_bad: {var}={value!r} selects a usable interface; name a missing or "
                         f"unusable one (usable here: {', '.join(usable)})")
    host.env[var] = value
    if var == "NCCL_SOCKET_IFNAME":
        job_log(host, nccl_line(host, "INFO", f"NCCL_SOCKET_IFNAME set by environment to {value}"),
                nccl_line(host, "WARN", "Bootstrap : no socket interface found"),
                "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
                f"ProcessGroupNCCL.cpp:1691, internal error - please report this issue to the NCCL developers, "
                f"NCCL version {host.software.nccl}",
                "ncclInternalError: Internal check failed.", "Last error:", "Bootstrap : no socket interface found")
    else:
        job_log(host, "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] "
                      f"ifa != nullptr. Unable to find address for: {value.split(',')[0]}")


@fault("nccl.ib_hca_bad", f"{LEAF}.NCCL.IB_HCA_MISCONFIG",
       Param("value", str, "mlx5_1", help="NCCL_IB_HCA as the job sets it"))
def ib_hca_bad(host: HostState, p: dict[str, Any]) -> None:
    """NCCL_IB_HCA selects the control-plane Ethernet port or names HCAs that do not exist."""
    require_rails(host, "nccl.ib_hca_bad")
    value = p["value"]
    items, exclude, exact = nccl_list(value)
    names = [h.name for h in host.hcas]
    selected = [h for h in host.hcas if nccl_selects(value, h.name, h.port)]
    unknown = [] if exclude else [n for n, _ in items if not any(x == n if exact else x.startswith(n) for x in names)]
    wrong_layer = [h for h in selected if h.control_plane]
    if not (unknown or wrong_layer or not any(not h.control_plane for h in selected)):
        raise FaultError(f"nccl.ib_hca_bad: NCCL_IB_HCA={value!r} selects only GPU rails; name the control-plane "
                         f"port ({', '.join(h.name for h in host.hcas if h.control_plane)}) or a missing device "
                         f"(devices: {', '.join(names)})")
    host.env["NCCL_IB_HCA"] = value
    lines = [nccl_line(host, "INFO", f"NCCL_IB_HCA set by environment to {value}")]
    lines += [nccl_line(host, "WARN", f"NET/IB : Unable to open device {h.name}") for h in wrong_layer]
    if not any(not h.control_plane and h.state == "Active" for h in selected):
        eth = next((n for n in host.netifs if n.name == "eth0"), None)
        oob = f"eth0:{eth.ipv4}<0>" if eth else "eth0"
        lines += [nccl_line(host, "INFO", "NET/IB : No device found."),
                  nccl_line(host, "INFO", f"NET/Socket : Using [0]{oob}"),
                  nccl_line(host, "INFO", "Using network Socket")]
    job_log(host, *lines)


@fault("nccl.net_plugin_missing", f"{LEAF}.NCCL.NET_PLUGIN_NOT_LOADED",
       Param("value", str, "ofi", help="NCCL_NET_PLUGIN as the job sets it"))
def net_plugin_missing(host: HostState, p: dict[str, Any]) -> None:
    """NCCL_NET_PLUGIN names a plugin library that is not installed on the host."""
    value = p["value"]
    lib = value if value.endswith(".so") else f"libnccl-net-{value}.so"
    host.software.nccl_net_plugins = [n for n in host.software.nccl_net_plugins if n != lib.rsplit("/", 1)[-1]]
    host.env["NCCL_NET_PLUGIN"] = value
    job_log(host, nccl_line(host, "INFO", f"Plugin name set by env to {lib}"),
            nccl_line(host, "INFO", f"NET/Plugin : dlerror={lib}: cannot open shared object file: No such file or "
                                    f"directory No plugin found ({lib}), using internal implementation"))


@fault("gdr.peermem_missing", f"{LEAF}.GDR.GPUDIRECT_RDMA_DISABLED")
def peermem_missing(host: HostState, p: dict[str, Any]) -> None:
    """No GPUDirect RDMA peer-memory module: NCCL moves GPU data through host memory."""
    require_rails(host, "gdr.peermem_missing")
    host.kernel_modules = [m for m in host.kernel_modules if m not in ("nvidia_peermem", "nv_peer_mem")]
    lines = [nccl_line(host, "INFO", f"NET/IB : GPU Direct RDMA Disabled for HCA {i} '{h.name}' (no module)")
             for i, h in enumerate(data_hcas(host))]
    lines.append(nccl_line(host, "INFO", "Channel 00/0 : 9[1a000] -> 2[3a000] [receive] via NET/IB/1"))
    job_log(host, *lines)


@fault("ib.port_down", f"{LEAF}.IB.PORT_DOWN", Param("hca", str, "mlx5_3", help="the HCA whose port went down"))
def port_down(host: HostState, p: dict[str, Any]) -> None:
    """One GPU rail's port lost its link: State Down, Physical state Polling, a carrier-loss event."""
    hca = next((h for h in require_rails(host, "ib.port_down") if h.name == p["hca"]), None)
    if hca is None:
        raise FaultError(f"ib.port_down: hca={p['hca']!r} is not a GPU rail of {host.hostname} "
                         f"(valid: {', '.join(h.name for h in data_hcas(host))})")
    hca.state, hca.physical_state, hca.rate = "Down", "Polling", 10 if hca.link_layer == "InfiniBand" else 40
    hca.lid, hca.sm_lid = 0xFFFF if hca.link_layer == "InfiniBand" else 0, 0
    hca.counters["link_downed"] = hca.counters.get("link_downed", 0) + 1
    netif = next((n for n in host.netifs if n.name == hca.netdev), None)
    if netif is not None:
        netif.state = "DOWN"
        host.log("systemd-networkd", f"{netif.name}: Lost carrier", age_s=1500)
    host.kernel(f"mlx5_core {hca.bus_id}: Port module event: module 0, Cable unplugged", age_s=1500.2)
    job_log(host, nccl_line(host, "WARN", "NET/IB : Got async event : port error", rank=3))


@fault("ib.verbs_missing", f"{LEAF}.IB.USERSPACE_VERBS_MISSING")
def verbs_missing(host: HostState, p: dict[str, Any]) -> None:
    """The kernel has the HCAs but the image lacks rdma-core (libibverbs, providers, tools)."""
    require_rails(host, "ib.verbs_missing")
    host.software.rdma_core = False
    eth = next((n for n in host.netifs if n.name == "eth0"), None)
    oob = f"eth0:{eth.ipv4}<0>" if eth else "eth0"
    job_log(host, nccl_line(host, "INFO", "Failed to open libibverbs.so[.1]"),
            nccl_line(host, "INFO", f"NET/Socket : Using [0]{oob}"),
            nccl_line(host, "INFO", "Using network Socket"))


@fault("roce.gid_index_bad", f"{LEAF}.ROCE.GID_INDEX_MISCONFIG",
       Param("index", int, 0, help="NCCL_IB_GID_INDEX as the job sets it"))
def gid_index_bad(host: HostState, p: dict[str, Any]) -> None:
    """On RoCE rails, NCCL_IB_GID_INDEX points at a GID that is absent or not RoCE v2."""
    require_rails(host, "roce.gid_index_bad")
    make_roce(host)
    index = p["index"]
    for hca in data_hcas(host):
        gid = next((g for g in hca.gids if g.index == index), None)
        if gid is not None and gid.kind == "RoCE v2":
            raise FaultError(f"roce.gid_index_bad: index {index} is a RoCE v2 GID on {hca.name}; pick one that is "
                             f"RoCE v1 or absent (table: {', '.join(f'{g.index}={g.kind}' for g in hca.gids)})")
    host.env["NCCL_IB_GID_INDEX"] = str(index)
    first = data_hcas(host)[0].gids
    local = first[index].gid if index < len(first) else first[0].gid
    job_log(host, nccl_line(host, "INFO", f"NCCL_IB_GID_INDEX set by environment to {index}."),
            nccl_line(host, "WARN", "NET/IB : Got completion from peer 192.168.1.23<50121> with error 12, opcode 0, "
                                    f"len 0, vendor err 129 (Recv) localGid {local}", rank=1))


@fault("roce.mtu_mismatch", f"{LEAF}.ROCE.MTU_MISMATCH",
       Param("mtu", int, 1024, help="active MTU of this host's RoCE rails (others keep 4096)"))
def mtu_mismatch(host: HostState, p: dict[str, Any]) -> None:
    """This host's RoCE rails run a smaller active MTU than its peers (netdev MTU 1500 -> 1024)."""
    mtu = p["mtu"]
    require_rails(host, "roce.mtu_mismatch")
    if mtu not in NETDEV_MTU_FOR or mtu == 4096:
        raise FaultError(f"roce.mtu_mismatch: mtu={mtu} must be one of 256, 512, 1024, 2048 (peers run 4096)")
    make_roce(host, NETDEV_MTU_FOR[mtu])
    host.env["NCCL_IB_GID_INDEX"] = "3"
    job_log(host, nccl_line(host, "WARN", "NET/IB : Got async event : local access violation work queue error",
                            rank=2))


# ---- noise --------------------------------------------------------------------------------------
@noise("noise.ib_symbol_errors")
def ib_symbol_errors(host: HostState, p: dict[str, Any]) -> None:
    """A few symbol errors on one rail since the counters were last cleared; no flaps, no growth."""
    rails = data_hcas(host)
    if rails:
        rail = rails[len(rails) // 2]
        rail.counters["symbol_error"] = rail.counters.get("symbol_error", 0) + 3


@noise("noise.mlx5_power_msg")
def mlx5_power_msg(host: HostState, p: dict[str, Any]) -> None:
    """mlx5's benign 'insufficient power on the PCIe slot (27W)' at probe, and once again recently."""
    for k, hca in enumerate(data_hcas(host)):
        host.kernel(f"mlx5_core {hca.bus_id}: mlx5_pcie_event:299:(pid 9): Detected insufficient power on the "
                    "PCIe slot (27W).", age_s=host.uptime_s - 8.4 + k * 0.35, priority=4)
    rails = data_hcas(host)
    if rails:
        host.kernel(f"mlx5_core {rails[-1].bus_id}: mlx5_pcie_event:299:(pid 1304): Detected insufficient power "
                    "on the PCIe slot (27W).", age_s=1800, priority=4)


@noise("noise.nccl_benign_warn")
def nccl_benign_warn(host: HostState, p: dict[str, Any]) -> None:
    """NCCL's harmless topology warnings on VMs whose PCI bus has no host bridge in sysfs."""
    job_log(host, *(nccl_line(host, "WARN", f"Could not find real path of /sys/class/pci_bus/0000:{bus}/../../"
                                            f"0000:{bus}:00.0", rank=rank) for rank, bus in ((0, "c1"), (4, "c2"))))
