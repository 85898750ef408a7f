#!/usr/bin/env python3
"""GPU inventory: GPUs on the PCI bus vs. GPUs the driver serves, SKU, vBIOS, ECC/MIG/persistence, InfoROM.

A GPU lspci lists but nvidia-smi cannot open is the finding (missing or fallen off the bus), so a
partial nvidia-smi answer is evidence; an nvidia-smi that cannot start at all is the driver's
problem (driver_health), and this check then reports UNKNOWN.
"""

import re

import checklib
import checklib_gpu

FIELDS = ["index", "name", "pci.bus_id", "uuid", "serial", "vbios_version", "persistence_mode", "mig.mode.current",
          "ecc.mode.current", "compute_mode"]
LOST_RE = re.compile(r"Unable to determine the device handle for GPU ?([0-9a-fA-F:.]+)")
INFOROM_RE = re.compile(r"infoROM is corrupted at gpu ([0-9a-fA-F:.]+)", re.IGNORECASE)
LSPCI_RE = re.compile(r"^(\S+) (?:3D controller|VGA compatible controller)(?: \[03\d\d\])?: .*?(?:\(rev (\w+)\))?$")


def pci_gpus(check):
    """NVIDIA display controllers on the bus as [(bdf, rev)], or None when lspci is unusable."""
    cmd = check.run(["lspci", "-D", "-d", "10de:", "-nn"])
    if not cmd.ok:
        return None, cmd.why()
    found = []
    for line in cmd.out.splitlines():
        match = LSPCI_RE.match(line.strip())
        if match:
            found.append((checklib_gpu.norm_bdf(match.group(1)), (match.group(2) or "").lower(), line.strip()))
    return sorted(found), None


def body(check):
    expected = check.expect("gpu_count", int)
    smi = check.run(["nvidia-smi", "--query-gpu=" + ",".join(FIELDS), "--format=csv,noheader"])
    rows = [r for r in checklib.parse_query_csv(smi.out, FIELDS) if checklib.to_int(r["index"]) is not None]
    lost = [checklib_gpu.norm_bdf(m.group(1)) for m in LOST_RE.finditer(smi.text)]
    pci, pci_why = pci_gpus(check)
    if not rows and not lost:
        why = checklib_gpu.nvsmi_error(smi) or smi.why()
        check.metrics["pci_gpu_count"] = len(pci) if pci is not None else None
        check.unknown("nvidia-smi gave no GPU list (%s)%s" % (
            why, "; lspci sees %d NVIDIA GPUs" % len(pci) if pci else ""))
    by_bdf = {checklib_gpu.norm_bdf(r["pci.bus_id"]): r for r in rows}
    pci_index = {bdf: i for i, (bdf, _, _) in enumerate(pci or [])}
    visible = len(rows) + len(lost)
    check.metrics.update({"gpu_count": visible, "usable_gpu_count": len(rows), "expected_gpu_count": expected,
                          "pci_gpu_count": len(pci) if pci is not None else None})
    check.targets = ["GPU%s" % r["index"] for r in rows]

    def entity(bdf):
        row = by_bdf.get(bdf)
        if row is not None:
            return "GPU%s" % row["index"]
        return "GPU%d" % pci_index[bdf] if bdf in pci_index and len(pci) == visible else bdf

    reported = set()
    for bdf in lost:
        reported.add(bdf)
        check.fail("gpu_fallen_off_bus", entity(bdf), "GPU %s is lost to the driver (NVML cannot get its handle: "
                   "fell off the bus)" % bdf, next(t for t in smi.text.splitlines() if LOST_RE.search(t)))
    for bdf, rev, line in pci or []:
        if rev == "ff" and bdf not in reported:
            reported.add(bdf)
            check.fail("gpu_fallen_off_bus", entity(bdf), "GPU %s reads rev ff on the PCI bus (config space "
                       "unreadable: fell off the bus)" % bdf, line)
    unseen = [(bdf, line) for bdf, _, line in pci or [] if bdf not in by_bdf and bdf not in reported]
    for bdf, line in unseen:
        check.fail("missing_gpu", bdf, "GPU %s is on the PCI bus but nvidia-smi does not list it (the driver did "
                   "not initialise it)" % bdf, line)
    if expected is not None and pci is not None and len(pci) < expected:
        check.fail("missing_gpu", check.host, "only %d NVIDIA GPUs on the PCI bus, expected %d" % (len(pci), expected))
    elif expected is not None and visible < expected and not unseen:
        check.fail("missing_gpu", check.host, "nvidia-smi lists %d GPUs, expected %d%s" % (
            visible, expected, "" if pci is not None else " (lspci unavailable: %s)" % pci_why))
    for match in INFOROM_RE.finditer(smi.text):
        bdf = checklib_gpu.norm_bdf(match.group(1))
        check.fail("inforom_corrupt", entity(bdf), "infoROM is corrupted on GPU %s (nvidia-smi warning)" % bdf,
                   match.group(0))
    config(check, rows)
    if pci is None and expected is None and not any(f["severity"] == "FAIL" for f in check.findings):
        # the driver's own list cannot show a GPU it never initialised: only the bus or the SKU could
        check.no_expectation("gpu_count", seen="nvidia-smi lists %d GPUs; lspci unavailable (%s), so a GPU missing "
                                               "from the driver cannot be ruled out" % (visible, pci_why))


def config(check, rows):
    """SKU, vBIOS consistency and the ECC / persistence / MIG settings of the usable GPUs."""
    want = check.profile.get("gpu_name")
    names = sorted(set(r["name"] for r in rows))
    vbios = sorted(set(r["vbios_version"] for r in rows if not checklib.is_na(r["vbios_version"])))
    check.metrics.update({"names": names, "vbios_versions": vbios})
    if want and any(n != want for n in names):
        check.warn("sku_mismatch", check.host, "GPU model %s, profile expects %s" % (", ".join(names), want))
    if len(vbios) > 1:
        check.warn("vbios_mismatch", check.host, "vBIOS versions differ across GPUs: %s" % ", ".join(vbios))
    no_ecc = ["GPU%s" % r["index"] for r in rows if checklib.to_bool(r["ecc.mode.current"]) is False]
    no_pm = ["GPU%s" % r["index"] for r in rows if checklib.to_bool(r["persistence_mode"]) is False]
    mig = ["GPU%s" % r["index"] for r in rows if checklib.to_bool(r["mig.mode.current"])]
    check.metrics.update({"ecc_disabled": no_ecc, "persistence_disabled": no_pm, "mig_enabled": mig})
    if no_ecc:
        check.warn("ecc_disabled", ",".join(no_ecc), "ECC is disabled on %s" % ", ".join(no_ecc))
    if no_pm:
        check.warn("persistence_disabled", ",".join(no_pm), "persistence mode is Disabled on %s" % ", ".join(no_pm))
    if mig:
        check.info("mig_enabled", ",".join(mig), "MIG is enabled on %s" % ", ".join(mig))


if __name__ == "__main__":
    checklib.main("gpu_inventory", body)
