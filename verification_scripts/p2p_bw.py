#!/usr/bin/env python3
"""GPU peer-to-peer bandwidth (active): nvbandwidth device_to_device_memcpy_read_ce matrix.

Every off-diagonal cell must reach the profile (Azure: >= 335 GB/s on H100/H200, 235 on A100); one GPU
whose row and column sit clearly below its peers has NVLinks down even when it still clears the absolute
limit. PCIe-like rates everywhere mean no NVLink path; rates below PCIe mean peer traffic is being
redirected (ACS/IOMMU).
"""

import checklib
import checklib_gpu

TEST = "device_to_device_memcpy_read_ce"
OUTLIER = 0.9  # a GPU at < 90 % of the node's median P2P bandwidth: links down on that GPU
PCIE_MAX = 60.0  # P2P over PCIe Gen5 x16 stays below this
REDIRECTED_MAX = 20.0  # below PCIe rates: peer writes bounced through the root complex


def median(values):
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def body(check):
    if not check.params.get("allow_busy"):
        apps = check.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"])
        pids = [p for p in apps.out.split() if p.isdigit()]
        if pids:
            check.unknown("GPUs in use by %d process(es): bandwidth tests need idle GPUs (params allow_busy)"
                          % len(pids))
    # stay inside the runner's own timeout (params timeout_s) so a hang is reported, not killed
    limit = max(30.0, float(check.params.get("timeout_s", 310)) - 30)
    cmd = check.run(["nvbandwidth", "-t", TEST], timeout=limit)
    if cmd.missing:
        check.unknown("nvbandwidth not found")
    test = checklib_gpu.parse_nvbandwidth(cmd.out).get(TEST)
    if not test or not test["rows"]:
        check.unknown("nvbandwidth gave no %s matrix (%s)" % (
            TEST, cmd.why() if cmd.unusable else checklib.first_line(cmd.err) or cmd.why()))
    cells = {}
    for row, values in test["rows"].items():
        for column, value in zip(test["columns"], values):
            if row != column and value is not None:
                cells[(row, column)] = value
    if not cells:
        check.unknown("the P2P matrix has no off-diagonal values (single GPU or waived)")
    threshold = check.expect("p2p_gbps")
    links = check.expect("nvlink_links", int)
    node_median = median(cells.values())
    gpus = sorted(set(r for r, _ in cells) | set(c for _, c in cells))
    per_gpu = {g: median([v for (r, c), v in cells.items() if g in (r, c)]) for g in gpus}
    check.metrics.update({"threshold_gbps": threshold, "min_gbps": min(cells.values()),
                          "median_gbps": node_median, "max_gbps": max(cells.values()),
                          "gpu_median_gbps": {"GPU%d" % g: v for g, v in per_gpu.items()}})
    limit = "limit %.0f" % threshold if threshold is not None else "no expected rate"
    # PCIe rates everywhere are only a fault where NVLink (or an NVLink-class rate) is expected
    nvlink_expected = bool(links) or (links is None and threshold is not None and threshold > PCIE_MAX)
    if max(cells.values()) < PCIE_MAX and nvlink_expected:
        redirected = node_median < REDIRECTED_MAX
        kind = "is redirected through the PCIe root complex (ACS/IOMMU on the switches)" if redirected \
            else "goes over PCIe: no NVLink path between the GPUs"
        check.fail("p2p_redirected" if redirected else "p2p_no_nvlink", check.host, "all GPU pairs copy at "
                   "%.1f-%.1f GB/s (%s): peer traffic %s" % (min(cells.values()), max(cells.values()), limit, kind))
        return
    for gpu, value in sorted(per_gpu.items()):
        who = "GPU%d" % gpu
        low = [v for (r, c), v in cells.items() if gpu in (r, c) and threshold is not None and v < threshold]
        if value < OUTLIER * node_median or (low and len(low) >= len(gpus) - 1):
            check.fail("p2p_low_gpu", who, "%s peer bandwidth %.1f GB/s vs. node median %.1f (%s): NVLinks "
                       "down or degraded on %s" % (who, value, node_median, limit, who))
    flagged = set(int(f["entity"][3:]) for f in check.findings)
    for (row, column), value in sorted(cells.items()):
        if threshold is not None and value < threshold and row not in flagged and column not in flagged:
            check.fail("p2p_low_pair", "GPU%d-GPU%d" % (row, column), "GPU%d<-GPU%d copies at %.1f GB/s, below %.0f "
                       "GB/s" % (row, column, value, threshold))
    if threshold is None and not check.findings:
        # the GPUs agree with each other, but a node-wide loss shows only against the SKU's rate
        check.no_expectation("p2p_gbps", seen="no GPU below %.0f%% of the node median %.1f GB/s"
                             % (100 * OUTLIER, node_median))


if __name__ == "__main__":
    checklib.main("p2p_bw", body)
