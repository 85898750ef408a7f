#!/usr/bin/env python3
"""Xid / SXid scan: NVRM Xid events, NVSwitch SXids and fallen-off-the-bus lines in the kernel log inside
the incident window (params window_s, default 2 h; 0 = since boot), classified by the NVIDIA Xid catalog.

Hardware/fatal Xids FAIL; application-side Xids WARN; Xid 13/31 raised for a named process are the
application's own fault (xid_app). metrics.xids maps each code to the GPUs it hit, for the diagnosis.
"""

import re
import time

import checklib
import checklib_gpu
import checklib_logs

# NVSentinel's pattern; older drivers drop "PCI:" and pid/name
XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+)(?:, pid=([^,]*))?(?:, name=([^,]*))?, (.*)")
SXID_RE = re.compile(r"(nvidia-nvswitch\d*): SXid \(PCI:([0-9a-fA-F:.]+)\): (\d+), (.*)")
FALLEN_RE = re.compile(r"NVRM: GPU ([0-9a-fA-F:.]+): GPU has fallen off the bus")
GPU_AT_RE = re.compile(r"NVRM: GPU at PCI:([0-9a-fA-F:.]+): (GPU-[0-9a-fA-F-]+)")
RECOVERY_RE = re.compile(r"recovery action changed from \S+ \(([^)]*)\) to (\S+) \(([^)]*)\)")
SM_RE = re.compile(r"\(GPC (\d+), TPC (\d+), SM (\d+)\)")
# Xid -> what it means; the hardware/fatal set confirms a GPU, NVLink or driver/firmware fault
FATAL = {46: "GPU stopped processing", 48: "double-bit ECC error", 54: "auxiliary power not connected",
         62: "internal micro-controller halt", 64: "row remapping failure", 74: "NVLink error",
         79: "GPU fell off the bus", 94: "contained ECC error", 95: "uncontained ECC error",
         109: "context switch timeout", 110: "security fault", 119: "GSP RPC timeout", 120: "GSP error",
         136: "NVLink link training failed", 140: "unrecovered ECC error", 143: "GPU initialization error",
         144: "NVLink SAW error", 145: "NVLink RLW error", 146: "NVLink TLW error", 147: "NVLink TREX error",
         148: "NVLink NVLPW_CTRL error", 149: "NVLink NETIR error", 150: "NVLink MSE error",
         155: "NVLink SW-defined error", 156: "resource retirement event", 158: "GPU fatal timeout",
         167: "PCIe fatal timeout", 169: "internal micro-controller halt", 171: "uncorrectable DRAM error",
         172: "uncorrectable SRAM error"}
APP_SIDE = {8: "GPU stopped processing", 13: "graphics engine exception", 31: "GPU memory page fault (MMU)",
            32: "corrupted push buffer stream", 43: "GPU stopped processing (channel reset)",
            45: "preemptive cleanup after earlier errors", 63: "row remapping event (reset to apply)",
            68: "NVDEC0 exception", 69: "graphics engine class error", 92: "high single-bit ECC error rate"}
APP_FAULT = (13, 31)


def window_lines(check):
    window = float(check.params.get("window_s", 7200) or 0)
    since, until = check.window(7200) if window > 0 else (0.0, check.incident_time() + checklib.AFTER_INCIDENT_S)
    now = time.time()
    lines, source = checklib_logs.kernel_log(check, since_epoch=since, until_epoch=until)
    if lines is None:
        check.unknown("kernel log not readable: %s" % source)
    if any("insufficient permissions" in text for _, text in lines[:5]):
        check.unknown("the journal hides kernel messages from this user (needs root or the adm/systemd-journal "
                      "group)")
    boot = checklib_logs.boot_epoch(check)
    kept, undated = [], 0
    for stamp, text in lines:
        if text.startswith("-- "):  # journalctl's "-- No entries --" / "-- Boot ... --" markers
            continue
        if stamp is None:
            stamp = checklib_logs.line_epoch(text, boot, now)
        if stamp is None:
            undated += 1
        elif stamp < since or stamp > until:
            continue
        kept.append((stamp, text))
    check.metrics.update({"window_s": window, "source": source, "lines_scanned": len(kept),
                          "undated_lines": undated})
    return kept


