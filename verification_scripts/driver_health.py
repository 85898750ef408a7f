#!/usr/bin/env python3
"""Driver health: can nvidia-smi talk to the driver, and if not, why (module, versions, device nodes);
persistence daemon and mode; nvidia_uvm errors in the kernel log.

nvidia-smi failing is itself the evidence here, so its error text is classified rather than
turned into UNKNOWN (exit codes follow NVML; the text is matched first because it is more certain).
"""

import re

import checklib
import checklib_gpu
import checklib_logs

RC_MEANING = {9: "NVIDIA driver not loaded", 10: "kernel detected an interrupt issue with a GPU",
              12: "NVML shared library not found", 14: "infoROM is corrupted", 15: "a GPU is lost",
              255: "other driver error"}
MODULE_RE = re.compile(r"Kernel Module\s+(\d+\.\d+(?:\.\d+)?)")
BANNER_RE = re.compile(r"NVIDIA-SMI (\S+)\s+Driver Version: (\S+)")
NVML_LIB_RE = re.compile(r"NVML library version: (\S+)")
UVM_ERROR_RE = re.compile(r"nvidia-uvm:.*\b(fail\w*|error)\b|NVRM:.*\buvm\b.*\bfail", re.IGNORECASE)
API_MISMATCH_RE = re.compile(r"NVRM: API mismatch: the client has the version (\S+), but")


def body(check):
    smi = check.run(["nvidia-smi"], timeout=60)
    version_text = check.read("/proc/driver/nvidia/version")
    module = MODULE_RE.search(version_text or "")
    modules, _ = checklib.loaded_modules(check)
    on_disk = check.run(["modinfo", "-F", "version", "nvidia"])
    loaded = module.group(1) if module else None
    check.metrics.update({
        "nvidia_smi_rc": None if smi.missing else smi.rc, "kernel_module_version": loaded,
        "installed_module_version": checklib.first_line(on_disk.out) if on_disk.ok else None,
        "nvidia_modules": sorted(m for m in modules if m.startswith("nvidia")) if modules is not None else None})
    module_loaded = bool(loaded) or (modules is not None and "nvidia" in modules)
    if smi.missing:
        if modules is not None and "nvidia" not in modules and not loaded:
            check.unknown("nvidia-smi not found and no nvidia kernel module: the NVIDIA driver is not installed")
        check.unknown("nvidia-smi not found (%s)" % (
            "nvidia module loaded" if module_loaded else "driver state unknown"))
    text = smi.text
    if smi.refused:
        # NVML refused this user (device permissions, SELinux): that says nothing about the driver's health
        versions(check, loaded, on_disk)
        kernel_messages(check)
        if not any(f["severity"] in ("FAIL", "WARN") for f in check.findings):
            check.unknown("%s (the driver could not be queried)" % smi.why())
        check.info("not_checked", "nvidia-smi", smi.why())
        check.finish()
    if smi.timed_out:
        check.fail("nvidia_smi_hang", check.host, "nvidia-smi did not answer within 60 s (driver hang)")
    elif "Driver/library version mismatch" in text:
        lib = NVML_LIB_RE.search(text)
        check.fail("library_mismatch", check.host, "NVML user-space library %s does not match the loaded kernel module "
                   "%s (driver upgraded without reloading the module)" % (lib.group(1) if lib else "?", loaded or "?"),
                   checklib.first_line(text))
    elif "couldn't communicate with the NVIDIA driver" in text:
        no_driver(check, modules, loaded, text)
    elif "Failed to initialize NVML: Unknown Error" in text:
        check.warn("nvml_unknown_error", check.host, "NVML fails with Unknown Error (in containers: lost access to "
                   "/dev/nvidia* through the devices cgroup)", checklib.first_line(text))
    elif smi.rc == 15 or "Unable to determine the device handle" in text:
        check.warn("gpu_lost", check.host, "nvidia-smi cannot reach a GPU (rc %s: a GPU is lost)" % smi.rc,
                   checklib.first_line(text))
    elif smi.rc == 14 or "infoROM is corrupted" in text:
        check.info("inforom_warning", check.host, "nvidia-smi reports a corrupted infoROM", checklib.first_line(text))
    elif smi.rc != 0:
        check.fail("nvidia_smi_error", check.host, "nvidia-smi exited %s (%s)" % (
            smi.rc, RC_MEANING.get(smi.rc, "unexpected error")), checklib.first_line(text))
    banner = BANNER_RE.search(text)
    if banner:
        check.metrics["driver_version"] = banner.group(2)
        check.metrics["nvidia_smi_version"] = banner.group(1)
    if module_loaded and smi.ok:
        device_nodes(check, modules)
        persistence(check)
    versions(check, loaded, on_disk)
    kernel_messages(check)


