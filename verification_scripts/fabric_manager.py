#!/usr/bin/env python3
"""Fabric Manager: on NVSwitch systems the nvidia-fabricmanager service must run, match the driver version,
and have trained every GPU into the fabric (nvidia-smi -q Fabric State Completed / Status Success).

Without a trained fabric CUDA fails with "system not yet initialized", so this runs before CUDA probes.
"""

import re

import checklib
import checklib_gpu

FM_VERSION_RE = re.compile(r"version is\s*:\s*(\S+)", re.IGNORECASE)
MODULE_RE = re.compile(r"Kernel Module\s+(\d+\.\d+(?:\.\d+)?)")
VERSION_RE = re.compile(r"^\d+\.\d+(?:\.\d+)?$")
NVSWITCH_RE = re.compile(r"Bridge(?: \[0680\])?: NVIDIA Corporation .*NVSwitch", re.IGNORECASE)


def nvswitch_count(check):
    """NVSwitches lspci shows, or (None, why) when lspci cannot tell."""
    cmd = check.run(["lspci", "-d", "10de:", "-nn"])
    if not cmd.ok:
        return None, cmd.why()
    return sum(1 for line in cmd.out.splitlines() if NVSWITCH_RE.search(line)), None


def body(check):
    switches, lspci_why = nvswitch_count(check)
    expected = check.expect("nvswitch", bool)
    check.metrics.update({"nvswitch_count": switches, "profile_nvswitch": expected})
    if expected is False or (switches == 0 and expected is None):
        check.finish("no NVSwitch on this host: the fabric manager is not needed")
    service = check.run(["systemctl", "is-active", "nvidia-fabricmanager"])
    state = checklib_gpu.service_state(service)
    check.metrics["service_state"] = state
    if state is None:
        check.metrics["service_state_unreadable"] = service.why() if not service.ok else checklib.first_line(
            service.out) or "empty answer"
    version_cmd = check.run(["nv-fabricmanager", "--version"])
    match = FM_VERSION_RE.search(version_cmd.text)
    fm_version = match.group(1) if match else None
    driver = driver_version(check)
    check.metrics.update({"fabricmanager_version": fm_version, "driver_version": driver})
    gpus, why = fabric_gpus(check)
    # lspci could not tell and there is no expectation: only a GPU that reports a fabric state shows NVSwitches
    if switches is None and expected is None and all(checklib.is_na(g.get("Fabric/State", "")) for g in gpus):
        check.unknown("cannot tell whether this host has NVSwitches (lspci: %s; GPU fabric state: %s); no "
                      "expectation for nvswitch on this host" % (lspci_why, why or "N/A"))
    if state is not None and state != "active":
        check.fail("fm_not_running", "nvidia-fabricmanager", "nvidia-fabricmanager is %s on an NVSwitch system"
                   % state, checklib.first_line(service.text))
    if fm_version and driver and fm_version != driver:
        check.fail("fm_version_mismatch", "nvidia-fabricmanager", "fabric manager %s does not match the driver %s"
                   % (fm_version, driver), checklib.first_line(version_cmd.out))
    fabric_states(check, gpus, why, state)


def driver_version(check):
    module = MODULE_RE.search(check.read("/proc/driver/nvidia/version") or "")
    if module:
        return module.group(1)
    cmd = check.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    versions = [line.strip() for line in cmd.out.splitlines() if VERSION_RE.match(line.strip())]
    return versions[0] if versions else None


def fabric_gpus(check):
    """GPU blocks of `nvidia-smi -q` that carry a Fabric section, and why there are none."""
    smi = check.run(["nvidia-smi", "-q"], timeout=60)
    gpus = [g for g in checklib.parse_q_sections(smi.out) if "Fabric/State" in g]
    return gpus, (None if gpus else checklib_gpu.nvsmi_error(smi) or "no Fabric section in nvidia-smi -q")


def fabric_states(check, gpus, why, service_state):
    if not gpus:
        if any(f["severity"] == "FAIL" for f in check.findings):
            check.metrics["fabric_state"] = "unreadable: %s" % why
            check.finish()
        if service_state is None:
            check.unknown("neither the service state (%s) nor the GPU fabric state (%s) is readable"
                          % (check.metrics.get("service_state_unreadable"), why))
        check.unknown("fabric state unreadable: %s" % why)
    bad = []
    for index, gpu in enumerate(gpus):
        state, status = gpu.get("Fabric/State", ""), gpu.get("Fabric/Status", "")
        if checklib.is_na(state):
            continue
        if state != "Completed" or (status and not checklib.is_na(status) and status != "Success"):
            bad.append(("GPU%d" % index, state, status))
    check.metrics["fabric_states"] = sorted(set(g.get("Fabric/State", "") for g in gpus))
    if bad:
        entities = ",".join(b[0] for b in bad)
        check.fail("fabric_not_ready", entities, "Fabric State %s / Status %s on %d GPU(s) (%s): NVSwitch fabric not "
                   "trained" % (bad[0][1], bad[0][2] or "?", len(bad), entities),
                   "State : %s, Status : %s" % (bad[0][1], bad[0][2]))
    if service_state is None and not bad:
        # a trained fabric is what the service exists for; its unit state is only the cause when it is not
        check.finish("GPU fabric trained on %d GPUs (service state not readable: %s)"
                     % (len(gpus), check.metrics.get("service_state_unreadable")))


if __name__ == "__main__":
    checklib.main("fabric_manager", body)
