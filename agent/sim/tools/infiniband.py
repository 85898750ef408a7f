"""rdma-core / infiniband-diags / MLNX_OFED views of the HCAs: ibstat, ibstatus, ibv_devinfo,
ibv_devices, show_gids, and the sysfs tree they all read (/sys/class/infiniband).

Layouts follow real outputs (gpud ibstat/ibstatus test data, rdma-core ibv_devinfo.c, MLNX show_gids).
"""

from __future__ import annotations

from agent.sim.state import Hca, HostState
from agent.sim.tools import ToolOutput, usage_error
from agent.sim.tools._rdma import (
    PART_IDS,
    STATE_NUM,
    STATE_VERBS,
    guid_colon,
    mtu_text,
    phys_sysfs,
    rate_text,
    state_sysfs,
    verbs_present,
)

COMMANDS = ("ibstat", "ibstatus", "ibv_devinfo", "ibv_devices", "show_gids")
IB = "/sys/class/infiniband"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
EMPTY_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
PID = 4260  # the pid infiniband-diags' ibpanic prints


def installed(host: HostState, command: str) -> bool:
    if command in host.software.missing_tools:
        return False
    if command == "show_gids":  # an MLNX_OFED script
        return verbs_present(host) and host.software.ofed is not None
    return verbs_present(host)


def _sorted(host: HostState) -> list[Hca]:
    # the kernel and the tools list devices in name order: mlx5_0, mlx5_1, mlx5_10, mlx5_2 ...
    return sorted(host.hcas, key=lambda h: h.name)


def _find(host: HostState, name: str) -> Hca | None:
    return next((h for h in host.hcas if h.name == name), None)


# ---- ibstat -------------------------------------------------------------------------------------
def _ibstat_port(hca: Hca) -> list[str]:
    ib = hca.link_layer == "InfiniBand"
    return [
        f"\t\tState: {hca.state}",
        f"\t\tPhysical state: {hca.physical_state}",
        f"\t\tRate: {hca.rate}",
        f"\t\tBase lid: {hca.lid if ib else 0}",
        "\t\tLMC: 0",
        f"\t\tSM lid: {hca.sm_lid if ib else 0}",
        f"\t\tCapability mask: {'0xa751e848' if ib else '0x00010000'}",
        f"\t\tPort GUID: {hca.port_guid}",
        f"\t\tLink layer: {hca.link_layer}",
    ]


def _ibstat_ca(hca: Hca) -> list[str]:
    return [f"CA '{hca.name}'", f"\tCA type: {hca.ca_type}", "\tNumber of ports: 1",
            f"\tFirmware version: {hca.firmware}", "\tHardware version: 0", f"\tNode GUID: {hca.node_guid}",
            f"\tSystem image GUID: {hca.node_guid}", f"\tPort {hca.port}:", *_ibstat_port(hca)]


def _ibstat(host: HostState, argv: list[str]) -> ToolOutput:
    args = [a for a in argv[1:] if a not in ("-v", "--verbose")]
    if args in (["-l"], ["--list_of_cas"]):
        return ToolOutput("".join(h.name + "\n" for h in _sorted(host)))
    if not args:
        # libibumad's device list is empty, not an error, without /sys/class/infiniband: ibstat prints nothing
        return ToolOutput("".join(line + "\n" for h in _sorted(host) for line in _ibstat_ca(h)))
    hca = _find(host, args[0])
    if hca is None or len(args) > 2:
        return ToolOutput("", f"ibpanic: [{PID}] main: '{args[0]}' IB device can't be found: "
                              "No such file or directory\n", 255)
    if len(args) == 2:
        if args[1] != str(hca.port):
            return ToolOutput("", f"ibpanic: [{PID}] main: {hca.name}: port {args[1]} not found\n", 255)
        return ToolOutput("\n".join(line.replace("\t\t", "", 1) for line in _ibstat_port(hca)) + "\n")
    return ToolOutput("\n".join(_ibstat_ca(hca)) + "\n")