def no_driver(check, modules, loaded, text):
    """nvidia-smi cannot reach the driver: module absent, or loaded without its /dev nodes."""
    if not loaded and (modules is None or "nvidia" not in modules):
        check.fail("module_not_loaded", "nvidia", "the nvidia kernel module is not loaded (no nvidia among the "
                   "loaded modules, no /proc/driver/nvidia/version)", checklib.first_line(text))
        return
    missing = [p for p in ("/dev/nvidiactl", "/dev/nvidia0") if not check.exists(p)]
    if missing:
        check.fail("device_nodes_missing", ",".join(missing), "the nvidia module %s is loaded but %s %s missing"
                   % (loaded or "", ", ".join(missing), "is" if len(missing) == 1 else "are"),
                   checklib.first_line(text))
        return
    check.fail("driver_unreachable", "nvidia", "nvidia-smi cannot communicate with the loaded driver",
               checklib.first_line(text))


def device_nodes(check, modules):
    nodes = [n for n in check.listdir("/dev") if re.match(r"^nvidia\d+$", n)]
    check.metrics.update({"dev_nvidia_nodes": len(nodes), "dev_nvidia_uvm": check.exists("/dev/nvidia-uvm")})
    if not check.exists("/dev/nvidiactl") or not nodes:
        check.fail("device_nodes_missing", "/dev/nvidiactl", "/dev/nvidiactl or /dev/nvidia[0-9]* missing while the "
                   "driver answers")
    if not check.exists("/dev/nvidia-uvm"):
        if modules is not None and "nvidia_uvm" in modules:
            check.fail("device_nodes_missing", "/dev/nvidia-uvm", "nvidia_uvm is loaded but /dev/nvidia-uvm does not "
                       "exist: CUDA cannot initialise")
        else:
            check.warn("uvm_not_loaded", "/dev/nvidia-uvm", "nvidia_uvm not loaded and /dev/nvidia-uvm absent "
                       "(created on first CUDA use by nvidia-modprobe)")


def persistence(check):
    fields = ["index", "persistence_mode"]
    cmd = check.run(["nvidia-smi", "--query-gpu=" + ",".join(fields), "--format=csv,noheader"])
    off = ["GPU%s" % r["index"] for r in checklib.parse_query_csv(cmd.out, fields)
           if checklib.to_bool(r["persistence_mode"]) is False]
    daemon = check.run(["systemctl", "is-active", "nvidia-persistenced"])
    state = checklib_gpu.service_state(daemon)
    check.metrics.update({"persistence_disabled": off, "persistenced": state})
    if off and state not in (None, "active"):
        check.fail("persistence_disabled", ",".join(off), "persistence mode Disabled on %s and nvidia-persistenced "
                   "is %s" % (", ".join(off), state))
    elif off:
        check.warn("persistence_disabled", ",".join(off), "persistence mode Disabled on %s" % ", ".join(off))
    elif state not in (None, "active"):
        check.info("persistenced_inactive", "nvidia-persistenced", "nvidia-persistenced is %s (persistence mode set "
                   "by other means)" % state)


def versions(check, loaded, on_disk):
    installed = checklib.first_line(on_disk.out) if on_disk.ok else None
    if loaded and installed and installed != loaded:
        check.warn("module_update_pending", "nvidia", "installed nvidia module %s differs from the loaded %s (driver "
                   "updated on disk; a reload or reboot is pending)" % (installed, loaded))


def kernel_messages(check):
    lines, source = checklib_logs.kernel_log(check)
    if lines is None:
        check.metrics["kernel_log"] = "unavailable: %s" % source
        return
    uvm = [text for _, text in lines if UVM_ERROR_RE.search(text)]
    mismatch = [text for _, text in lines if API_MISMATCH_RE.search(text)]
    check.metrics["uvm_errors"] = len(uvm)
    if uvm:
        check.fail("uvm_errors", "nvidia_uvm", "%d nvidia-uvm error(s) in the kernel log: the UVM module is in a bad "
                   "state (reload nvidia_uvm)" % len(uvm), uvm[-1])
    if mismatch and not any(f["id"] == "library_mismatch" for f in check.findings):
        check.fail("library_mismatch", check.host, "the kernel reports an NVIDIA API version mismatch",
                   mismatch[-1])


if __name__ == "__main__":
    checklib.main("driver_health", body)
