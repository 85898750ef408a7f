"""iproute2 `ip link` / `ip addr` (plain, -o, -br, -j) and /sys/class/net for the host's interfaces.

The JSON keys and flag spellings are iproute2 5.15's (see GCM's `ip -j link` test data).
"""

from __future__ import annotations

import json
from typing import Any

from agent.sim.state import HostState, NetIf
from agent.sim.tools import ToolOutput, usage_error

COMMANDS = ("ip",)
ARP_TYPE = {"ether": 1, "infiniband": 32, "loopback": 772}
QDISC = {"loopback": "noqueue", "infiniband": "mq", "ether": "mq"}
TXQLEN = {"loopback": 1000, "infiniband": 256, "ether": 1000}
IB_BROADCAST = "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff"


def installed(host: HostState, command: str) -> bool:
    return command not in host.software.missing_tools


def _flags(netif: NetIf) -> list[str]:
    if netif.kind == "loopback":
        return ["LOOPBACK", "UP", "LOWER_UP"]
    flags = ["BROADCAST", "MULTICAST"]
    if netif.admin_up:
        flags.append("UP")
        if netif.state == "UP":
            flags.append("LOWER_UP")
        else:
            flags.insert(0, "NO-CARRIER")
    return flags


def _operstate(netif: NetIf) -> str:
    return "UNKNOWN" if netif.kind == "loopback" else ("UP" if netif.state == "UP" and netif.admin_up else "DOWN")


def _broadcast(netif: NetIf) -> str:
    return {"infiniband": IB_BROADCAST, "loopback": "00:00:00:00:00:00"}.get(netif.kind, "ff:ff:ff:ff:ff:ff")


def _link_json(index: int, netif: NetIf) -> dict[str, Any]:
    return {"ifindex": index, "ifname": netif.name, "flags": _flags(netif), "mtu": netif.mtu,
            "qdisc": QDISC[netif.kind], "operstate": _operstate(netif), "linkmode": "DEFAULT", "group": "default",
            "txqlen": TXQLEN[netif.kind], "link_type": netif.kind, "address": netif.mac,
            "broadcast": _broadcast(netif)}


def _addr_info(netif: NetIf) -> list[dict[str, Any]]:
    if not netif.ipv4 or not netif.admin_up:
        return []
    info: dict[str, Any] = {"family": "inet", "local": netif.ipv4, "prefixlen": netif.prefixlen}
    if netif.kind != "loopback":
        info["broadcast"] = _bcast_addr(netif)
    info.update({"scope": "host" if netif.kind == "loopback" else "global", "label": netif.name,
                 "valid_life_time": 4294967295, "preferred_life_time": 4294967295})
    infos = [info]
    if netif.kind == "loopback":
        infos.append({"family": "inet6", "local": "::1", "prefixlen": 128, "scope": "host",
                      "valid_life_time": 4294967295, "preferred_life_time": 4294967295})
    return infos


def _bcast_addr(netif: NetIf) -> str:
    value = int.from_bytes(bytes(int(x) for x in netif.ipv4.split(".")), "big")
    value |= (1 << (32 - netif.prefixlen)) - 1
    return ".".join(str(b) for b in value.to_bytes(4, "big"))


def _plain_link(index: int, netif: NetIf, oneline: bool) -> str:
    head = (f"{index}: {netif.name}: <{','.join(_flags(netif))}> mtu {netif.mtu} qdisc {QDISC[netif.kind]} "
            f"state {_operstate(netif)} mode DEFAULT group default qlen {TXQLEN[netif.kind]}")
    link = f"link/{netif.kind} {netif.mac} brd {_broadcast(netif)}"
    return f"{head}\\    {link}" if oneline else f"{head}\n    {link}"


def _plain_addr(index: int, netif: NetIf, family: str | None, oneline: bool) -> str:
    lines = [] if oneline else [_plain_link(index, netif, False).replace(" mode DEFAULT", "")]
    for info in _addr_info(netif):
        if family and info["family"] != family:
            continue
        fam = info["family"]
        brd = f" brd {info['broadcast']}" if "broadcast" in info else ""
        label = f" {netif.name}" if fam == "inet" else ""
        text = f"{fam} {info['local']}/{info['prefixlen']}{brd} scope {info['scope']}{label}"
        life = "valid_lft forever preferred_lft forever"
        lines.append(f"{index}: {netif.name}    {text}\\       {life}" if oneline else f"    {text}\n       {life}")
    return "\n".join(lines)


def _brief(netif: NetIf, what: str) -> str:
    if what == "link":
        return f"{netif.name:<16} {_operstate(netif):<14} {netif.mac} <{','.join(_flags(netif))}>"
    addrs = " ".join(f"{i['local']}/{i['prefixlen']}" for i in _addr_info(netif))
    return f"{netif.name:<16} {_operstate(netif):<14} {addrs}".rstrip()


def run(host: HostState, argv: list[str]) -> ToolOutput:
    args = argv[1:]
    fmt, family = "plain", None
    while args and args[0].startswith("-"):
        opt = args.pop(0)
        if opt in ("-j", "-json", "--json"):
            fmt = "json"
        elif opt in ("-br", "-brief", "--brief"):
            fmt = "brief"
        elif opt in ("-o", "-oneline", "--oneline"):
            fmt = "oneline"
        elif opt in ("-4", "-6"):
            family = "inet" if opt == "-4" else "inet6"
        elif opt not in ("-p", "-pretty", "-d", "-details", "-c", "-color=never"):
            return usage_error("ip", argv)
    if not args:
        return usage_error("ip", argv)
    obj = {"l": "link", "li": "link", "link": "link", "a": "addr", "ad": "addr", "addr": "addr",
           "address": "addr"}.get(args[0])
    rest = args[1:]
    if rest and rest[0] in ("show", "list", "ls"):
        rest = rest[1:]
    if rest and rest[0] == "dev":
        rest = rest[1:]
    if obj is None or len(rest) > 1:
        return usage_error("ip", argv)
    indexed = list(enumerate(host.netifs, 1))
    if rest:
        indexed = [(i, n) for i, n in indexed if n.name == rest[0]]
        if not indexed:
            return ToolOutput("", f'Device "{rest[0]}" does not exist.\n', 1)
    if fmt == "json":
        items = []
        for index, netif in indexed:
            item = _link_json(index, netif)
            if obj == "addr":
                item["addr_info"] = [i for i in _addr_info(netif) if not family or i["family"] == family]
            items.append(item)
        return ToolOutput(json.dumps(items, separators=(",", ":")) + "\n")
    if fmt == "brief":
        return ToolOutput("".join(_brief(n, obj) + "\n" for _, n in indexed))
    oneline = fmt == "oneline"
    if obj == "link":
        return ToolOutput("".join(_plain_link(i, n, oneline) + "\n" for i, n in indexed))
    blocks = [_plain_addr(i, n, family, oneline) for i, n in indexed]
    return ToolOutput("".join(b + "\n" for b in blocks if b))


def files(host: HostState) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for index, netif in enumerate(host.netifs, 1):
        base = f"/sys/class/net/{netif.name}"
        out.update({
            f"{base}/operstate": _operstate(netif).lower() + "\n",
            f"{base}/mtu": f"{netif.mtu}\n",
            f"{base}/type": f"{ARP_TYPE[netif.kind]}\n",
            f"{base}/address": netif.mac + "\n",
            f"{base}/ifindex": f"{index}\n",
            f"{base}/carrier": ("1" if netif.state in ("UP", "UNKNOWN") else "0") + "\n",
        })
    return out
