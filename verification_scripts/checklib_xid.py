"""NVIDIA's Xid / NVSwitch SXid catalogue (xid_catalog.csv, sxid_catalog.csv beside this file) and the kernel-log
wordings of the GPU failures we diagnose, turned into events. Shipped with checklib.py; python3 stdlib only.

An event is a dict: kind ('XID' or 'SXID'), code, bus (normalised PCI id, or '' when the line names none), stamp
(epoch or None), raw (the line(s)), detail, pid, name, wording (which form the driver printed), severity_word
('fatal', 'nonfatal' or None when the line carries none).
"""

import csv
import os
import re

import checklib_gpu

HERE = os.path.dirname(os.path.abspath(__file__))

# our normalised actions, mildest first, with the words a report and a ticket use
ACTIONS = ("none", "restart_app", "update_sw_fw", "reset_gpu", "drain_reset", "reboot", "drain_contact_support")
ACTION_WORDS = {"none": "no action", "restart_app": "restart the application",
                "update_sw_fw": "update the driver and firmware", "reset_gpu": "reset %s",
                "drain_reset": "drain the node, then reset %s", "reboot": "reboot the node",
                "drain_contact_support": "drain the node and contact support (RMA)"}
NODE_ACTIONS = ("update_sw_fw", "reset_gpu", "drain_reset", "reboot", "drain_contact_support")


def load_catalog(directory=HERE):
    """{('XID'|'SXID', code): row} from the catalogue files; a missing SXid file only loses the SXid rows."""
    catalog = {}
    for name in ("xid_catalog.csv", "sxid_catalog.csv"):
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            continue
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle):
                catalog[(row["kind"], int(row["code"]))] = row
    return catalog


def action_words(action, where):
    """'reset GPU3', 'reset the GPU at 0000:3b:00', 'drain the node and contact support (RMA)' ..."""
    words = ACTION_WORDS.get(action, action)
    if "%s" not in words:
        return words
    return words % (where if where.startswith("GPU") or where == "a GPU" else "the GPU at " + where)


def stronger(a, b):
    return a if ACTIONS.index(a) >= ACTIONS.index(b) else b


# ---- wordings ---------------------------------------------------------------------------------------------------
# NVSentinel's pattern; older drivers drop "PCI:" and pid/name
XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+)(?:, pid=([^,]*))?(?:, name=([^,]*))?(?:, (.*))?")
SXID_RE = re.compile(r"(nvidia-nvswitch\d*): SXid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+),? ?(.*)")
# "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus." / old "NVRM: GPU at 0000:3b:00.0 has fallen off the bus."
# / the multi-line "NVRM: The NVIDIA GPU 0000:b3:00.0 / NVRM: (PCI ID: 10de:26b5) installed in this system has /
# NVRM: fallen off the bus and is not responding to commands."
FALLEN_RE = re.compile(r"NVRM: .*fallen off the bus", re.IGNORECASE)
# a PCI address with its domain ("0000:18:00[.0]"), or without one when the function is printed ("18:00.0": some
# drivers and kernels drop the domain; a bare "18:00" could be a time, so the function is required then)
BDF = (r"(?:[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
       r"|(?<![0-9a-fA-F:])[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])")
THE_GPU_RE = re.compile(r"NVRM: (?:The NVIDIA GPU|GPU at(?: PCI:)?|GPU) (" + BDF + r")")
GPU_LOST_RE = re.compile(r"NVRM: .*\bGPU (?:is )?lost\b", re.IGNORECASE)
# "NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0xffff:1863)", "NVRM: rm_init_adapter(0) failed"
RM_INIT_RE = re.compile(r"NVRM: .*(?:RmInitAdapter failed|rm_init_adapter(?:\(\d+\))? failed)", re.IGNORECASE)
# GSP-RM not answering, printed without an Xid line by some drivers: "Timeout waiting for RPC from GSP",
# "_kgspIsHeartbeatTimedOut", "GSP-RM heartbeat timed out"
GSP_RE = re.compile(r"NVRM: .*(?:GSP.{0,60}time(?:d)? ?out|time(?:d)? ?out.{0,60}GSP|heartbeat.{0,40}time(?:d)? ?out|"
                    r"_kgspIsHeartbeatTimedOut)", re.IGNORECASE)
