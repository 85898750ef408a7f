#!/usr/bin/env python3
"""Xid / SXid scan: the GPU driver's error events in the kernel log inside the incident window (params window_s,
default 2 h; 0 = the whole log), classified by NVIDIA's Xid and SXid catalogue (xid_catalog.csv, sxid_catalog.csv).

Every finding carries NVIDIA's recommended action. Its severity follows from that action: a node-level action
(reset the GPU, reboot, drain and contact support, update the driver) FAILs, "restart the application" WARNs, "no
action" is INFO. NVLink5 Xids (144-150) and SXids are decoded by the Fatal/Non-fatal word on their line, else by the
catalogue. Rules on top (each with its source in checklib_xid / XID_SOURCES.md): bursts count once; a node-level
Xid 5 times in 24 h on one GPU escalates to drain and contact support; Xid 13 on the same GPC/TPC or Xid 31 on the
same GPU from different processes suggests the GPU; Xid 45 after another Xid (or saying so) is that Xid's churn;
Xid 48 with 63/64 means drain and reset; an Xid 154 sets the recovery action for the GPU's other Xids.
"""

import re
import time

import checklib
import checklib_gpu
import checklib_logs
import checklib_xid as cx

GPU_AT_RE = re.compile(r"NVRM: GPU at PCI:([0-9a-fA-F:.]+): (GPU-[0-9a-fA-F-]+)")
RECOVERY_RE = re.compile(r"recovery action changed from \S+ \(([^)]*)\) to (0x[0-9a-fA-F]+) \(([^)]*)\)")
# Xid 154's values (driver ctrl2080gpu.h): 0 None, 1 GPU Reset Required, 2 Node Reboot Required, 3 Drain P2P,
# 4 Drain and Reset, 5 Recover IMEX Domain
RECOVERY_ACTIONS = {0: "none", 1: "reset_gpu", 2: "reboot", 3: "reset_gpu", 4: "drain_reset", 5: "reboot"}
GPC_TPC_RE = re.compile(r"\(GPC (\d+), TPC (\d+)(?:, SM (\d+))?\)")
APP_FAULT = (13, 31)


def window_lines(check):
    """Kernel-log lines from 24 h before the incident window (history for the repetition rules) to its end, and
    the start of the window itself."""
    window = float(check.params.get("window_s", 7200) or 0)
    if window > 0:
        since, until = check.window(7200)
        read_from = min(since, check.incident_time() - cx.REPEAT_WINDOW_S)
    else:
        since = read_from = 0.0
        until = check.incident_time() + checklib.AFTER_INCIDENT_S
    now = time.time()
    lines, source = checklib_logs.kernel_log(check, since_epoch=read_from, until_epoch=until)
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
        elif stamp < read_from or stamp > until:
            continue
        kept.append((stamp, text))
    check.metrics.update({"window_s": window, "source": source, "lines_scanned": len(kept),
                          "undated_lines": undated})
    return kept, since


def body(check):
    catalog = cx.load_catalog()
    lines, since = window_lines(check)
    index_of, mapped_by = checklib_gpu.gpu_index_map(check)
    uuids = {}
    for _, text in lines:
        match = GPU_AT_RE.search(text)
        if match:
            uuids[checklib_gpu.norm_bdf(match.group(1))] = match.group(2).lower()

    def entity(bus):
        index = index_of.get(bus)
        if index is None and bus in uuids:
            index = index_of.get(uuids[bus])
        return "GPU%d" % index if index is not None else bus or "a GPU"

    events = cx.parse_events(lines)
    for event in events:
        event["where"] = entity(event["bus"]) if event["kind"] == "XID" else "%s (%s)" % (event["switch"], event["bus"])
        event["current"] = event["stamp"] is None or event["stamp"] >= since
    groups = {}
    for event in events:
        groups.setdefault((event["kind"], event["code"], event["where"]), []).append(event)
    current = {key: [e for e in group if e["current"]] for key, group in groups.items()}
    current = {key: group for key, group in current.items() if group}
    decided = {key: classify(catalog, key, group, groups[key], current, check.incident_time())
               for key, group in sorted(current.items())}
    recovery_override(decided)
    report(check, decided)
    suspect_repeats(check, current)
    xids, counts, sxids = {}, {}, {}
    for (kind, code, where), group in sorted(current.items()):
        if kind == "XID":
            xids.setdefault(str(code), []).append(where)
            counts[str(code)] = counts.get(str(code), 0) + len(group)
        else:
            sxids.setdefault(str(code), []).append(where)
    check.metrics.update({"xids": xids, "xid_counts": counts})
    if sxids:
        check.metrics["sxids"] = sxids
    check.metrics["gpu_mapping"] = mapped_by


