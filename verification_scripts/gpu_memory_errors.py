#!/usr/bin/env python3
"""GPU memory errors: volatile/aggregate ECC counters, row remapper (pending / failure / exhausted), SRAM
threshold, retired pages on page-retirement GPUs, InfoROM corruption, and the recovery the driver asks for.

Counters come from the query CSV (by field name) and `nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT`;
a GPU whose counters cannot be read (truncated or N/A output) leaves the check UNKNOWN, never PASS.

A counter says how many, not when. Uncorrectable ECC counts and a pending row remap are dated by the driver's
Xid lines for that GPU in the kernel log since boot: when the newest of them is older than the incident's window
and none falls inside it, the counter is history (INFO: an old problem the GPU still carries, not this
incident's evidence). An undated counter (no readable log, or no Xid line for it) stays evidence.

The driver's own verdict on a GPU comes from the full `nvidia-smi -q`: R470-R570 drivers print `GPU Reset
Status` (`Reset Required`, `Drain and Reset Recommended`: Yes/No), R570+ drivers `GPU Recovery Action`
(NVML nvmlDeviceGpuRecoveryAction_t: None, GPU reset, node reboot, drain P2P, drain and reset) and mark the
old pair "Requested functionality has been deprecated". A GPU asking for anything but None fails; a driver
that prints neither field reports nothing (no finding, not UNKNOWN).
"""

import re

import checklib
import checklib_gpu

CSV_FIELDS = ["index", "pci.bus_id", "ecc.mode.current", "ecc.errors.uncorrected.volatile.total",
              "ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.aggregate.sram",
              "ecc.errors.uncorrected.aggregate.dram", "ecc.errors.corrected.aggregate.sram",
              "ecc.errors.corrected.aggregate.dram"]
REMAP_FIELDS = ["gpu_bus_id", "remapped_rows.correctable", "remapped_rows.uncorrectable", "remapped_rows.pending",
                "remapped_rows.failure"]
# the Xids the driver prints for the events these counters count (NVIDIA Xid catalogue: 48 DBE, 63/64 row
# remapping, 94/95 contained/uncontained ECC)
DATING_XIDS = {"ecc_uncorrectable": checklib_gpu.MEMORY_XIDS, "row_remap_pending": checklib_gpu.MEMORY_XIDS}
INFOROM_RE = re.compile(r"infoROM is corrupted at gpu ([0-9a-fA-F:.]+)", re.IGNORECASE)
ATTACHED_RE = re.compile(r"^Attached GPUs\s*:\s*(\d+)", re.MULTILINE)
# thresholds: DCGM hardware limits, Azure NHC, ml-engineering (see research memo check 4)
REMAP_UNCORRECTABLE_LIMIT = 512
RETIRED_PAGES_LIMIT = 63
RETIRED_DBE_LIMIT = 15
SRAM_UNCORRECTABLE_RMA = 4
SRAM_CORRECTABLE_LIMIT = 10000
DRAM_CORRECTABLE_LIMIT = 20000000
# `nvidia-smi -q` keys of the driver's recovery request, and the values that ask for nothing
RESET_KEYS = ("GPU Reset Status/Reset Required", "GPU Reset Status/Drain and Reset Recommended")
RECOVERY_KEY = "GPU Recovery Action"
NO_ACTION = {"none", "no", "requested functionality has been deprecated"}
# the words of NVIDIA's actions as nvidia-smi and the Xid 154 line spell them (Reset, Reboot, GPU Reset
# Required, Node Reboot Required, Drain P2P, Drain and Reset, GPU_RESET)
ACTION_RE = re.compile(r"reset|reboot|drain|recover", re.IGNORECASE)


def q_value(gpu, *keys):
    """First of several -q keys (layouts differ by generation), as int/bool-able text; None if absent or N/A."""
    for key in keys:
        value = gpu.get(key)
        if value is not None and not checklib.is_na(value):
            return value
    return None


