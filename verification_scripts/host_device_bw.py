#!/usr/bin/env python3
"""Host<->device bandwidth (active): nvbandwidth host_to_device / device_to_host copy-engine tests per GPU
against the profile (Azure check_gpu_bw: H100/H200 >= 48 GB/s, A100 >= 21): FAIL below, WARN within 5 %.
A GPU behind a degraded PCIe link or a mis-bound NUMA node shows up as one low column.
"""

import checklib
import checklib_gpu

TESTS = ["host_to_device_memcpy_ce", "device_to_host_memcpy_ce"]
MARGIN = 1.05


def per_gpu(test):
    """{gpu column: best value over the CPU rows} (hosts with several CPU nodes print one row each)."""
    best = {}
    for values in test["rows"].values():
        for column, value in zip(test["columns"], values):
            if value is not None:
                best[column] = max(best.get(column, 0.0), value)
    return best


def body(check):
    if not check.params.get("allow_busy"):
        apps = check.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"])
        pids = [p for p in apps.out.split() if p.isdigit()]
        if pids:
            check.unknown("GPUs in use by %d process(es): bandwidth tests need idle GPUs (params allow_busy)"
                          % len(pids))
    # stay inside the runner's own timeout (params timeout_s) so a hang is reported, not killed
    limit = max(30.0, float(check.params.get("timeout_s", 310)) - 30)
    cmd = check.run(["nvbandwidth", "-t", *TESTS, "-i", "10"], timeout=limit)
    if cmd.missing:
        check.unknown("nvbandwidth not found")
    tests = checklib_gpu.parse_nvbandwidth(cmd.out)
    threshold = check.expect("h2d_gbps")
    check.metrics["threshold_gbps"] = threshold
    found = False
    for name in TESTS:
        test = tests.get(name)
        if not test or not test["rows"]:
            continue
        found = True
        values = per_gpu(test)
        direction = "host->device" if name.startswith("host") else "device->host"
        check.metrics[name.split("_memcpy")[0] + "_gbps"] = {"GPU%d" % g: v for g, v in sorted(values.items())}
        for gpu, value in sorted(values.items()):
            who = "GPU%d" % gpu
            if threshold is None:
                continue
            if value < threshold:
                check.fail("low_bandwidth", who, "%s %s copy bandwidth %.1f GB/s, below %.0f GB/s (degraded PCIe link "
                           "or wrong NUMA binding)" % (who, direction, value, threshold), "%s %s" % (name, value))
            elif value < threshold * MARGIN:
                check.warn("marginal_bandwidth", who, "%s %s copy bandwidth %.1f GB/s, within 5%% of the %.0f GB/s "
                           "limit" % (who, direction, value, threshold), "%s %s" % (name, value))
    if not found:
        check.unknown("nvbandwidth gave no host<->device results (%s)" % (
            cmd.why() if cmd.unusable else checklib.first_line(cmd.err) or cmd.why()))
    if threshold is None:
        check.no_expectation("h2d_gbps", seen="copy bandwidth measured (see metrics)")


if __name__ == "__main__":
    checklib.main("host_device_bw", body)