def classify(catalog, key, group, everything, current, at):
    """The decision for one code on one GPU or switch: finding id, action, NVIDIA's words, notes."""
    kind, code, where = key
    entry = catalog.get((kind, code))
    bursts = cx.occurrences(group, cx.BURST_S.get(code, cx.DEFAULT_BURST_S))
    decision = {"kind": kind, "code": code, "where": where, "entry": entry, "lines": len(group),
                "bursts": len(bursts), "raw": group[0]["raw"], "notes": [], "id": "%s_%d" % (kind.lower(), code),
                "name": entry["name"] if entry else "", "wording": group[0]["wording"],
                "pids": sorted({e["pid"] for e in group if e["pid"] and e["pid"] != "<unknown>"})}
    word = _severity(group, entry)
    action = entry["action"] if entry else ""
    if kind == "SXID":
        decision["id"] = {"fatal": "sxid_fatal", "nonfatal": "sxid_nonfatal"}.get(word, "sxid")
        if entry is None:
            decision["notes"].append("not in the SXid catalogue")
        if word == "nonfatal":
            # the switch recovered: never a failure, but NVIDIA's action for the code stands (12028: restart the
            # guest VM, its traffic stalls); report() makes a node-level action on a non-fatal SXid a WARN
            decision["nonfatal"] = True
            decision["notes"].append("the driver marked it Non-fatal")
            action = action or "none"
        elif word == "fatal" and action in ("", "none"):
            action = "reboot"  # the Fabric Manager guide: a fatal SXid needs the GPUs and NVSwitches reset
        elif word is None:
            decision["notes"].append("severity neither on the line nor in the catalogue")
    elif entry is None or not action:
        decision["notes"].append("not in NVIDIA's catalogue" if entry is None else "NVIDIA's catalogue marks it unused")
    elif code in cx.NVLINK5:
        if word == "nonfatal":
            # NVIDIA's 144-150 decode: non-fatal rows are IGNORE or XID_154_EVAL (an Xid 154's action if one came,
            # else RESTART_APP). Its own id keeps it from counting as NVLink hardware evidence.
            action = "restart_app"
            decision["id"] += "_nonfatal"
            decision["notes"].append("the driver marked it Nonfatal: the link recovered (NVIDIA XID_154_EVAL)")
        elif word == "fatal":
            decision["notes"].append("the driver marked it Fatal")
    if not action:
        decision["action"] = None  # nothing to go by: WARN without an NVIDIA action
        return decision
    if code == 154:
        match = RECOVERY_RE.search(group[-1]["raw"])
        value = int(match.group(2), 16) if match else None
        action = RECOVERY_ACTIONS.get(value, "drain_contact_support") if match else "drain_contact_support"
        decision["notes"].append("recovery action: %s" % (match.group(3) if match else "unreadable"))
        decision["recovery"] = action
    same_gpu = {c for (k, c, w) in current if k == kind and w == where and c != code}
    if code == 45:
        earlier = sorted(c for c in same_gpu if c not in (45, 154))
        if earlier or any(cx.CAUSED_BY_RE.search(e["raw"]) for e in group):
            decision["notes"].append("churn after %s: follow that Xid's guidance" % (
                ", ".join("Xid %d" % c for c in earlier) or "an earlier Xid"))
        else:
            decision["notes"].append("solo: NVIDIA's WORKFLOW_XID_45 says restart Fabric Manager if it recurs")
        action = "none"
    if code == 48 and same_gpu & {63, 64}:
        action = cx.stronger(action, "drain_reset")
        decision["notes"].append("with Xid %s (NVIDIA WORKFLOW_XID_48: DRAIN_AND_RESET)" % "/".join(
            str(c) for c in sorted(same_gpu & {63, 64})))
    if code == 163 and 162 in same_gpu and _last_stamp(current[(kind, 162, where)]) >= _last_stamp(group):
        action = "none"
        decision["notes"].append("cancelled by a later Xid 162 (power smoothing re-engaged)")
    if action in cx.NODE_ACTIONS:
        day = [e for e in everything if e["stamp"] is None or e["stamp"] >= at - cx.REPEAT_WINDOW_S]
        repeats = len(cx.occurrences(day, cx.BURST_S.get(code, cx.DEFAULT_BURST_S)))
        if repeats >= cx.REPEAT_FATAL_COUNT:
            action = "drain_contact_support"
            decision["notes"].append("%d times in 24 h (NVSentinel: a fatal Xid 5 times in 24 h on one GPU -> "
                                     "contact support)" % repeats)
    decision["action"] = action
    return decision