def body(check):
    lines = window_lines(check)
    index_of, mapped_by = checklib_gpu.gpu_index_map(check)
    uuids = {}
    for _, text in lines:
        match = GPU_AT_RE.search(text)
        if match:
            uuids[checklib_gpu.norm_bdf(match.group(1))] = match.group(2).lower()

    def entity(address):
        bdf = checklib_gpu.norm_bdf(address)
        index = index_of.get(bdf)
        if index is None and bdf in uuids:
            index = index_of.get(uuids[bdf])
        return "GPU%d" % index if index is not None else bdf or address

    events = {}  # (code, entity) -> [count, first raw line, pids, names]
    same_sm = {}  # (entity, gpc/tpc/sm) -> pids, for Xid 13 repeating on one SM across processes
    for _, text in lines:
        match = XID_RE.search(text)
        if match:
            bdf, code, pid, name, detail = match.groups()
            pid = (pid or "").strip("'")
            name = (name or "").strip()
            key = (int(code), entity(bdf))
            event = events.setdefault(key, [0, text.strip(), set(), set(), detail])
            event[0] += 1
            if pid and pid != "<unknown>":
                event[2].add(pid)
                event[3].add(name)
            sm = SM_RE.search(detail)
            if int(code) == 13 and sm and pid and pid != "<unknown>":
                same_sm.setdefault((key[1], sm.groups()), set()).add(pid)
            continue
        match = FALLEN_RE.search(text)
        if match:
            # the companion of an Xid 79 line, or the only trace on drivers that print no Xid for it
            event = events.setdefault((79, entity(match.group(1))), [0, text.strip(), set(), set(), ""])
            event[0] = max(event[0], 1)
            continue
        match = SXID_RE.search(text)
        if match:
            sxid(check, match)
    report(check, events, same_sm)
    check.metrics["gpu_mapping"] = mapped_by


def report(check, events, same_sm):
    xids = {}
    for (code, where), (count, raw, pids, names, _detail) in sorted(events.items()):
        xids.setdefault(str(code), [])
        if where not in xids[str(code)]:
            xids[str(code)].append(where)
        times = "" if count == 1 else " x%d" % count
        if code == 154:
            recovery(check, where, raw)
        elif code in APP_FAULT and pids:
            check.warn("xid_app", where, "Xid %d (%s)%s raised by the job's process %s (pid %s) on %s: an application "
                       "fault (illegal memory access), not a hardware one" % (
                           code, APP_SIDE[code], times, ",".join(sorted(names)) or "?", ",".join(sorted(pids)),
                           where), raw)
        elif code in FATAL:
            check.fail("xid_%d" % code, where, "Xid %d (%s)%s on %s" % (code, FATAL[code], times, where), raw)
        elif code in APP_SIDE:
            check.warn("xid_%d" % code, where, "Xid %d (%s)%s on %s" % (code, APP_SIDE[code], times, where), raw)
        else:
            check.warn("xid_%d" % code, where, "Xid %d%s on %s (not in the triage catalog)" % (code, times, where), raw)
    for (where, sm), pids in sorted(same_sm.items()):
        if len(pids) >= 2:
            check.warn("xid_13_same_sm", where, "Xid 13 on the same SM (GPC %s, TPC %s, SM %s) of %s from %d "
                       "different processes: suspect the GPU, run DCGM diagnostics" % (*sm, where, len(pids)))
    check.metrics["xids"] = xids
    check.metrics["xid_counts"] = {str(c): n for c, n in sorted(
        (code, sum(v[0] for (k, _), v in events.items() if k == code)) for code in set(k for k, _ in events))}


def recovery(check, where, raw):
    match = RECOVERY_RE.search(raw)
    action = match.group(3) if match else "unknown"
    if match and match.group(2) in ("0x0", "0x00"):
        check.info("xid_154", where, "Xid 154: recovery action cleared (%s)" % action, raw)
    else:
        check.fail("xid_154", where, "Xid 154: the driver requires recovery on %s: %s" % (where, action), raw)


def sxid(check, match):
    switch, bdf, code, detail = match.groups()
    where = "%s (%s)" % (switch, checklib_gpu.norm_bdf(bdf) or bdf)
    check.metrics.setdefault("sxids", {}).setdefault(code, [])
    if where not in check.metrics["sxids"][code]:
        check.metrics["sxids"][code].append(where)
    if "Non-fatal" in detail or "Nonfatal" in detail:
        check.warn("sxid_nonfatal", where, "NVSwitch SXid %s (non-fatal): %s" % (code, detail[:120]), match.group(0))
    elif "Fatal" in detail or "HALT" in detail:
        check.fail("sxid_fatal", where, "NVSwitch SXid %s (fatal): %s" % (code, detail[:120]), match.group(0))
    else:
        check.warn("sxid", where, "NVSwitch SXid %s: %s" % (code, detail[:120]), match.group(0))


if __name__ == "__main__":
    checklib.main("xid_scan", body)