# ---- ibstatus -----------------------------------------------------------------------------------
def _ibstatus(host: HostState, argv: list[str]) -> ToolOutput:
    wanted = [a.split(":")[0] for a in argv[1:]]
    blocks = []
    for hca in _sorted(host):
        if wanted and hca.name not in wanted:
            continue
        ib = hca.link_layer == "InfiniBand"
        gid = hca.gids[0].gid if hca.gids else "unknown"
        blocks.append(
            f"Infiniband device '{hca.name}' port {hca.port} status:\n"
            f"        default gid:     {gid}\n"
            f"        base lid:        {hex(hca.lid if ib else 0)}\n"
            f"        sm lid:          {hex(hca.sm_lid if ib else 0)}\n"
            f"        state:           {state_sysfs(hca)}\n"
            f"        phys state:      {phys_sysfs(hca)}\n"
            f"        rate:            {rate_text(hca.rate)}\n"
            f"        link_layer:      {hca.link_layer}\n\n")
    missing = [w for w in wanted if _find(host, w) is None]
    err = "".join(f"ls: cannot access '{IB}/{w}/ports': No such file or directory\n" for w in missing)
    if not wanted and not host.hcas:  # the script lists the devices with `ls /sys/class/infiniband`
        err = f"ls: cannot access '{IB}': No such file or directory\n"
    return ToolOutput("".join(blocks), err, 2 if missing else 0)


# ---- ibv_devinfo / ibv_devices ------------------------------------------------------------------
def _devinfo_block(hca: Hca) -> str:
    ib = hca.link_layer == "InfiniBand"
    return (f"hca_id:\t{hca.name}\n"
            f"\ttransport:\t\t\tInfiniBand (0)\n"
            f"\tfw_ver:\t\t\t\t{hca.firmware}\n"
            f"\tnode_guid:\t\t\t{guid_colon(hca.node_guid)}\n"
            f"\tsys_image_guid:\t\t\t{guid_colon(hca.node_guid)}\n"
            f"\tvendor_id:\t\t\t0x02c9\n"
            f"\tvendor_part_id:\t\t\t{PART_IDS.get(hca.ca_type, 4129)}\n"
            f"\thw_ver:\t\t\t\t0x0\n"
            f"\tboard_id:\t\t\tMT_{PART_IDS.get(hca.ca_type, 4129):04d}110021\n"
            f"\tphys_port_cnt:\t\t\t1\n"
            f"\t\tport:\t{hca.port}\n"
            f"\t\t\tstate:\t\t\t{STATE_VERBS.get(hca.state, 'PORT_DOWN')} ({STATE_NUM.get(hca.state, 1)})\n"
            f"\t\t\tmax_mtu:\t\t{mtu_text(hca.max_mtu)}\n"
            f"\t\t\tactive_mtu:\t\t{mtu_text(hca.active_mtu)}\n"
            f"\t\t\tsm_lid:\t\t\t{hca.sm_lid if ib else 0}\n"
            f"\t\t\tport_lid:\t\t{hca.lid if ib else 0}\n"
            f"\t\t\tport_lmc:\t\t0x00\n"
            f"\t\t\tlink_layer:\t\t{hca.link_layer}\n\n")


def _ibv_devinfo(host: HostState, argv: list[str]) -> ToolOutput:
    args = argv[1:]
    device = None
    listing = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-l", "--list"):
            listing = True
        elif arg in ("-d", "--ib-dev") and i + 1 < len(args):
            device = args[i + 1]
            i += 1
        elif arg.startswith("--ib-dev="):
            device = arg.split("=", 1)[1]
        elif arg in ("-i", "--ib-port") and i + 1 < len(args):
            i += 1
        elif arg not in ("-v", "--verbose"):
            return usage_error("ibv_devinfo", argv)
        i += 1
    hcas = _sorted(host)
    if not hcas:
        return ToolOutput("", "No IB devices found\n", 255)
    if listing:
        return ToolOutput(f"{len(hcas)} HCA{'s' if len(hcas) != 1 else ''} found:\n"
                          + "".join(f"\t{h.name}\n" for h in hcas))
    if device is not None:
        hca = _find(host, device)
        if hca is None:
            return ToolOutput("", f"IB device '{device}' wasn't found\n", 255)
        hcas = [hca]
    return ToolOutput("".join(_devinfo_block(h) for h in hcas))


