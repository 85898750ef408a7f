#!/usr/bin/env python3
"""nic_config: HCA count, port State / Physical state / Rate / Link layer per GPU rail, firmware.

Sources, best first: /sys/class/infiniband (no tools needed), `ibstat`, `ibstatus`, and as a last resort
`ip -j link` (counts IPoIB interfaces, as GCM's check_ibstat does). Only the data ports count: the
InfiniBand ports, or on a RoCE host the ports of the adapter model that reaches the profile rate; a
down port on another NIC (e.g. the uncabled second port of the Ethernet NIC) is only a warning.
"""

import json
import re

import checklib
import checklib_net

STATE_WORDS = {"active": "ACTIVE", "down": "DOWN", "initializing": "INIT", "init": "INIT", "armed": "ARMED"}


def parse_ibstat(text):
    """`ibstat` output into port dicts (accepts truncated output and any indentation)."""
    ports, ca, port = [], {}, None
    for raw in text.splitlines():
        line = raw.strip()
        match = re.match(r"CA '([^']+)'", line)
        if match:
            ca, port = {"dev": match.group(1), "hca_type": "", "fw_ver": ""}, None
            continue
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "ca type":
            ca["hca_type"] = value
        elif key == "firmware version":
            ca["fw_ver"] = value
        elif re.match(r"port \d+$", key) and ca:
            port = dict(ca, port=int(key.split()[1]), state="", phys_state="", rate_gbps=None, link_layer="")
            ports.append(port)
        elif port is not None and key == "state":
            port["state"] = STATE_WORDS.get(value.lower(), value.upper())
        elif port is not None and key == "physical state":
            port["phys_state"] = value
        elif port is not None and key == "rate":
            port["rate_gbps"] = checklib.to_float(value)
        elif port is not None and key == "link layer":
            port["link_layer"] = value
    return ports


def parse_ibstatus(text):
    """`ibstatus` output ("state: 4: ACTIVE", "rate: 200 Gb/sec (4X HDR)") into port dicts."""
    ports, port = [], None
    for raw in text.splitlines():
        match = re.match(r"\s*Infiniband device '([^']+)' port (\d+) status:", raw)
        if match:
            port = {"dev": match.group(1), "port": int(match.group(2)), "state": "", "phys_state": "",
                    "rate_gbps": None, "link_layer": "", "hca_type": "", "fw_ver": ""}
            ports.append(port)
            continue
        key, _, value = raw.strip().partition(":")
        if port is None:
            continue
        if key == "state":
            port["state"] = checklib_net.sysfs_enum(value).upper()
        elif key == "phys state":
            port["phys_state"] = checklib_net.sysfs_enum(value)
        elif key == "rate":
            port["rate_gbps"] = checklib.to_float(value)
        elif key == "link_layer":
            port["link_layer"] = value.strip()
    return ports


def ib_netdevs(check):
    """IPoIB interfaces from `ip -j link` (name, operstate), or None when ip is unusable."""
    cmd = check.run(["ip", "-j", "link"])
    try:
        links = json.loads(cmd.out) if cmd.ok else None
    except ValueError:
        return None
    if not isinstance(links, list):
        return None
    return [(link.get("ifname", "?"), link.get("operstate", "")) for link in links
            if isinstance(link, dict) and link.get("link_type") == "infiniband"]


def judge_netdevs(check, netdevs, expected):
    """Only interface-level evidence: GCM's rule, IPoIB interface count and state."""
    check.metrics["ib_netdev_count"] = len(netdevs)
    if expected is not None and len(netdevs) < expected:
        check.fail("ib_netdev_count", "host", "%d InfiniBand interfaces in `ip link`, expected %d"
                   % (len(netdevs), expected))
    for name, state in netdevs:
        if state != "UP":
            check.fail("ib_netdev_down", name, "InfiniBand interface %s is %s" % (name, state or "not up"))
    check.finish("%d InfiniBand interfaces up (port details unavailable%s)" % (
        len(netdevs), "; count not compared: no expectation for hca_count on this host" if expected is None else ""))


def no_ports(check, expected, ibstat):
    """The kernel shows no RDMA port: a fault only where RDMA NICs are expected and sysfs is readable."""
    netdevs = ib_netdevs(check)
    if netdevs:
        judge_netdevs(check, netdevs, expected)
    # /sys/class/net listing interfaces shows sysfs is readable here, so an empty /sys/class/infiniband is seen
    sysfs_readable = bool(check.listdir("/sys/class/net"))
    if sysfs_readable and expected == 0:
        check.finish("no RDMA device on this host and none expected")
    if sysfs_readable and expected:
        check.fail("no_rdma_devices", "host", "the kernel shows no RDMA device (/sys/class/infiniband is empty); "
                   "expected %d HCAs" % expected)
        check.finish()
    if sysfs_readable:
        check.no_expectation("hca_count", seen="the kernel shows no RDMA device (/sys/class/infiniband is empty)")
    check.unknown("no RDMA port information: /sys/class/infiniband unreadable, %s" % ibstat.why())