# ECC / row-remap messages NVRM prints besides (or, on old drivers, instead of) the Xid line
ECC_DBE_RE = re.compile(r"NVRM: .*(?:double[- ]bit|\bDBE\b|uncorrectable).{0,60}\bECC\b|NVRM: .*\bECC\b.{0,60}"
                        r"(?:double[- ]bit|\bDBE\b|uncorrectable)", re.IGNORECASE)
ROW_REMAP_RE = re.compile(r"NVRM: .*row[- ]remap\w*.{0,60}?(fail\w*|pending)", re.IGNORECASE)
BUS_IN_LINE_RE = re.compile(r"\b(" + BDF + r")\b")
NONFATAL_RE = re.compile(r"\bNon-?fatal\b", re.IGNORECASE)
FATAL_RE = re.compile(r"\bFatal\b|\bHALT", re.IGNORECASE)
# an SXid's data line states the severity as the driver's enum: NVSWITCH_ERROR_SEVERITY_NONFATAL = 0, _FATAL = 1
# (open-gpu-kernel-modules, src/common/nvswitch/interface/ctrl_dev_nvswitch.h)
SEVERITY_NUM_RE = re.compile(r"\bSeverity ([01])\b")
# Xid 45's text on recent drivers names the Xid that caused it
CAUSED_BY_RE = re.compile(r"(?:caused by|due to|after) (?:a )?(?:previous|earlier|prior) (?:Xid|error)", re.IGNORECASE)
# ... and on some, the codes themselves ("caused by Xid 145, 149", "due to NVLink Xids 145/149"): the Xid 45 is then
# that error's cleanup, and the error it names is the event, even when its own line is not in the log
CAUSE_CODES_RE = re.compile(r"(?:caused by|due to|after|following)\s+(?:(?:an?|the)\s+)?"
                            r"(?:(?:previous|earlier|prior)\s+)?(?:NVLink\s+)?Xids?\s*[:#(]?\s*(\d{1,3}(?:\s*(?:,|/|and|&|or)\s*\d{1,3})*)",
                            re.IGNORECASE)
NVLINK5 = range(144, 151)


def severity_word(code, detail):
    if NONFATAL_RE.search(detail):
        return "nonfatal"
    if FATAL_RE.search(detail):
        return "fatal"
    number = SEVERITY_NUM_RE.search(detail)
    if number:
        return "fatal" if number.group(1) == "1" else "nonfatal"
    return None


def _event(kind, code, bus, stamp, raw, detail="", pid="", name="", wording="xid", word=None):
    return {"kind": kind, "code": code, "bus": bus or "", "stamp": stamp, "raw": raw.strip(), "detail": detail,
            "pid": pid, "name": name, "wording": wording, "severity_word": word}


def parse_events(lines):
    """[(stamp, text)] kernel-log lines -> events in log order, every wording the driver prints for a failure."""
    events = []
    recent_gpu = []  # the last "NVRM: The NVIDIA GPU <bus>" lines: the multi-line fallen-off form names it first
    for stamp, text in lines:
        match = XID_RE.search(text)
        if match:
            bus, code, pid, name, detail = match.groups()
            detail = detail or ""
            word = severity_word(int(code), detail) if int(code) in NVLINK5 else None
            events.append(_event("XID", int(code), checklib_gpu.norm_bdf(bus), stamp, text, detail,
                                 (pid or "").strip("' "), (name or "").strip(), "xid", word))
            if int(code) == 45:
                events.extend(named_causes(events[-1]))
            continue
        match = SXID_RE.search(text)
        if match:
            switch, bus, code, detail = match.groups()
            event = _event("SXID", int(code), checklib_gpu.norm_bdf(bus), stamp, text, detail, wording="sxid",
                           word=severity_word(int(code), detail))
            event["switch"] = switch
            events.append(event)
            continue
        named = THE_GPU_RE.search(text)
        if named:
            recent_gpu = [*recent_gpu, checklib_gpu.norm_bdf(named.group(1))][-3:]
        bus = _bus_in(text)
        if FALLEN_RE.search(text):
            bus = bus or (recent_gpu[-1] if recent_gpu else "")
            events.append(_event("XID", 79, bus, stamp, text, "GPU has fallen off the bus", wording="fallen_off_bus"))
        elif GPU_LOST_RE.search(text):
            events.append(_event("XID", 79, bus, stamp, text, "GPU lost", wording="gpu_lost"))
        elif RM_INIT_RE.search(text):
            events.append(_event("XID", 143, bus, stamp, text, "RmInitAdapter failed: the driver could not "
                                 "initialise the GPU", wording="rm_init_failed"))
        elif GSP_RE.search(text):
            events.append(_event("XID", 119, bus, stamp, text, "GSP firmware did not answer (timeout/heartbeat)",
                                 wording="gsp_timeout"))
        elif ROW_REMAP_RE.search(text):
            failed = ROW_REMAP_RE.search(text).group(1).lower().startswith("fail")
            events.append(_event("XID", 64 if failed else 63, bus, stamp, text,
                                 "row remapping " + ("failure" if failed else "pending"), wording="nvrm_row_remap"))
        elif ECC_DBE_RE.search(text):
            events.append(_event("XID", 48, bus, stamp, text, "uncorrectable ECC error", wording="nvrm_ecc"))
    return _merge_wordings(events)