def from_q(gpu):
    """Counters of one `nvidia-smi -q` GPU block, by section and key name."""
    out = {}

    def uncorrected(scope):
        parts = [checklib.to_int(q_value(gpu, "ECC Errors/%s/%s" % (scope, k))) for k in (
            "DRAM Uncorrectable", "SRAM Uncorrectable", "SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED")]
        volta = checklib.to_int(q_value(gpu, "ECC Errors/%s/Double Bit/Total" % scope))
        parts = [p for p in parts if p is not None]
        return sum(parts) if parts else volta

    out["volatile_uncorrected"] = uncorrected("Volatile")
    out["aggregate_uncorrected"] = uncorrected("Aggregate")
    out["aggregate_sram_uncorrected"] = _sum(gpu, "Aggregate", ("SRAM Uncorrectable", "SRAM Uncorrectable Parity",
                                                               "SRAM Uncorrectable SEC-DED"))
    out["aggregate_sram_corrected"] = checklib.to_int(q_value(gpu, "ECC Errors/Aggregate/SRAM Correctable"))
    out["aggregate_dram_corrected"] = checklib.to_int(q_value(gpu, "ECC Errors/Aggregate/DRAM Correctable"))
    out["sram_threshold_exceeded"] = checklib.to_bool(q_value(gpu, "ECC Errors/Aggregate/SRAM Threshold Exceeded"))
    out["remap_pending"] = checklib.to_bool(q_value(gpu, "Remapped Rows/Pending"))
    out["remap_failure"] = checklib.to_bool(q_value(gpu, "Remapped Rows/Remapping Failure Occurred"))
    out["remapped_uncorrectable"] = checklib.to_int(q_value(gpu, "Remapped Rows/Uncorrectable Error"))
    out["retired_sbe"] = checklib.to_int(q_value(gpu, "Retired Pages/Single Bit ECC"))
    out["retired_dbe"] = checklib.to_int(q_value(gpu, "Retired Pages/Double Bit ECC"))
    out["retired_pending"] = checklib.to_bool(q_value(gpu, "Retired Pages/Pending Page Blacklist",
                                                      "Retired Pages/Pending Page Retirement", "Retired Pages/Pending"))
    ecc = q_value(gpu, "ECC Mode/Current")
    out["ecc_enabled"] = checklib.to_bool(ecc) if ecc else None
    # every ECC counter N/A: the GPU has no ECC to enable (GeForce and workstation boards)
    counters = [v for k, v in gpu.items() if k.startswith("ECC Errors/")]
    out["ecc_unsupported"] = (bool(counters) and all(checklib.is_na(v) for v in counters)) or None
    return {k: v for k, v in out.items() if v is not None}


def _sum(gpu, scope, keys):
    values = [checklib.to_int(q_value(gpu, "ECC Errors/%s/%s" % (scope, k))) for k in keys]
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def from_csv(row):
    out = {"volatile_uncorrected": checklib.to_int(row["ecc.errors.uncorrected.volatile.total"]),
           "aggregate_sram_uncorrected": checklib.to_int(row["ecc.errors.uncorrected.aggregate.sram"]),
           "aggregate_sram_corrected": checklib.to_int(row["ecc.errors.corrected.aggregate.sram"]),
           "aggregate_dram_corrected": checklib.to_int(row["ecc.errors.corrected.aggregate.dram"]),
           "volatile_corrected": checklib.to_int(row["ecc.errors.corrected.volatile.total"]),
           "ecc_enabled": checklib.to_bool(row["ecc.mode.current"])}
    return {k: v for k, v in out.items() if v is not None}


def collect(check):
    """{bdf: counters}, {bdf: entity}, and how many GPUs the driver reports."""
    csv_cmd = check.run(["nvidia-smi", "--query-gpu=" + ",".join(CSV_FIELDS), "--format=csv,noheader,nounits"])
    remap_cmd = check.run(["nvidia-smi", "--query-remapped-rows=" + ",".join(REMAP_FIELDS), "--format=csv,noheader"])
    q_cmd = check.run(["nvidia-smi", "-q", "-d", "ECC,ROW_REMAPPER,PAGE_RETIREMENT"])
    data, names = {}, {}
    for row in checklib.parse_query_csv(csv_cmd.out, CSV_FIELDS):
        bdf = checklib_gpu.norm_bdf(row["pci.bus_id"])
        if bdf and checklib.to_int(row["index"]) is not None:
            names[bdf] = "GPU%s" % row["index"]
            data.setdefault(bdf, {}).update(from_csv(row))
    for row in checklib.parse_query_csv(remap_cmd.out, REMAP_FIELDS):
        bdf = checklib_gpu.norm_bdf(row["gpu_bus_id"])
        remap = {"remap_pending": checklib.to_bool(row["remapped_rows.pending"]),
                 "remap_failure": checklib.to_bool(row["remapped_rows.failure"]),
                 "remapped_uncorrectable": checklib.to_int(row["remapped_rows.uncorrectable"])}
        if bdf:
            data.setdefault(bdf, {}).update({k: v for k, v in remap.items() if v is not None})
    blocks = checklib.parse_q_sections(q_cmd.out)
    for position, gpu in enumerate(blocks):
        bdf = checklib_gpu.norm_bdf(gpu["_bus_id"])
        names.setdefault(bdf, "GPU%d" % position)
        counters = from_q(gpu)
        slot = data.setdefault(bdf, {})
        for key, value in counters.items():
            slot.setdefault(key, value)
    attached = ATTACHED_RE.search(q_cmd.out)
    expected = max(len(names), int(attached.group(1)) if attached else 0)
    text = csv_cmd.text + q_cmd.text
    why = checklib_gpu.nvsmi_error(q_cmd) or checklib_gpu.nvsmi_error(csv_cmd) or q_cmd.why()
    return data, names, expected, text, why


