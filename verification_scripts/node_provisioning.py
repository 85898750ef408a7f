#!/usr/bin/env python3
"""node_provisioning: is the NVIDIA software stack installed on this node image at all?

Lists installed packages (`dpkg-query -W`, else `rpm -qa`) for the NVIDIA driver, CUDA, the
container toolkit and fabric manager, and looks for the nvidia kernel module (`modinfo`,
/proc/driver/nvidia). No driver package and no kernel module means the node was never
provisioned for GPUs.
"""

import re

import checklib
import checklib_gpu

GROUPS = {
    "driver": re.compile(r"^(nvidia-driver(-\d+)?(-server|-open)?|nvidia-driver-cuda|libnvidia-compute-\d+(-server)?|"
                         r"nvidia-dkms-\d+(-server|-open)?|nvidia-headless-\d+(-server)?|cuda-drivers(-\d+)?|"
                         r"nvidia-open(-\d+)?|kmod-nvidia\S*|nvidia-linux-grid-\d+)$"),
    "cuda": re.compile(r"^(cuda|cuda-\d+-\d+|cuda-(toolkit|runtime|libraries|cudart|nvcc|compat)(-\d+)?(-\d+)?)$"),
    "container_toolkit": re.compile(r"^(nvidia-container-toolkit(-base)?|libnvidia-container1|"
                                    r"libnvidia-container-tools|nvidia-docker2)$"),
    "fabricmanager": re.compile(r"^(nvidia-fabricmanager(-\d+)?|cuda-drivers-fabricmanager(-\d+)?)$"),
}
DPKG_FORMAT = "${db:Status-Abbrev}\t${Package}\t${Version}\n"


def installed_packages(check):
    """({name: version}, source) from dpkg or rpm; (None, why) when neither answers."""
    cmd = check.run(["dpkg-query", "-W", "-f=" + DPKG_FORMAT], timeout=60)
    if cmd.ok:
        packages = {}
        for line in cmd.out.splitlines():
            fields = line.split("\t")
            if len(fields) == 3 and fields[0].startswith("ii"):
                packages[fields[1].split(":")[0]] = fields[2]
        if packages:
            return packages, "dpkg-query"
        reasons = ["dpkg-query listed no installed package"]
    else:
        reasons = [cmd.why()]
    cmd = check.run(["rpm", "-qa", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n"], timeout=60)
    if cmd.ok:
        packages = {}
        for line in cmd.out.splitlines():
            fields = line.split("\t")
            if len(fields) == 2:
                packages[fields[0]] = fields[1]
        if packages:
            return packages, "rpm"
    reasons.append(cmd.why())
    return None, "; ".join(reasons)


def kernel_module(check):
    """Path or version of the nvidia kernel module, or None."""
    version = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)",
                        check.read("/proc/driver/nvidia/version") or "")
    if version:
        return "loaded %s" % version.group(1)
    cmd = check.run(["modinfo", "-F", "filename", "nvidia"], timeout=20)
    if cmd.ok and cmd.out.strip():
        return cmd.out.strip()
    return None


def body(check):
    packages, source = installed_packages(check)
    module = kernel_module(check)
    check.metrics["nvidia_module"] = module
    if packages is None:
        if module:
            check.info("no_package_manager", "host", "no package database (%s); nvidia module: %s" % (source, module))
            check.finish("NVIDIA kernel module present (%s)" % module)
        check.unknown("cannot list installed packages (%s) and no nvidia kernel module found" % source)
    found = {group: {n: v for n, v in packages.items() if rx.match(n)} for group, rx in GROUPS.items()}
    for group, names in found.items():
        check.metrics["%s_packages" % group] = ["%s=%s" % kv for kv in sorted(names.items())]
    check.metrics["package_source"] = source
    if not found["driver"] and not module:
        wanted = checklib_gpu.gpus_expected(check)
        if wanted is False:
            check.finish("no NVIDIA driver installed, and this host has no NVIDIA GPU to drive")
        if wanted is None:
            check.no_expectation("gpu_count", seen="no NVIDIA driver package (%s) and no nvidia kernel module, "
                                                   "and no NVIDIA GPU seen on the PCI bus" % source)
        missing = [g for g in ("driver", "cuda", "container_toolkit") if not found[g]]
        check.fail("node_not_provisioned", "host", "node image has no NVIDIA driver: no driver package (%s) and no "
                   "nvidia kernel module; also missing: %s" % (source, ", ".join(missing[1:]) or "nothing else"))
    elif not found["driver"]:
        check.info("driver_outside_packages", "host", "nvidia module present (%s) but not from a package "
                   "(runfile install?)" % module)
    if not found["cuda"]:
        check.info("no_cuda_packages", "host", "no CUDA toolkit packages (frameworks may bring their own CUDA "
                   "runtime)")
    docker = [n for n in packages if n in ("docker-ce", "docker.io", "moby-engine", "containerd.io", "podman")]
    if docker and not found["container_toolkit"] and found["driver"]:
        check.warn("no_container_toolkit", "host", "%s is installed but the NVIDIA Container Toolkit is not: "
                   "containers cannot use the GPUs" % docker[0])
    check.finish("NVIDIA driver installed (%s)" % (", ".join(sorted(found["driver"])) or module))


if __name__ == "__main__":
    checklib.main("node_provisioning", body)