def named_causes(event):
    """The Xids an Xid 45 line says caused it, as events of their own on its GPU ('named_by_xid45': the line of the
    cause itself may be missing, and the cause is what the node needs acting on)."""
    match = CAUSE_CODES_RE.search(event["detail"])
    if not match:
        return []
    codes = sorted(set(int(c) for c in re.findall(r"\d+", match.group(1))) - {45})
    return [_event("XID", code, event["bus"], event["stamp"], event["raw"], "named by an Xid 45 line as its cause",
                   wording="named_by_xid45") for code in codes]


def _bus_in(text):
    match = BUS_IN_LINE_RE.search(text.split("NVRM:", 1)[-1])
    return checklib_gpu.norm_bdf(match.group(1)) if match else ""


def _merge_wordings(events):
    """A wording without an Xid number that accompanies an Xid line of the same code on the same GPU (or on an
    unnamed GPU) is part of that event, not a second one (NVSentinel suppresses fallen-off-the-bus lines next to an
    Xid 79 the same way); consecutive lines of one multi-line message count once."""
    explicit = {(e["code"], e["bus"]) for e in events if e["wording"] == "xid"}
    explicit_codes = {e["code"] for e in events if e["wording"] == "xid"}
    kept = []
    for event in events:
        if event["wording"] not in ("xid", "sxid"):
            if (event["code"], event["bus"]) in explicit or (not event["bus"] and event["code"] in explicit_codes):
                continue
            last = kept[-1] if kept else None
            if event["wording"] == "named_by_xid45":  # one event per code the line names
                kept.append(event)
                continue
            if last and last["wording"] == event["wording"] and last["bus"] == event["bus"] \
                    and (last["stamp"] is None or event["stamp"] is None or abs(event["stamp"] - last["stamp"]) < 5):
                last["raw"] += "\n" + event["raw"]
                continue
        kept.append(event)
    return kept


# ---- repetition ---------------------------------------------------------------------------------------------
# Lines of one error closer together than this are one burst (one occurrence): NVSentinel's health-events analyzer
# uses 15 s for Xid 13 and 3 min for Xid 31 (docs/configuration/health-events-analyzer.md); other codes take 60 s,
# our choice, so a driver's multi-line storm of one failure counts once.
BURST_S = {13: 15.0, 31: 180.0}
DEFAULT_BURST_S = 60.0
# NVSentinel: a fatal Xid 5 or more times in 24 h on one GPU -> CONTACT_SUPPORT (RepeatedXidError rule)
REPEAT_FATAL_COUNT = 5
REPEAT_WINDOW_S = 24 * 3600.0
# NVSentinel / NVIDIA WORKFLOW_XID_13 and _31: Xid 13 twice on the same GPC+TPC, or Xid 31 twice on the same GPU
# (after burst collapsing) -> run DCGM EUD, a possible hardware fault
REPEAT_SUSPECT_COUNT = 2


def occurrences(events, burst_s):
    """Bursts among one code's events on one GPU: lines closer than `burst_s` join the burst before them; undated
    lines join the burst they follow in the log."""
    bursts = []
    for event in events:
        stamp = event["stamp"]
        if bursts and (stamp is None or bursts[-1][-1]["stamp"] is None or stamp - bursts[-1][-1]["stamp"] < burst_s):
            bursts[-1].append(event)
        else:
            bursts.append([event])
    return bursts
