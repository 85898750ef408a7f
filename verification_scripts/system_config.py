#!/usr/bin/env python3
"""system_config: OS settings that break NCCL or training.

memlock ulimit (RDMA memory registration), /dev/shm size (NCCL SHM transport, DataLoader workers),
PCIe ACS on switches (P2P/GPUDirect redirected through the root complex: hangs, slow P2P), CPU
frequency governor and NCCL environment switches that disable fast transports.
Reads /proc/self/limits, /proc/mounts and sysfs through the system root; runs `df -k /dev/shm`
and `lspci -vvv`.
"""

import os
import re

import checklib

SHM_FAIL_MIB = 512  # NCCL SHM segments plus DataLoader batches do not fit below this
SHM_WARN_MIB = 1024
SWITCH_VENDORS = re.compile(r"PLX|PEX|Broadcom|LSI|PMC-Sierra|Microsemi|Microchip|Switchtec", re.I)
# env switches that force NCCL off its fast paths; fine for a workaround, suspicious in production
SUSPICIOUS_ENV = {
    "NCCL_P2P_DISABLE": ("1", "NVLink/PCIe peer-to-peer disabled: intra-node traffic goes through host memory"),
    "NCCL_IB_DISABLE": ("1", "InfiniBand disabled: inter-node traffic falls back to TCP sockets"),
    "NCCL_SHM_DISABLE": ("1", "shared-memory transport disabled"),
    "NCCL_NET_GDR_LEVEL": ("0", "GPUDirect RDMA disabled"),
    "NCCL_P2P_LEVEL": ("LOC", "peer-to-peer restricted to the same GPU"),
    "CUDA_LAUNCH_BLOCKING": ("1", "every CUDA launch is synchronous (debug setting; very slow)"),
}


