#!/usr/bin/env python3
"""PCIe link: GPU link width/generation vs. max (nvidia-smi and lspci LnkCap/LnkSta), GPUs that read rev ff,
replay counters, and AER errors on GPU addresses in the kernel log.

A narrower link than the GPU supports is a riser/slot fault; a lower generation only at idle is power
saving, so it is weak evidence.
"""

import re

import checklib
import checklib_gpu
import checklib_logs

FIELDS = ["index", "pci.bus_id", "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current",
          "pcie.link.width.max"]
DEVICE_RE = re.compile(r"^(\S+) (3D controller|VGA compatible controller)[^:]*: .*?(?:\(rev (\w+)\))?$")
CAP_RE = re.compile(r"LnkCap:.*?Speed ([\d.]+)GT/s.*?Width x(\d+)")
STA_RE = re.compile(r"LnkSta:.*?Speed ([\d.]+)GT/s[^,]*, Width x(\d+)")
AER_RE = re.compile(r"AER: (?:(Corrected)|(Uncorrected|Fatal|Non-Fatal))[^:]*(?:received)?:? ?([0-9a-fA-F:.]*)",
                    re.IGNORECASE)
BUS_ERROR_RE = re.compile(r"(\S+) ([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d): PCIe Bus Error: severity=(\w+)")
REPLAYS_WARN = 1000  # a healthy H100 shows tens to a few hundred replays since reset


def lspci_links(check):
    """{bdf: {'rev', 'cap', 'sta', 'line'}} for NVIDIA display controllers from lspci -vvv (caps need root)."""
    cmd = check.run(["lspci", "-D", "-vvv", "-d", "10de:"])
    devices, current = {}, None
    for line in cmd.out.splitlines():
        match = DEVICE_RE.match(line)
        if match:
            current = checklib_gpu.norm_bdf(match.group(1))
            devices[current] = {"rev": (match.group(3) or "").lower(), "line": line.strip()}
            continue
        if line and not line[0].isspace():
            current = None
        if current is None:
            continue
        for key, regex in (("cap", CAP_RE), ("sta", STA_RE)):
            found = regex.search(line)
            if found:
                devices[current][key] = (float(found.group(1)), int(found.group(2)))
                devices[current][key + "_line"] = line.strip()
    return devices, cmd


def body(check):
    smi = check.run(["nvidia-smi", "--query-gpu=" + ",".join(FIELDS), "--format=csv,noheader,nounits"])
    rows = [r for r in checklib.parse_query_csv(smi.out, FIELDS) if checklib.to_int(r["index"]) is not None]
    names = {checklib_gpu.norm_bdf(r["pci.bus_id"]): "GPU%s" % r["index"] for r in rows}
    links, lspci = lspci_links(check)
    for i, bdf in enumerate(sorted(links)):
        if bdf not in names and len(links) == len(names) + 1:
            names.setdefault(bdf, "GPU%d" % i)
    if not rows and not any("sta" in d or d["rev"] == "ff" for d in links.values()):
        check.unknown("no link status from nvidia-smi (%s) or lspci (%s)" % (
            checklib_gpu.nvsmi_error(smi) or smi.why(), lspci.why() if not lspci.ok else "capabilities not readable"))
    reported = set()
    for row in rows:
        who = "GPU%s" % row["index"]
        gen, gen_max = checklib.to_int(row["pcie.link.gen.current"]), checklib.to_int(row["pcie.link.gen.max"])
        width, width_max = checklib.to_int(row["pcie.link.width.current"]), checklib.to_int(row["pcie.link.width.max"])
        check.metrics.setdefault("links", {})[who] = "Gen%s x%s" % (gen, width)
        if width and width_max and width < width_max:
            reported.add(checklib_gpu.norm_bdf(row["pci.bus_id"]))
            check.fail("pcie_width_degraded", who, "%s PCIe link runs at x%d of x%d (riser/slot/cable fault)"
                       % (who, width, width_max), ", ".join(row[f] for f in FIELDS))
        if gen and gen_max and gen < gen_max:
            check.warn("pcie_gen_low", who, "%s PCIe link at Gen%d of Gen%d (power saving at idle, or a degraded "
                       "link)" % (who, gen, gen_max), ", ".join(row[f] for f in FIELDS))
    for bdf, dev in sorted(links.items()):
        who = names.get(bdf, bdf)
        if dev["rev"] == "ff":
            check.fail("gpu_fallen_off_bus", who, "%s reads rev ff on the PCI bus: it fell off the bus" % who,
                       dev["line"])
            continue
        if "cap" in dev and "sta" in dev:
            (cap_speed, cap_width), (speed, width) = dev["cap"], dev["sta"]
            if width < cap_width and bdf not in reported:
                check.fail("pcie_width_degraded", who, "%s LnkSta x%d below LnkCap x%d" % (who, width, cap_width),
                           dev["sta_line"])
            if speed < cap_speed and not rows:
                check.warn("pcie_gen_low", who, "%s LnkSta %gGT/s below LnkCap %gGT/s" % (who, speed, cap_speed),
                           dev["sta_line"])
    replays(check, names)
    aer(check, names)


def replays(check, names):
    smi = check.run(["nvidia-smi", "-q"], timeout=60)
    counts = {}
    for position, gpu in enumerate(checklib.parse_q_sections(smi.out)):
        value = checklib.to_int(gpu.get("PCI/Replays Since Reset"))
        if value is not None:
            counts[names.get(checklib_gpu.norm_bdf(gpu["_bus_id"]), "GPU%d" % position)] = value
    check.metrics["replays"] = counts
    for who, value in sorted(counts.items()):
        if value > REPLAYS_WARN:
            check.warn("pcie_replays", who, "%s has %d PCIe replays since reset (link errors being retried)"
                       % (who, value))


def aer(check, names):
    lines, source = checklib_logs.kernel_log(check)
    if lines is None:
        check.metrics["aer"] = "kernel log unavailable: %s" % source
        return
    corrected, fatal = {}, {}
    for _, text in lines:
        match = BUS_ERROR_RE.search(text)
        if match:
            bdf = checklib_gpu.norm_bdf(match.group(2))
            if bdf in names or match.group(1) == "nvidia":
                bucket = corrected if match.group(3).lower() == "corrected" else fatal
                bucket.setdefault(names.get(bdf, bdf), []).append(text.strip())
            continue
        match = AER_RE.search(text)
        if match and match.group(2):
            bdf = checklib_gpu.norm_bdf(match.group(3))
            if bdf in names:
                fatal.setdefault(names[bdf], []).append(text.strip())
    check.metrics["aer"] = {"corrected": {k: len(v) for k, v in corrected.items()},
                            "uncorrected": {k: len(v) for k, v in fatal.items()}}
    for who, found in sorted(fatal.items()):
        check.fail("aer_uncorrected", who, "%d uncorrected/fatal PCIe AER error(s) on %s" % (len(found), who),
                   found[-1])
    for who, found in sorted(corrected.items()):
        check.warn("aer_corrected", who, "%d corrected PCIe AER error(s) on %s (physical layer)" % (len(found), who),
                   found[-1])


if __name__ == "__main__":
    checklib.main("pcie_link", body)