def merge(sysfs, ibstat):
    """sysfs is authoritative for state; ibstat fills the adapter model and firmware it may lack."""
    extra = {(p["dev"], p["port"]): p for p in ibstat}
    for port in sysfs:
        other = extra.get((port["dev"], port["port"]), {})
        for key in ("hca_type", "fw_ver"):
            port[key] = port.get(key) or other.get(key, "")
    return sysfs


def describe(port):
    return "%s port %s: State %s, Physical state %s, Rate %s Gb/s, %s" % (
        port["dev"], port["port"], port["state"] or "?", port["phys_state"] or "?",
        "%g" % port["rate_gbps"] if port["rate_gbps"] is not None else "?", port["link_layer"] or "?")


def body(check):
    profile = check.profile
    expected, rate = check.expect("hca_count", int), check.expect("ib_rate")
    sysfs = checklib_net.rdma_ports(check)
    cmd = check.run(["ibstat"])
    ibstat = parse_ibstat(cmd.out) if not cmd.unusable else []
    if (sysfs or ibstat) and cmd.rc not in (0, 127) and not cmd.timed_out and not cmd.refused:
        # ibstat failing on one of the HCAs there are is a sick HCA; with none at all it only says "none"
        panic = next((x.strip() for x in cmd.text.splitlines() if "ibpanic" in x), checklib.first_line(cmd.err))
        dev = re.search(r"device '([^']+)'", panic)
        check.warn("ibstat_failed", dev.group(1) if dev else "ibstat",
                   "ibstat exited %s: %s" % (cmd.rc, panic), panic)
    ports, source = (merge(sysfs, ibstat), "sysfs") if sysfs else (ibstat, "ibstat")
    if not ports:
        status = check.run(["ibstatus"])
        ports, source = (parse_ibstatus(status.out), "ibstatus") if status.ok else ([], "")
    if not ports:
        no_ports(check, expected, cmd)
    data = checklib_net.data_ports(ports, profile)
    data_ids = {(p["dev"], p["port"]) for p in data}
    check.targets = [p["dev"] for p in data]
    layer = sorted({p["link_layer"] for p in data})
    check.metrics.update({
        "source": source, "hca_count": len(data), "hca_total": len(ports), "expected_hca_count": expected,
        "active_count": sum(1 for p in data if checklib_net.port_up(p)),
        "link_layer": layer[0] if len(layer) == 1 else layer,
        "rates_gbps": sorted({p["rate_gbps"] for p in data if p["rate_gbps"] is not None}),
        "firmware": sorted({p["fw_ver"] for p in data if p["fw_ver"]}),
    })
    if expected is not None and len(data) < expected:
        check.fail("hca_count", "host", "%d GPU-rail HCA ports (%s), expected %d"
                   % (len(data), "/".join(layer) or "none", expected))
    for port in data:
        if not checklib_net.port_up(port):
            # on a host that expects no RDMA NIC a dark port is an unused one, not a broken GPU rail
            check.finding("port_down", "WARN" if expected == 0 else "FAIL", port["dev"], describe(port))
        elif rate and port["rate_gbps"] is not None and port["rate_gbps"] < rate:
            check.fail("rate_degraded", port["dev"], "%s (expected %g)" % (describe(port), rate))
    if len(check.metrics["firmware"]) > 1:
        check.warn("firmware_mixed", "host", "GPU rails run mixed firmware: %s" % ", ".join(check.metrics["firmware"]))
    for port in ports:
        if (port["dev"], port["port"]) not in data_ids and port["state"] != "ACTIVE":
            check.warn("other_port_down", port["dev"], "%s (not a GPU rail: %s %s)"
                       % (describe(port), port["hca_type"] or "other adapter", port["link_layer"]))
    unchecked = [key for key, value in (("hca_count", expected), ("ib_rate", rate)) if value is None]
    check.finish("%d GPU-rail ports Active/LinkUp at %s Gb/s (%s)%s"
                 % (len(data), "/".join("%g" % r for r in check.metrics["rates_gbps"]), "/".join(layer),
                    "; not compared: no expectation for %s on this host" % " / ".join(unchecked) if unchecked else ""))


if __name__ == "__main__":
    checklib.main("nic_config", body)