def recovery_requests(check, names):
    """{gpu: [(field, value)]} of every GPU whose driver asks for a reset, reboot or drain, from the full
    `nvidia-smi -q` (the -d display types above do not print these fields)."""
    cmd = check.run(["nvidia-smi", "-q"])
    blocks = checklib.parse_q_sections(cmd.out) if not cmd.unusable else []
    if not blocks:
        check.metrics["recovery_action"] = "not read: %s" % (checklib_gpu.nvsmi_error(cmd) or cmd.why())
        return {}
    asks, reported, odd = {}, {}, []
    for position, gpu in enumerate(blocks):
        who = names.get(checklib_gpu.norm_bdf(gpu["_bus_id"]), "GPU%d" % position)
        for key in (RECOVERY_KEY, *RESET_KEYS):
            value = (gpu.get(key) or "").strip()
            if key == RECOVERY_KEY and value:
                reported[who] = value
            if checklib.is_na(value) or value.lower() in NO_ACTION:
                continue
            field = key.split("/")[-1]
            if (key == RECOVERY_KEY and ACTION_RE.search(value)) or checklib.to_bool(value) is True:
                asks.setdefault(who, []).append((field, value))
            else:
                odd.append((who, field, value))
    check.metrics["recovery_action"] = reported or "not reported by this driver"
    for who, field, value in odd:
        check.info("recovery_action_unrecognised", who, "nvidia-smi reports %s: %r on %s (a value this check "
                   "does not know; not judged)" % (field, value, who))
    return asks


def body(check):
    data, names, expected, text, why = collect(check)
    corrupt = {}
    for match in INFOROM_RE.finditer(text):
        corrupt.setdefault(checklib_gpu.norm_bdf(match.group(1)), match.group(0))
    for bdf, line in sorted(corrupt.items()):
        check.fail("inforom_corrupt", names.get(bdf, bdf), "infoROM is corrupted on %s: aggregate ECC and retirement "
                   "records cannot be trusted" % names.get(bdf, bdf), line)
    readable = {bdf: c for bdf, c in data.items() if set(c) & {"volatile_uncorrected", "remap_pending",
                                                             "retired_dbe", "retired_pending"}}
    for bdf, counters in sorted(readable.items(), key=lambda kv: names.get(kv[0], kv[0])):
        judge(check, names.get(bdf, bdf), counters)
    recovery(check, recovery_requests(check, names))
    checklib_gpu.date_by_xids(check, DATING_XIDS, {names.get(b, b): b for b in readable}.get)
    check.metrics.update({
        "gpus_read": len(readable), "gpus_expected": expected,
        "volatile_uncorrected": {names.get(b, b): c.get("volatile_uncorrected") for b, c in readable.items()},
        "remap_pending": sorted(names.get(b, b) for b, c in readable.items() if c.get("remap_pending")),
        "remap_failure": sorted(names.get(b, b) for b, c in readable.items() if c.get("remap_failure")),
        "aggregate_dram_corrected": sum(c.get("aggregate_dram_corrected", 0) for c in readable.values())})
    failed = any(f["severity"] == "FAIL" for f in check.findings)
    if not readable and not failed:
        check.unknown("no ECC / row-remapper counters readable (%s)" % why)
    if len(readable) < expected and not failed:
        check.unknown("memory error counters readable for only %d of %d GPUs (truncated or N/A output)"
                      % (len(readable), expected))