def _severity(group, entry):
    words = {e["severity_word"] for e in group if e["severity_word"]}
    if "fatal" in words:
        return "fatal"
    if "nonfatal" in words:
        return "nonfatal"
    return entry["severity"] if entry and entry["severity"] in ("fatal", "nonfatal") else None


def _last_stamp(group):
    return max(e["stamp"] or 0.0 for e in group)


def recovery_override(decided):
    """An Xid 154 names the recovery the driver needs for its GPU: the GPU's other node-level Xids take it."""
    for (_, code, where), decision in decided.items():
        recovery = decision.get("recovery")
        if not recovery:
            continue
        for (_, c, w), other in decided.items():
            if w == where and c != code and other["action"] in cx.NODE_ACTIONS:
                other["action"] = cx.stronger(other["action"], recovery)


def report(check, decided):
    for (kind, code, where), d in sorted(decided.items()):
        entry = d["entry"]
        label = ("Xid %d" % code) if kind == "XID" else ("NVSwitch SXid %d" % code)
        times = "" if d["lines"] == 1 else " x%d" % d["lines"] + (" in %d bursts" % d["bursts"] if d["bursts"] > 1
                                                                      else " in one burst")
        text = "%s (%s)%s on %s" % (label, d["name"] or "uncatalogued", times, where)
        if d["wording"] == "named_by_xid45":
            text += " [named as its cause by an Xid 45 line; its own line is not in the log]"
        elif d["wording"] not in ("xid", "sxid"):
            text += " [printed as '%s', no Xid line]" % d["wording"].replace("_", " ")
        if d["notes"]:
            text += "; " + "; ".join(d["notes"])
        action = d["action"]
        if action is None:
            check.warn(d["id"], where, text, d["raw"])
            continue
        words = cx.action_words(action, where)
        text += "; NVIDIA: %s (%s)" % (words, entry["immediate"] if entry and entry["immediate"] else
                                          "no resolution bucket")
        if kind == "XID" and code in APP_FAULT and d["pids"] and action not in cx.NODE_ACTIONS:
            check.warn("xid_app", where, text + "; raised by the job's process (pid %s): an application fault "
                       "(illegal memory access), not a hardware one" % ",".join(d["pids"]), d["raw"], action=words)
        elif action in cx.NODE_ACTIONS and d.get("nonfatal"):
            check.warn(d["id"], where, text, d["raw"], action=words)
        elif action in cx.NODE_ACTIONS:
            check.fail(d["id"], where, text, d["raw"], action=words)
        elif action == "restart_app":
            check.warn(d["id"], where, text, d["raw"], action=words)
        else:
            check.info(d["id"], where, text, d["raw"], action=words)


def suspect_repeats(check, current):
    """NVIDIA's WORKFLOW_XID_13 / _31 (NVSentinel's thresholds): the same GPC+TPC (Xid 13) or the same GPU (Xid 31)
    faulting again from a different process points at the GPU, not at one application: run DCGM's EUD."""
    for (kind, code, where), group in sorted(current.items()):
        if kind != "XID" or code not in APP_FAULT:
            continue
        places = {}
        for event in group:
            pid = event["pid"] if event["pid"] and event["pid"] != "<unknown>" else ""
            if not pid:
                continue
            where_on_gpu = GPC_TPC_RE.search(event["detail"]) if code == 13 else None
            if code == 13 and not where_on_gpu:
                continue
            place = where_on_gpu.groups()[:2] if where_on_gpu else ()
            places.setdefault(place, set()).add(pid)
        for place, pids in sorted(places.items()):
            if len(pids) < cx.REPEAT_SUSPECT_COUNT:
                continue
            if code == 13:
                check.warn("xid_13_same_sm", where, "Xid 13 on the same GPC %s, TPC %s of %s from %d different "
                           "processes: suspect the GPU (NVIDIA WORKFLOW_XID_13: run DCGM EUD, then field diagnostics)"
                           % (place[0], place[1], where, len(pids)), action="run DCGM diagnostics (EUD) on %s" % where)
            else:
                check.warn("xid_31_same_gpu", where, "Xid 31 on %s from %d different processes: suspect the GPU "
                           "(NVIDIA WORKFLOW_XID_31: run DCGM EUD, then field diagnostics)" % (where, len(pids)),
                           action="run DCGM diagnostics (EUD) on %s" % where)


if __name__ == "__main__":
    checklib.main("xid_scan", body)
