#!/usr/bin/env python3
"""rdma_userspace: the kernel has RDMA devices, but can user space (libibverbs + the mlx5 provider +
/dev/infiniband) open them?

`ibv_devinfo -l` answering "No IB devices found" while /sys/class/infiniband lists devices, or a host
with no libibverbs at all, is the finding (NCCL then prints "Failed to open libibverbs.so[.1]" and falls
back to sockets), so here a missing tool can be evidence rather than an UNKNOWN.
"""

import os
import re

import checklib
import checklib_net

LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib",
            "/usr/lib/aarch64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/local/lib")


def lib_dirs():
    extra = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    return extra + list(LIB_DIRS)


def find_lib(check, name):
    for directory in lib_dirs():
        if check.exists(directory + "/" + name):
            return directory + "/" + name
    return None


def mlx5_provider(check):
    """The libibverbs provider config (/etc/libibverbs.d/mlx5.driver) or library, if present."""
    if check.exists("/etc/libibverbs.d/mlx5.driver"):
        return "/etc/libibverbs.d/mlx5.driver"
    for directory in lib_dirs():
        for name in check.listdir(directory + "/libibverbs"):
            if name.startswith("libmlx5"):
                return directory + "/libibverbs/" + name
    return None


def why_not(check, lib, provider, uverbs):
    reasons = []
    if lib is None:
        reasons.append("libibverbs.so.1 is not installed (rdma-core / libibverbs1 missing)")
    if provider is None:
        reasons.append("no mlx5 provider (/etc/libibverbs.d/mlx5.driver, libmlx5)")
    if not uverbs:
        reasons.append("no /dev/infiniband/uverbs* (container started without --device=/dev/infiniband?)")
    return "; ".join(reasons) or "user-space verbs cannot open the devices"


def body(check):
    kernel = check.listdir(checklib_net.IB_CLASS)
    if checklib_net.no_rdma_expected(check):
        check.finish(checklib_net.NO_RDMA + ": nothing for user-space verbs to open")
    if not kernel:
        check.unknown("the kernel shows no RDMA devices in /sys/class/infiniband; nothing for user-space verbs "
                      "to open (see nic_config)")
    lib = find_lib(check, "libibverbs.so.1")
    provider = mlx5_provider(check)
    uverbs = [n for n in check.listdir("/dev/infiniband") if n.startswith("uverbs")]
    check.metrics.update({"kernel_devices": len(kernel), "libibverbs": lib, "mlx5_provider": provider,
                          "uverbs_nodes": len(uverbs)})
    cmd = check.run(["ibv_devinfo", "-l"])
    if cmd.unusable:
        # the libraries on disk still answer: without libibverbs or the mlx5 provider verbs cannot work at all
        if lib is None or provider is None:
            check.fail("verbs_missing", "host", "kernel has %d RDMA devices (%s) but %s and %s"
                       % (len(kernel), ", ".join(kernel[:4]), "ibv_devinfo is not installed" if cmd.missing
                          else cmd.why(), why_not(check, lib, provider, uverbs)))
            check.finish()
        check.unknown("%s; libibverbs (%s) and the mlx5 provider are present, so the devices could not be opened "
                      "to confirm" % (cmd.why(), lib))
    if cmd.timed_out:
        check.unknown(cmd.why())
    listed = re.findall(r"^\s+(\S+)\s*$", cmd.out, re.MULTILINE)
    check.metrics["verbs_devices"] = len(listed)
    driver_errors = [line.strip() for line in cmd.text.splitlines() if "couldn't load driver" in line.lower()]
    if "No IB devices found" in cmd.text or not listed:
        check.fail("no_verbs_devices", "host", "ibv_devinfo finds no devices although the kernel has %d (%s): %s"
                   % (len(kernel), ", ".join(kernel[:4]), why_not(check, lib, provider, uverbs)),
                   checklib.first_line(cmd.text))
    else:
        missing = [d for d in kernel if d not in listed]
        for dev in missing:
            check.fail("device_not_visible", dev, "%s is in /sys/class/infiniband but not visible to verbs" % dev)
    for line in driver_errors:
        check.warn("provider_load_failed", "host", line, line)
    check.finish("user-space verbs see all %d RDMA devices" % len(kernel))


if __name__ == "__main__":
    checklib.main("rdma_userspace", body)
