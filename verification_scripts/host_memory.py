#!/usr/bin/env python3
"""host_memory: uncorrected host (DIMM) memory errors.

EDAC counters (/sys/devices/system/edac/mc/mc*/ue_count, ce_count and per-DIMM counts with their
labels) and kernel log lines from EDAC and the machine-check handler ("EDAC MC0: 1 UE ...",
"mce: [Hardware Error]: ...", "Memory failure: ..."). Any uncorrected error FAILs; a storm of
corrected errors WARNs; a few corrected errors are normal.
"""

import re

import checklib
import checklib_logs

DEFAULT_WINDOW_S = 7 * 86400
MIN_WINDOW_S = 86400  # a DIMM error hours before the job died still explains it
CE_WARN = 1000  # corrected errors since boot that suggest a failing DIMM
UE_LINE = re.compile(r"EDAC (MC\d+|\S+): (\d+) UE |EDAC.*\buncorrect|mce: Uncorrected hardware memory error|"
                     r"Memory failure: 0x[0-9a-f]+|"
                     r"\[Hardware Error\]:.*\b(uncorrect|fatal)\w*.*\b(memory|DIMM|DRAM)|"
                     r"\[Hardware Error\]:.*\b(memory|DIMM|DRAM)\b.*\b(uncorrect|fatal)", re.I)
CE_LINE = re.compile(r"EDAC (MC\d+|\S+): (\d+) CE ", re.I)


def read_edac(check):
    """{controller: {"ue": n, "ce": n, "dimms": {label: (ue, ce)}}} or None when EDAC is absent."""
    base = "/sys/devices/system/edac/mc"
    controllers = [n for n in check.listdir(base) if re.match(r"mc\d+$", n)]
    if not controllers:
        return None
    out = {}
    for mc in controllers:
        ue = checklib.to_int(check.read("%s/%s/ue_count" % (base, mc)))
        ce = checklib.to_int(check.read("%s/%s/ce_count" % (base, mc)))
        dimms = {}
        for dimm in check.listdir("%s/%s" % (base, mc)):
            if not re.match(r"(dimm|rank)\d+$", dimm):
                continue
            path = "%s/%s/%s" % (base, mc, dimm)
            label = (check.read(path + "/dimm_label") or dimm).strip() or dimm
            ue_dimm = checklib.to_int(check.read(path + "/dimm_ue_count")) or 0
            ce_dimm = checklib.to_int(check.read(path + "/dimm_ce_count")) or 0
            old = dimms.get(label, (0, 0))
            dimms[label] = (old[0] + ue_dimm, old[1] + ce_dimm)
        out[mc] = {"ue": ue or 0, "ce": ce or 0, "dimms": dimms}
    return out


def body(check):
    since, until = check.window(DEFAULT_WINDOW_S, MIN_WINDOW_S)
    edac = read_edac(check)
    lines, source = checklib_logs.kernel_log(check, since_epoch=since, until_epoch=until)
    if edac is None and lines is None:
        check.unknown("no EDAC sysfs counters and no readable kernel log (%s)" % source)
    if edac is None:
        check.info("no_edac", "host", "EDAC counters not exposed (VM or EDAC driver not loaded); kernel log only")
    else:
        check.metrics["edac_ue"] = sum(mc["ue"] for mc in edac.values())
        check.metrics["edac_ce"] = sum(mc["ce"] for mc in edac.values())
        for name, mc in sorted(edac.items()):
            bad = [label for label, (ue, _ce) in sorted(mc["dimms"].items()) if ue]
            if mc["ue"]:
                check.fail("edac_uncorrected", bad[0] if bad else name.upper(), "%d uncorrected memory errors on %s%s "
                           "since boot (EDAC)" % (mc["ue"], name.upper(), " (DIMM %s)" % ", ".join(bad) if bad else ""),
                           "%s/ue_count=%d" % (name, mc["ue"]))
            if mc["ce"] >= CE_WARN:
                check.warn("edac_corrected_storm", name.upper(), "%d corrected memory errors on %s since boot: a DIMM "
                           "is degrading" % (mc["ce"], name.upper()), "%s/ce_count=%d" % (name, mc["ce"]))
            elif mc["ce"]:
                check.info("edac_corrected", name.upper(), "%d corrected memory errors on %s (normal at low counts)"
                           % (mc["ce"], name.upper()))
    if lines is not None:
        check.metrics["log_source"] = source
        ue_lines = [text for _t, text in lines if UE_LINE.search(text)]
        ce_lines = [text for _t, text in lines if CE_LINE.search(text)]
        check.metrics["log_ue_lines"] = len(ue_lines)
        check.metrics["log_ce_lines"] = len(ce_lines)
        if ue_lines:
            dimm = re.search(r"on (\S*DIMM\S*|\S+_DIMM\S*)", " ".join(ue_lines))
            check.fail("mce_uncorrected", dimm.group(1) if dimm else "host memory",
                       "%d uncorrected host memory error line(s) in the kernel log: %s"
                       % (len(ue_lines), ue_lines[-1].strip()[-200:]), ue_lines[-1])
    check.finish("no uncorrected host memory errors (EDAC UE %s, CE %s)"
                 % (check.metrics.get("edac_ue", "n/a"), check.metrics.get("edac_ce", "n/a")))


if __name__ == "__main__":
    checklib.main("host_memory", body)