def _ibv_devices(host: HostState) -> ToolOutput:
    rows = ["    device          \t   node GUID", "    ------          \t----------------"]
    rows += [f"    {h.name:<16}\t{h.node_guid.removeprefix('0x')}" for h in _sorted(host)]
    return ToolOutput("\n".join(rows) + "\n")


# ---- show_gids (MLNX_OFED) ----------------------------------------------------------------------
def _show_gids(host: HostState, argv: list[str]) -> ToolOutput:
    wanted = argv[1] if len(argv) > 1 else None
    rows = ["DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV",
            "---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---"]
    found = 0
    for hca in _sorted(host):
        if wanted and hca.name != wanted:
            continue
        for gid in hca.gids:
            ipv4 = ""
            if ":ffff:" in gid.gid:
                tail = gid.gid.replace(":", "")[-8:]
                ipv4 = ".".join(str(int(tail[i:i + 2], 16)) for i in range(0, 8, 2))
            version = "v2" if gid.kind == "RoCE v2" else "v1"
            rows.append(f"{hca.name}\t{hca.port}\t{gid.index}\t{gid.gid}\t{ipv4:<14}\t{version}\t{gid.netdev}")
            found += 1
    rows.append(f"n_gids_found={found}")
    return ToolOutput("\n".join(rows) + "\n")


def run(host: HostState, argv: list[str]) -> ToolOutput:
    command = argv[0]
    if command == "ibstat":
        return _ibstat(host, argv)
    if command == "ibstatus":
        return _ibstatus(host, argv)
    if command == "ibv_devinfo":
        return _ibv_devinfo(host, argv)
    if command == "ibv_devices":
        return _ibv_devices(host)
    return _show_gids(host, argv)


# ---- sysfs and user-space files -----------------------------------------------------------------
def _port_files(hca: Hca) -> dict[str, str | None]:
    port = f"{IB}/{hca.name}/ports/{hca.port}"
    ib = hca.link_layer == "InfiniBand"
    out: dict[str, str | None] = {
        f"{port}/state": state_sysfs(hca) + "\n",
        f"{port}/phys_state": phys_sysfs(hca) + "\n",
        f"{port}/rate": rate_text(hca.rate) + "\n",
        f"{port}/link_layer": hca.link_layer + "\n",
        f"{port}/lid": hex(hca.lid if ib else 0) + "\n",
        f"{port}/sm_lid": hex(hca.sm_lid if ib else 0) + "\n",
    }
    table = {gid.index: gid for gid in hca.gids}
    # sysfs lists every slot of the GID table; unused slots read as zeros and have no type
    for index in range(max([*table, 7]) + 1):
        gid = table.get(index)
        out[f"{port}/gids/{index}"] = (gid.gid if gid else EMPTY_GID) + "\n"
        if gid is not None:
            out[f"{port}/gid_attrs/types/{index}"] = gid.kind + "\n"
            if gid.netdev:
                out[f"{port}/gid_attrs/ndevs/{index}"] = gid.netdev + "\n"
    for name, value in hca.counters.items():
        out[f"{port}/counters/{name}"] = f"{value}\n"
    return out


def files(host: HostState) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    netifs = {n.name: n for n in host.netifs}
    for index, hca in enumerate(_sorted(host)):
        base = f"{IB}/{hca.name}"
        out.update({
            f"{base}/fw_ver": hca.firmware + "\n",
            f"{base}/hca_type": hca.ca_type + "\n",
            f"{base}/node_type": "1: CA\n",
            f"{base}/node_guid": guid_colon(hca.node_guid) + "\n",
            f"{base}/device/numa_node": f"{hca.numa_node}\n",
        })
        netif = netifs.get(hca.netdev)
        if netif is not None:  # the PCI function's netdev, as /sys/class/infiniband/X/device/net/<if>/
            out[f"{base}/device/net/{netif.name}/operstate"] = netif.state.lower() + "\n"
        out.update(_port_files(hca))
        out[f"/dev/infiniband/uverbs{index}"] = None
    if host.hcas:
        out["/dev/infiniband/rdma_cm"] = None
    if verbs_present(host):
        out["/etc/libibverbs.d/mlx5.driver"] = "driver mlx5\n"
        out[f"{LIBDIR}/libibverbs.so.1"] = None
        out[f"{LIBDIR}/libibverbs/libmlx5-rdmav34.so"] = None
    return out