def recovery(check, asks):
    """FAIL each GPU the driver asks to reset, reboot or drain, unless its pending row remap (or page
    retirement) already says so: that finding carries the same request and is dated by its Xid lines."""
    pending = {f["entity"]: f for f in check.findings if f["id"] in ("row_remap_pending", "retired_pages_pending")}
    for who, fields in sorted(asks.items()):
        said = ", ".join("%s: %s" % (field, value) for field, value in fields)
        if who in pending:
            pending[who]["message"] += " (the driver reports %s)" % said
            continue
        wanted = ", ".join(field.lower() if checklib.to_bool(value) is True else value.lower()
                           for field, value in fields)
        check.fail("recovery_action", who, "the NVIDIA driver asks for recovery of %s (%s)" % (who, said),
                   "; ".join("%s : %s" % f for f in fields), action="%s: %s (the driver's request)" % (who, wanted))


def judge(check, who, c):
    if c.get("ecc_enabled") is False and c.get("ecc_unsupported"):
        check.info("ecc_unsupported", who, "%s has no ECC (its ECC counters read N/A)" % who)
    elif c.get("ecc_enabled") is False:
        check.warn("ecc_disabled", who, "ECC is disabled on %s: memory errors go undetected" % who)
    if c.get("volatile_uncorrected"):
        check.fail("ecc_uncorrectable", who, "%d uncorrectable ECC error(s) since the last driver load on %s"
                   % (c["volatile_uncorrected"], who))
    if c.get("remap_pending"):
        check.fail("row_remap_pending", who, "row remapping pending on %s: a GPU reset is needed to apply it" % who)
    if c.get("remap_failure"):
        check.fail("row_remap_failure", who, "row remapping failed on %s: no spare rows left (field diag / RMA)"
                   % who)
    if (c.get("remapped_uncorrectable") or 0) > REMAP_UNCORRECTABLE_LIMIT:
        check.fail("row_remap_exhausted", who, "%d rows remapped for uncorrectable errors on %s (limit %d)"
                   % (c["remapped_uncorrectable"], who, REMAP_UNCORRECTABLE_LIMIT))
    if c.get("sram_threshold_exceeded"):
        check.fail("sram_threshold", who, "SRAM error threshold exceeded on %s" % who)
    sram = c.get("aggregate_sram_uncorrected") or 0
    if sram > SRAM_UNCORRECTABLE_RMA:
        check.fail("sram_uncorrectable", who, "%d aggregate SRAM uncorrectable errors on %s (RMA above %d)"
                   % (sram, who, SRAM_UNCORRECTABLE_RMA))
    elif sram:
        check.warn("sram_uncorrectable", who, "%d aggregate SRAM uncorrectable error(s) on %s" % (sram, who))
    if (c.get("aggregate_sram_corrected") or 0) > SRAM_CORRECTABLE_LIMIT:
        check.fail("sram_correctable", who, "%d aggregate SRAM correctable errors on %s (limit %d)"
                   % (c["aggregate_sram_corrected"], who, SRAM_CORRECTABLE_LIMIT))
    if (c.get("aggregate_dram_corrected") or 0) > DRAM_CORRECTABLE_LIMIT:
        check.fail("dram_correctable", who, "%d aggregate DRAM correctable errors on %s" % (
            c["aggregate_dram_corrected"], who))
    retired(check, who, c)


def retired(check, who, c):
    """Page retirement (V100-class GPUs): table limits from DCGM and Azure NHC."""
    sbe, dbe = c.get("retired_sbe") or 0, c.get("retired_dbe") or 0
    if sbe + dbe >= RETIRED_PAGES_LIMIT:
        check.fail("retired_pages_limit", who, "%d retired pages on %s (SBE %d + DBE %d; limit %d)%s" % (
            sbe + dbe, who, sbe, dbe, RETIRED_PAGES_LIMIT, ", retirement pending" if c.get("retired_pending") else ""))
    elif dbe > RETIRED_DBE_LIMIT:
        check.fail("retired_pages_dbe", who, "%d pages retired for double-bit errors on %s (limit %d)"
                   % (dbe, who, RETIRED_DBE_LIMIT))
    elif c.get("retired_pending"):
        check.warn("retired_pages_pending", who, "page retirement pending on %s (reset to apply)" % who)


if __name__ == "__main__":
    checklib.main("gpu_memory_errors", body)
