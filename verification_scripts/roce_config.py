#!/usr/bin/env python3
"""roce_config: active MTU of the GPU rails and the RoCE GID tables.

Active MTU per data port comes from `ibv_devinfo` (on RoCE it follows the netdev MTU: 1500 -> 1024,
9000 -> 4096; without ibv_devinfo it is derived from /sys/class/net/<if>/mtu the way the kernel does).
Rails of one host with different MTUs fail; an MTU below the profile is a warning on its own, and the
runner compares `active_mtu` across the incident's hosts, where a difference breaks RDMA between them.
Every RoCE rail needs a populated RoCE v2 GID; NCCL_IB_GID_INDEX, when set, must point at one.
"""

import os

import checklib
import checklib_net

IB_MTUS = (4096, 2048, 1024, 512, 256)
ROCE_OVERHEAD = 88  # GRH + BTH + XRC/atomic ext + ICRC bytes the kernel subtracts (iboe_get_mtu)


def parse_devinfo(text):
    """`ibv_devinfo` into port dicts with dev, port, state, active_mtu, max_mtu, link_layer, hca_type."""
    ports, dev, part, port = [], None, "", None
    for raw in text.splitlines():
        key, _, value = raw.strip().partition(":")
        key, value = key.strip(), value.strip()
        if key == "hca_id":
            dev, part, port = value, "", None
        elif key == "vendor_part_id":
            part = "MT" + value
        elif key == "port" and dev:
            port = {"dev": dev, "port": checklib.to_int(value) or 1, "hca_type": part, "state": "",
                    "active_mtu": None, "max_mtu": None, "link_layer": "", "rate_gbps": None, "phys_state": ""}
            ports.append(port)
        elif port is not None and key == "state":
            port["state"] = value.split()[0].replace("PORT_", "")
        elif port is not None and key in ("active_mtu", "max_mtu"):
            port[key] = checklib.to_int(value)
        elif port is not None and key == "link_layer":
            port["link_layer"] = value
    return ports


def roce_mtu(netdev_mtu):
    usable = (netdev_mtu or 0) - ROCE_OVERHEAD
    return next((m for m in IB_MTUS if m <= usable), None)


def mtus_from_sysfs(check, data):
    for port in data:
        netdev = port["netdevs"][0] if port["netdevs"] else None
        mtu = checklib.to_int(check.read("/sys/class/net/%s/mtu" % netdev)) if netdev else None
        port["active_mtu"] = roce_mtu(mtu)


def judge_gids(check, rails):
    index = checklib.to_int(os.environ.get("NCCL_IB_GID_INDEX", ""))
    for port in rails:
        table = [checklib_net.port_gid(check, port["dev"], port["port"], i) for i in range(16)]
        v2 = [i for i, (gid, kind) in enumerate(table) if gid and "v2" in kind]
        if not v2:
            check.fail("no_roce_v2_gid", port["dev"], "%s port %s has no populated RoCE v2 GID (is its netdev up with "
                       "an address?)" % (port["dev"], port["port"]))
        elif index is not None and index not in v2:
            gid, kind = table[index] if index < len(table) else (None, "")
            check.fail("gid_index_bad", port["dev"], "NCCL_IB_GID_INDEX=%d on %s is %s; RoCE v2 GIDs: %s"
                       % (index, port["dev"], "empty" if gid is None else "%s (%s)" % (kind, gid),
                          ", ".join(map(str, v2))))
        port["roce_v2_gids"] = v2


def body(check):
    want = check.expect("ib_mtu", int)
    if checklib_net.no_rdma_expected(check):
        check.finish(checklib_net.NO_RDMA + ": no RoCE rail to configure")
    sysfs = checklib_net.rdma_ports(check)
    cmd = check.run(["ibv_devinfo"])
    verbs = parse_devinfo(cmd.out) if cmd.ok else []
    data = checklib_net.data_ports(sysfs or verbs, check.profile)
    if not data:
        check.unknown("no GPU-rail ports found (%s)" % ("no RDMA devices" if not (sysfs or verbs) else cmd.why()))
    check.metrics["expected_mtu"] = want
    by_id = {(p["dev"], p["port"]): p for p in verbs}
    for port in data:
        port["active_mtu"] = by_id.get((port["dev"], port["port"]), {}).get("active_mtu", port.get("active_mtu"))
    if not verbs:
        if any(p["link_layer"] != "Ethernet" for p in data):
            check.unknown("ibv_devinfo unusable (%s); the IB active MTU is not in sysfs" % cmd.why())
        mtus_from_sysfs(check, data)
    # a port that is down keeps a stale active_mtu; nic_config reports the port itself
    active = [p for p in data if by_id.get((p["dev"], p["port"]), p).get("state") in ("ACTIVE", "")]
    mtus = {p["dev"]: p["active_mtu"] for p in active if p["active_mtu"]}
    values = sorted(set(mtus.values()))
    check.targets = sorted(mtus)
    check.metrics.update({"active_mtu": values[0] if len(values) == 1 else values, "port_mtu": mtus,
                          "link_layer": sorted({p["link_layer"] for p in data}),
                          "mtu_source": "ibv_devinfo" if verbs else "netdev mtu"})
    if not mtus:
        check.unknown("no active MTU readable for the GPU rails (%s)" % cmd.why())
    if len(values) > 1:
        check.fail("mtu_mixed", "host", "GPU rails run different active MTUs: %s"
                   % ", ".join("%s=%d" % kv for kv in sorted(mtus.items())))
    for dev, mtu in sorted(mtus.items()):
        if want is not None and mtu < want:
            check.warn("mtu_low", dev, "%s active_mtu %d < %d (RDMA to peers at %d breaks)" % (dev, mtu, want, want))
    rails = [p for p in data if p["link_layer"] == "Ethernet"]
    if rails and sysfs:  # the GID table is only in sysfs
        judge_gids(check, rails)
    unjudged = "" if want is not None else " (not compared: no expectation for ib_mtu on this host)"
    check.finish("GPU rails' active MTU %s%s%s" % ("/".join(map(str, values)), ", RoCE v2 GIDs present" if rails
                                                    else "", unjudged))


if __name__ == "__main__":
    checklib.main("roce_config", body)
