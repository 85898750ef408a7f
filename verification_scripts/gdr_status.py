#!/usr/bin/env python3
"""gdr_status: is GPUDirect RDMA available to NCCL and perftest?

GDR needs a peer-memory client in the kernel: `nvidia_peermem` (driver >= 470) or the legacy
`nv_peer_mem`; NCCL looks for /sys/module/nvidia_peermem and logs "GPU Direct RDMA Disabled for HCA
... (no module)" without it. NCCL >= 2.19 can also use DMA-BUF (open kernel modules, kernel >= 5.12),
which only counts when the job asks for it. Env settings that switch GDR off are warnings.
"""

import os
import re

import checklib
import checklib_logs
import checklib_net

PEER_MODULES = ("nvidia_peermem", "nv_peer_mem")


def dmabuf_possible(check):
    """DMA-BUF GDR: asked for by the job, open GPU kernel module, kernel >= 5.12."""
    if os.environ.get("NCCL_DMABUF_ENABLE") != "1":
        return False
    license_cmd = check.run(["modinfo", "-F", "license", "nvidia"])
    release = re.match(r"(\d+)\.(\d+)", (check.read("/proc/sys/kernel/osrelease") or "").strip())
    new_kernel = release is not None and (int(release.group(1)), int(release.group(2))) >= (5, 12)
    return license_cmd.ok and "MIT" in license_cmd.out and new_kernel


def judge_env(check):
    level = os.environ.get("NCCL_NET_GDR_LEVEL", "").upper()
    if level in ("0", "LOC"):
        check.warn("gdr_level_off", "NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_LEVEL=%s disables GPUDirect RDMA" % level)
    if os.environ.get("NCCL_IB_CUDA_SUPPORT") == "0":
        check.warn("ib_cuda_support_off", "NCCL_IB_CUDA_SUPPORT", "NCCL_IB_CUDA_SUPPORT=0 disables GPUDirect RDMA")


def judge_kernel_log(check):
    lines, _ = checklib_logs.kernel_log(check, since_epoch=0)
    peer_errors = [line for _, line in lines or [] if re.search(r"nvidia[-_]peermem|nv_peer_mem", line)
                   and re.search(r"ERROR|Unknown symbol|failed", line)]
    check.metrics["peermem_log_errors"] = len(peer_errors)
    load_failures = [line for line in peer_errors if "Unknown symbol" in line or "failed" in line.lower()]
    if load_failures:
        check.info("peermem_load_error", "nvidia_peermem", "kernel log: %s" % load_failures[-1].strip(),
                   load_failures[-1])
    elif peer_errors:
        check.info("peermem_runtime_error", "nvidia_peermem", "%d nvidia-peermem error lines (e.g. 'detected invalid "
                   "context' when a registered buffer is freed at process exit)" % len(peer_errors), peer_errors[-1])
    return load_failures


def body(check):
    if checklib_net.no_rdma_expected(check):
        check.finish(checklib_net.NO_RDMA + ": GPUDirect RDMA has nothing to pair with")
    modules, source = checklib.loaded_modules(check)
    if modules is None:
        check.unknown("cannot list kernel modules: %s" % source)
    if not check.listdir(checklib_net.IB_CLASS):
        check.unknown("no RDMA devices in /sys/class/infiniband: GPUDirect RDMA has nothing to pair with")
    if "nvidia" not in modules:
        check.unknown("the nvidia kernel module is not loaded; GPUDirect RDMA cannot be judged (see driver_health)")
    peer = [m for m in PEER_MODULES if m in modules]
    check.metrics.update({"peer_module": peer[0] if peer else None, "module_source": source})
    judge_env(check)
    load_failures = judge_kernel_log(check)
    if not peer:
        why = " (%s)" % load_failures[-1].strip() if load_failures else ""
        if dmabuf_possible(check):
            check.warn("peermem_missing_dmabuf", "nvidia_peermem", "nvidia_peermem not loaded%s; NCCL may still use "
                       "DMA-BUF (NCCL_DMABUF_ENABLE=1, open kernel module)" % why)
        else:
            check.fail("peermem_missing", "nvidia_peermem", "nvidia_peermem (or nv_peer_mem) not loaded%s: "
                       "GPUDirect RDMA is disabled, NCCL logs 'GPU Direct RDMA Disabled ... (no module)' and "
                       "ib_write_bw --use_cuda cannot register GPU memory" % why)
    check.finish("%s loaded: GPUDirect RDMA available" % (peer[0] if peer else "peer memory"))


if __name__ == "__main__":
    checklib.main("gdr_status", body)
