#!/usr/bin/env python3
"""ib_link_errors: link flaps of the GPU rails in the last 24 h and IB port error counters.

Flaps are `<netdev>: Lost carrier` (systemd-networkd / NetworkManager) and mlx5 `Link down` lines;
Azure NHC fails a device with >= 5 in 24 h (NHC2005), fewer is a warning. mlx5 cable/module events in
the window are warnings; mlx5's "insufficient power on the PCIe slot" is benign (seen on healthy H100s).
Counters are sampled twice: growth of link_downed / symbol_error / link_error_recovery ... is a warning;
old non-zero totals only inform (they accumulate since the last reset).
"""

import re
import time
from datetime import datetime

import checklib
import checklib_logs
import checklib_net

FLAP_WINDOW_S = 86400
FLAP_FAIL = 5
COUNTERS = ("link_downed", "symbol_error", "link_error_recovery", "local_link_integrity_errors",
            "port_rcv_errors", "port_rcv_remote_physical_errors", "excessive_buffer_overrun_errors")
CARRIER_RE = re.compile(r"(?:^|[\s(])([\w.\-]+)\)?: (?:[Ll]ost carrier|Link down)\b"
                        r"|device \(([\w.\-]+)\): state change: .*reason 'carrier-changed'")  # NetworkManager
MODULE_RE = re.compile(r"mlx5_core (\S+?):? .*(Cable unplugged|Port module event\[error\].*|module .*(?:error|"
                       r"High Temperature|Bus stuck|power budget)[^.]*)", re.IGNORECASE)
BENIGN_RE = re.compile(r"Detected insufficient power on the PCIe slot", re.IGNORECASE)
SYSLOG_STAMP = re.compile(r"^([A-Z][a-z]{2})\s+(\d{1,2}) (\d{2}:\d{2}:\d{2})")
LOG_FILES = ("/var/log/syslog", "/var/log/syslog.1", "/var/log/messages", "/var/log/messages.1")


def syslog_epoch(line, now):
    """Epoch of a classic syslog line ("Aug 17 06:18:01"), assuming the most recent such date."""
    match = SYSLOG_STAMP.match(line)
    if not match:
        return checklib_logs.iso_epoch(line)
    year = time.localtime(now).tm_year
    for candidate in (year, year - 1):
        try:
            stamp = datetime.strptime("%d %s %s %s" % (candidate, match.group(1), match.group(2), match.group(3)),
                                      "%Y %b %d %H:%M:%S").timestamp()
        except ValueError:
            return None
        if stamp <= now + 86400:
            return stamp
    return None


def log_lines(check, since, until):
    """(epoch or None, line) from the journal, else syslog files, else the kernel ring buffer."""
    cmd = check.run(["journalctl", "--no-pager", "-o", "short-iso", "--since", checklib_logs.stamp(since),
                     "--until", checklib_logs.stamp(until), "-t", "systemd-networkd",
                     "-t", "NetworkManager", "-t", "kernel"], timeout=60)
    if checklib_logs.journal_readable(cmd):
        return [(checklib_logs.iso_epoch(line), line) for line in cmd.out.splitlines() if line.strip()], "journalctl"
    now = time.time()
    lines, sources = [], []
    for path in LOG_FILES:
        text = check.read(path)
        if text is not None:
            sources.append(path)
            lines += [(syslog_epoch(line, now), line) for line in text.splitlines() if line.strip()]
    if sources:
        return lines, ",".join(sources)
    kernel, source = checklib_logs.kernel_log(check, since, until)
    return (kernel, source) if kernel is not None else (None, "%s; %s" % (checklib_logs.journal_why(cmd), source))


def read_counters(check, ports):
    values = {}
    for port in ports:
        base = "%s/%s/ports/%s/counters/" % (checklib_net.IB_CLASS, port["dev"], port["port"])
        for name in COUNTERS:
            value = checklib.to_int(check.read(base + name))
            if value is not None:
                values[(port["dev"], name)] = value
    return values


def judge_counters(check, ports):
    first = read_counters(check, ports)
    if not first:
        return False
    time.sleep(float(check.params.get("sample_s", 1.0)))
    second = read_counters(check, ports)
    totals = {}
    for (dev, name), value in sorted(second.items()):
        grew = value - first.get((dev, name), value)
        totals[name] = totals.get(name, 0) + value
        if grew > 0:
            check.warn("counter_growing", dev, "%s %s grew by %d in %.0f s (now %d)"
                       % (dev, name, grew, float(check.params.get("sample_s", 1.0)), value))
        elif value > 0:
            check.info("counter_nonzero", dev, "%s %s = %d since the last counter reset (not growing)"
                       % (dev, name, value))
    check.metrics["counters_total"] = totals
    return True


def judge_logs(check, lines, since, until, rails):
    flaps, modules, benign = {}, {}, 0
    for epoch, line in lines:
        if epoch is not None and not since <= epoch <= until:
            continue
        if BENIGN_RE.search(line):
            benign += 1
            continue
        match = CARRIER_RE.search(line)
        if match:
            flaps.setdefault(match.group(1) or match.group(2), []).append(line)
        match = MODULE_RE.search(line)
        if match:
            modules.setdefault(match.group(1), []).append(line)
    check.metrics.update({"flaps": {k: len(v) for k, v in flaps.items()}, "benign_mlx5_messages": benign})
    for netdev, events in sorted(flaps.items()):
        rail = netdev in rails or netdev.startswith("ib")
        if not rail:
            check.info("carrier_lost", netdev, "%s lost carrier %d time(s) (not a GPU rail)" % (netdev, len(events)),
                       events[-1])
        elif len(events) >= FLAP_FAIL:
            check.fail("link_flapping", rails.get(netdev, netdev), "%s lost carrier %d times in 24 h (>= %d: "
                       "flapping link)" % (netdev, len(events), FLAP_FAIL), events[-1])
        else:
            check.warn("carrier_lost", rails.get(netdev, netdev), "%s lost carrier %d time(s) in 24 h"
                       % (netdev, len(events)), events[-1])
    for bus, events in sorted(modules.items()):
        check.warn("mlx5_module_event", bus, "mlx5 %s: %s" % (bus, MODULE_RE.search(events[-1]).group(2)),
                   events[-1])


def body(check):
    since, until = check.window(FLAP_WINDOW_S, FLAP_WINDOW_S)
    ports = checklib_net.rdma_ports(check)
    rails = {}
    for port in checklib_net.data_ports(ports, check.profile):
        for netdev in port["netdevs"]:
            rails[netdev] = port["dev"]
    lines, source = log_lines(check, since, until)
    if lines is not None:
        judge_logs(check, lines, since, until, rails)
    have_counters = judge_counters(check, ports)
    if lines is None and not have_counters:
        check.unknown("no link log and no port counters readable: %s" % source)
    check.metrics["log_source"] = source if lines is not None else None
    unsorted = [f["entity"] for f in check.findings if f["id"] == "carrier_lost" and f["severity"] == "INFO"]
    if not ports and unsorted and check.expect("hca_count", int) != 0 and \
            not any(f["severity"] in ("FAIL", "WARN") for f in check.findings):
        # without the RDMA ports an Ethernet (RoCE) rail cannot be told from any other interface
        check.unknown("%s lost carrier in the window, but no RDMA port is visible in /sys/class/infiniband to tell "
                      "whether they are GPU rails" % ", ".join(sorted(set(unsorted))))
    check.finish("no link flaps in 24 h (%s)%s" % (source if lines is not None else "no log",
                                                    ", counters not growing" if have_counters else ""))


if __name__ == "__main__":
    checklib.main("ib_link_errors", body)