def check_memlock(check, unchecked):
    text = check.read("/proc/self/limits")
    line = None
    for raw in (text or "").splitlines():
        if raw.startswith("Max locked memory"):
            line = raw
    if line is None:
        unchecked.append("memlock (/proc/self/limits unreadable)")
        return
    fields = line[len("Max locked memory"):].split()
    if len(fields) < 2:
        unchecked.append("memlock (unparseable limits line)")
        return
    soft, hard = fields[0], fields[1]
    check.metrics["memlock_soft"] = soft
    check.metrics["memlock_hard"] = hard
    if soft == "unlimited":
        return
    value = checklib.to_int(soft)
    if value is None:
        unchecked.append("memlock (unparseable value %r)" % soft)
        return
    # a locked-memory limit only hurts RDMA memory registration: judge it where RDMA is there or expected
    rdma = check.listdir("/sys/class/infiniband")
    expected = check.expect("hca_count", int)
    check.metrics["rdma_devices"] = len(rdma)
    if not rdma and expected == 0:
        check.info("memlock", "ulimit -l", "memlock limit is %d KiB; no RDMA NIC on this host, so nothing needs "
                   "it unlimited" % (value // 1024), line.strip())
        return
    if not rdma and expected is None:
        unchecked.append("memlock (limited to %d KiB, but no RDMA device is visible and there is no expectation "
                         "for hca_count on this host)" % (value // 1024))
        return
    check.fail("memlock", "ulimit -l",
               "memlock limit is %d KiB, not unlimited: RDMA memory registration fails "
               "(NCCL 'ibv_reg_mr failed: Cannot allocate memory')" % (value // 1024), line.strip())


def _shm_from_df(check):
    cmd = check.run(["df", "-k", "/dev/shm"], timeout=20)
    if cmd.missing or cmd.timed_out:
        return None, None
    if cmd.rc != 0:
        if "No such file" in cmd.text:
            return "absent", cmd.text.strip()
        return None, None
    for line in cmd.out.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 6 and fields[-1] == "/dev/shm":
            size, used = checklib.to_int(fields[1]), checklib.to_int(fields[2])
            if size is not None:
                return (size * 1024, (used or 0) * 1024), line.strip()
    return None, None


def _shm_from_mounts(check):
    text = check.read("/proc/mounts")
    if text is None:
        return None, None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "/dev/shm":
            match = re.search(r"(?:^|,)size=(\d+)([kmgKMG]?)", fields[3])
            if match:
                mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[match.group(2).lower()]
                return (int(match.group(1)) * mult, None), line
            mem = re.search(r"MemTotal:\s+(\d+) kB", check.read("/proc/meminfo") or "")
            # tmpfs without size= gets half of RAM
            return ((int(mem.group(1)) * 1024 // 2, None), line) if mem else (None, None)
    return "absent", "no /dev/shm in /proc/mounts"


def check_shm(check, unchecked):
    found, raw = _shm_from_df(check)
    if found is None:
        found, raw = _shm_from_mounts(check)
    if found is None:
        unchecked.append("/dev/shm size (df and /proc/mounts unavailable)")
        return
    if found == "absent":
        check.fail("shm_small", "/dev/shm", "/dev/shm is not mounted: NCCL SHM transport and DataLoader workers "
                   "cannot create shared memory", raw)
        return
    size, used = found
    mib = size // (1 << 20)
    check.metrics["shm_mib"] = mib
    if mib < SHM_FAIL_MIB:
        check.fail("shm_small", "/dev/shm", "/dev/shm is only %d MiB (container default is 64 MiB): NCCL "
                   "'posix_fallocate failed: No space left on device', DataLoader 'Bus error'; run the "
                   "container with --shm-size or --ipc=host" % mib, raw)
    elif mib < SHM_WARN_MIB:
        check.warn("shm_small", "/dev/shm", "/dev/shm is %d MiB, below 1 GiB" % mib, raw)
    if used is not None and size and used > 0.9 * size:
        check.warn("shm_full", "/dev/shm", "/dev/shm is %d%% full" % (100 * used // size), raw)


def parse_acs(text):
    """[(device line, ACSCtl line, is_root_port, is_switch_port)] from `lspci -vvv`."""
    out = []
    header, root, switch = "", False, False
    for line in text.splitlines():
        if line and not line[0].isspace():
            header, root, switch = line.strip(), False, bool(SWITCH_VENDORS.search(line))
            continue
        stripped = line.strip()
        if "Express" in stripped and "Root Port" in stripped:
            root = True
        if "Express" in stripped and ("Upstream Port" in stripped or "Downstream Port" in stripped):
            switch = True
        if stripped.startswith("ACSCtl:"):
            out.append((header, stripped, root, switch))
    return out


def acs_unseen(check, why):
    # said for ACS alone: memlock and /dev/shm are still judged (a container sees those, not the PCIe tree)
    check.info("acs_unseen", "PCIe", "could not check PCIe ACS (%s)" % why)
    return False


def check_acs(check):
    """False when ACS could not be read."""
    cmd = check.run(["lspci", "-vvv"], timeout=60)
    if not cmd.ok:
        return acs_unseen(check, cmd.why())
    if not re.search(r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7] ", cmd.out, re.M):
        return acs_unseen(check, "lspci output has no devices")
    entries = parse_acs(cmd.out)
    check.metrics["acs_ports"] = len(entries)
    if not entries:
        if "<access denied>" in cmd.out:
            return acs_unseen(check, "lspci capabilities need root")
        return True
    enabled = 0
    for header, ctl, root, switch in entries:
        if "SrcValid+" not in ctl:
            continue
        enabled += 1
        bdf = header.split()[0] if header else "?"
        if root:
            # root ports commonly keep ACS on with the IOMMU; P2P under a switch is what it breaks
            check.info("acs_root_port", bdf, "ACS source validation on root port %s" % bdf, ctl)
        else:
            check.fail("acs_src_valid", bdf, "PCIe ACS enabled (SrcValid+) on %s %s: GPU peer-to-peer and "
                       "GPUDirect RDMA traffic is redirected to the root complex (hangs, slow P2P)"
                       % ("PCIe switch port" if switch else "bridge", header), ctl)
    check.metrics["acs_src_valid"] = enabled
    return True


def check_governor(check):
    governors = {}
    for name in check.listdir("/sys/devices/system/cpu"):
        if re.match(r"cpu\d+$", name):
            value = check.read("/sys/devices/system/cpu/%s/cpufreq/scaling_governor" % name)
            if value is not None:
                governors[name] = value.strip()
    if not governors:
        check.info("cpu_governor", "cpufreq", "no cpufreq governor exposed (VM or BIOS-managed)")
        return
    slow = sorted((n for n, g in governors.items() if g != "performance"), key=lambda n: int(n[3:]))
    check.metrics["cpu_governor"] = governors.get("cpu0") or sorted(governors.values())[0]
    if slow:
        check.warn("cpu_governor", ",".join(slow[:4]) + (" ..." if len(slow) > 4 else ""),
                   "CPU governor is %s on %d CPUs (expected performance)" % (governors[slow[0]], len(slow)),
                   "scaling_governor=%s" % governors[slow[0]])


def check_env(check):
    for name, (bad, why) in sorted(SUSPICIOUS_ENV.items()):
        value = os.environ.get(name)
        if value is not None and value.strip().upper() == bad:
            check.warn("nccl_env", name, "%s=%s: %s" % (name, value, why), "%s=%s" % (name, value))


def body(check):
    unchecked = []
    check_memlock(check, unchecked)
    check_shm(check, unchecked)
    acs = check_acs(check)
    check_governor(check)
    check_env(check)
    bad = [f for f in check.findings if f["severity"] in ("FAIL", "WARN")]
    if unchecked and not bad:
        check.unknown("could not check: %s" % "; ".join(unchecked + ([] if acs else ["PCIe ACS"])))
    for item in unchecked:
        check.info("not_checked", "host", "could not check %s" % item)
    check.finish("memlock unlimited, /dev/shm %s MiB, %s, governor %s"
                 % (check.metrics.get("shm_mib", "?"), "no ACS on PCIe switches" if acs else "PCIe ACS not checked",
                    check.metrics.get("cpu_governor", "n/a")))


if __name__ == "__main__":
    checklib.main("system_config", body)
