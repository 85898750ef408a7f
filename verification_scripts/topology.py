#!/usr/bin/env python3
"""Topology: `nvidia-smi topo -m` against the profile: every GPU pair joined by the expected bonded NVLink
set (NV18 on H100 SXM), and every GPU with a NIC behind a nearby PCIe switch (PIX/PXB), not SYS.
"""

import re

import checklib
import checklib_gpu

CLOSENESS = ["X", "PIX", "PXB", "PHB", "NODE", "SYS"]
SPLIT_RE = re.compile(r"\t+|\s{2,}")
LEGEND_RE = re.compile(r"^\s*(NIC\d+):\s*(\S+)")


def parse_topo(text):
    """(column names, {row name: {column: cell}}, {NICn: mlx5_n}) of a topo -m matrix (tabs or spaces)."""
    columns, rows, legend = None, {}, {}
    for line in checklib.strip_ansi(text).splitlines():
        match = LEGEND_RE.match(line)
        if match:
            legend[match.group(1)] = match.group(2)
            continue
        if not line.strip() or line.strip().startswith("Legend") or "=" in line:
            continue
        cells = [c.strip() for c in SPLIT_RE.split(line.strip())]
        if columns is None:
            if cells and cells[0].startswith("GPU0"):
                columns = cells
            continue
        name, values = cells[0], cells[1:]
        if re.match(r"^(GPU\d+|NIC\d+|mlx5_\d+)$", name):
            rows[name] = dict(zip(columns, values))
    return columns or [], rows, legend


def body(check):
    smi = check.run(["nvidia-smi", "topo", "-m"])
    columns, rows, legend = parse_topo(smi.out)
    gpus = sorted((r for r in rows if r.startswith("GPU")), key=lambda r: int(r[3:]))
    if not gpus:
        check.unknown("no topology matrix (%s)" % (checklib_gpu.nvsmi_error(smi) or smi.why()))
    nics = [c for c in columns if c.startswith(("NIC", "mlx5_"))]
    check.targets = gpus
    check.metrics.update({"gpus": len(gpus), "nics": [legend.get(n, n) for n in nics]})
    undecided = [what for what, decided in (("GPU links", nvlink(check, gpus, rows)),
                                             ("GPU-NIC affinity", nic_affinity(check, gpus, nics, rows, legend)))
                 if not decided]
    check.metrics["not_judged"] = undecided
    if len(undecided) == 2 and not check.findings:
        check.no_expectation("topo_nvlink / nvlink_links", "hca_count",
                             seen="%d GPUs in the matrix, pairs %s" % (len(gpus), check.metrics.get("gpu_pairs")))
    check.finish("topology as expected%s" % ("; not judged: %s (no expectation on this host)" % ", ".join(undecided)
                                             if undecided else ""))


def nvlink(check, gpus, rows):
    """Judge the GPU-GPU cells; False when there was nothing to judge them against."""
    expected = check.expect("topo_nvlink", str) or ""
    want = int(expected[2:]) if expected.startswith("NV") and expected[2:].isdigit() else 0
    pairs = {}
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            pairs[(a, b)] = rows[a].get(b, "")
    kinds = {}
    for cell in pairs.values():
        kinds[cell] = kinds.get(cell, 0) + 1
    check.metrics["gpu_pairs"] = kinds
    if len(gpus) < 2:
        return True
    links = check.expect("nvlink_links", int)
    if not want and links == 0:
        return True  # a SKU without NVLink: PCIe between GPUs is its design
    bonded = [checklib.to_int(c[2:]) for c in pairs.values() if c.startswith("NV") and checklib.to_int(c[2:])]
    if not want and bonded:
        # no expectation: the pairs are measured against the widest NVLink bond this host shows
        want = max(bonded)
        expected = "NV%d like the other pairs" % want
    elif not want and links:
        want, expected = 1, "NVLink (%d links per GPU)" % links
    if not want:
        return False
    slow = {p: c for p, c in pairs.items() if c.startswith("NV") and (checklib.to_int(c[2:]) or 0) < want}
    pcie = {p: c for p, c in pairs.items() if not c.startswith("NV")}
    if pcie and len(pcie) == len(pairs):
        check.fail("nvlink_not_enabled", check.host, "no NVLink between any GPUs: every GPU pair connects over PCIe "
                   "(%s), expected %s" % ("/".join(sorted(set(pcie.values()))), expected))
        return True
    for kind, bad, reason in (("nvlink_degraded", slow, "fewer NVLinks than %s" % expected),
                              ("no_nvlink_path", pcie, "no NVLink path (expected %s)" % expected)):
        if not bad:
            continue
        for gpu, partners in culprits(bad):
            cells = sorted(set(bad[p] for p in bad if gpu in p))
            check.fail(kind, gpu, "%s reaches %d peer(s) with %s: %s" % (gpu, len(partners), "/".join(cells), reason),
                       "%s row: %s" % (gpu, " ".join(rows[gpu].get(g, "") for g in gpus)))
    return True


def culprits(bad):
    """The GPUs that explain the bad pairs: one GPU in every bad pair points at that GPU, else each pair."""
    counts = {}
    for a, b in bad:
        counts.setdefault(a, set()).add(b)
        counts.setdefault(b, set()).add(a)
    ranked = sorted(counts.items(), key=lambda kv: -len(kv[1]))
    chosen, covered = [], set()
    for gpu, partners in ranked:
        pairs = set(p for p in bad if gpu in p)
        if pairs - covered:
            chosen.append((gpu, partners))
            covered |= pairs
        if covered == set(bad):
            break
    return chosen


def nic_affinity(check, gpus, nics, rows, legend):
    """Judge the GPU-NIC cells; False when it is not known whether the NICs are GPU rails."""
    hcas = check.expect("hca_count", int)
    if hcas == 0:
        return True  # no RDMA NIC expected: a NIC in the matrix is not a GPU rail
    if not nics:
        return hcas is not None  # an expected NIC absent from the matrix is nic_config's finding
    if hcas is None:
        return False
    best = {}
    for gpu in gpus:
        cells = [rows[gpu].get(n, "SYS") for n in nics]
        ranked = [c for c in cells if c in CLOSENESS]
        best[gpu] = min(ranked, key=CLOSENESS.index) if ranked else "?"
    numa = sorted(set(rows[g].get("NUMA Affinity", "") for g in gpus))
    check.metrics.update({"closest_nic": best, "numa_affinity": numa})
    if all(b == "SYS" for b in best.values()):
        check.fail("topology_misdetected", check.host, "every GPU-NIC pair reports SYS%s: the PCIe/NUMA topology is "
                   "not detected (NCCL will not pair GPUs with their NICs)" % (
                       " and NUMA affinity N/A" if numa == ["N/A"] else ""),
                   "%s row: %s" % (gpus[0], " ".join(rows[gpus[0]].get(n, "") for n in nics)))
        return True
    far = [g for g, b in best.items() if b in ("NODE", "SYS")]
    near = [g for g, b in best.items() if b in ("PIX", "PXB")]
    if far and near:
        check.warn("gpu_nic_far", ",".join(far), "%s have no NIC on a nearby PCIe switch (closest %s) while other "
                   "GPUs do" % (", ".join(far), "/".join(sorted(set(best[g] for g in far)))))
    return True


if __name__ == "__main__":
    checklib.main("topology", body)
