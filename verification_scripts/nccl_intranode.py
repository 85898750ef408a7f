#!/usr/bin/env python3
"""nccl_intranode: all_reduce_perf on all local GPUs at 16 GiB; bus bandwidth and correctness.

`all_reduce_perf -b 16G -e 16G -f 2 -g <gpus> -c 1 -T <s>` (one process, as Azure NHC). FAIL on
`#wrong` > 0 or "Out of bounds values : N FAILED" (data corruption), on a hang (nccl-tests' own
"Test timeout", or ours), on an NCCL/CUDA failure, and when the bus bandwidth at the *largest* size is
below the profile (460 GB/s H100 NVLS, 228 A100). "Avg bus bandwidth" averages the whole sweep, so it
is only reported. About half the expected value means NVLink degraded on a GPU; 10-25 GB/s means the
traffic went over PCIe/SHM.
"""

import checklib
import checklib_gpu
import checklib_net


def body(check):
    binary = checklib_net.find_nccl_test("all_reduce_perf")
    if binary is None:
        check.unknown("all_reduce_perf not found (nccl-tests not installed; set NCCL_TESTS_DIR)")
    gpus, why = checklib_gpu.local_gpu_count(check)
    if gpus is None:
        check.unknown("cannot tell how many GPUs to test: %s" % why)
    size = str(check.params.get("size", "16G"))
    test_timeout = int(check.params.get("test_timeout_s", 240))
    argv = [binary, "-b", size, "-e", size, "-f", "2", "-g", str(gpus), "-c", "1", "-T", str(test_timeout)]
    cmd, result = checklib_net.run_nccl_test(check, argv, float(check.params.get("run_timeout_s", test_timeout + 90)))
    for line in result["warns"]:
        check.info("nccl_warn", check.host, line.split("NCCL WARN", 1)[1].strip(), line)
    largest = checklib_net.judge_nccl_test(check, cmd, result)
    threshold = check.expect("nccl_intranode_busbw")
    busbw = check.metrics["busbw"]
    check.metrics["threshold"] = threshold
    if threshold is None and not any(f["severity"] in ("FAIL", "WARN") for f in check.findings):
        check.no_expectation("nccl_intranode_busbw", seen="all_reduce busbw %.1f GB/s at %d B, no wrong results"
                             % (busbw, largest["size"]))
    if threshold and busbw < threshold:
        hint = "traffic over PCIe/SHM, not NVLink" if busbw < 0.15 * threshold else "NVLink/NVSwitch bandwidth loss"
        check.fail("busbw_low", check.host, "all_reduce busbw %.1f GB/s at %d B < %.0f GB/s (%s)"
                   % (busbw, largest["size"], threshold, hint))
    check.finish("all_reduce busbw %.1f GB/s at %d B >= %.0f GB/s, no wrong results"
                 % (busbw, largest["size"], threshold or 0))


if __name__ == "__main__":
    checklib.main("nccl_intranode", body)
