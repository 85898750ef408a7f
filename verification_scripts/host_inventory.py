#!/usr/bin/env python3
"""Host inventory: what this host is, read passively before any hypothesis is tested.

GPUs on the PCI bus and as the driver lists them, driver and CUDA versions, NVSwitches, RDMA NICs with their
link layer, whether this is a container, a VM or bare metal, which tools exist and which privileges the checks
lack. The diagnosis derives every check's expectations from this (a shipped SKU profile when the GPUs match one),
so that a host is judged as what it is, not as a default H100 box.

Nothing here decides anything: the verdict is PASS when the inventory was taken, whatever it found; every
source that could not be read is named in `unreadable` with its reason.
"""

import os
import re

import checklib
import checklib_gpu

NVIDIA, MELLANOX = "10de", "15b3"
GPU_CLASSES = ("0300", "0302")  # VGA compatible controller, 3D controller
BRIDGE_CLASS = "0680"  # "Bridge: NVIDIA Corporation ... NVSwitch"
NIC_CLASSES = {"0200": "Ethernet", "0207": "InfiniBand"}
LSPCI_RE = re.compile(r"^(\S+)\s.*?\[([0-9a-f]{4})\]:.*\[([0-9a-f]{4}):([0-9a-f]{4})\]", re.IGNORECASE)
# the tools the checks use; their absence is recorded so a check's UNKNOWN can be explained up front
TOOLS = ("nvidia-smi", "lspci", "dmesg", "journalctl", "systemctl", "dcgmi", "ibstat", "ibv_devinfo", "ofed_info",
         "nv-fabricmanager", "ipmitool", "docker", "nvidia-ctk", "all_reduce_perf", "ib_write_bw", "nvbandwidth")
HYPERVISOR_VENDORS = ("qemu", "kvm", "vmware", "xen", "amazon ec2", "google", "innotek", "openstack", "bochs",
                      "parallels", "nutanix", "red hat")
CONTAINER_CGROUP_RE = re.compile(r"docker|kubepods|containerd|libpod|lxc|crio", re.IGNORECASE)
MODULE_RE = re.compile(r"Kernel Module\s+(\d+\.\d+(?:\.\d+)?)")
CUDA_RE = re.compile(r"CUDA Version:\s*(\d+\.\d+)")
SMI_FIELDS = ["index", "name", "pci.bus_id", "pci.device_id", "memory.total", "driver_version", "uuid", "serial"]


def pci_devices(check):
    """[(bdf, vendor, device, class)] of NVIDIA and Mellanox functions: sysfs first (containers often lack
    pciutils), else `lspci -D -nn`; None when neither can be read."""
    found = checklib_gpu.pci_functions(check, (NVIDIA, MELLANOX))
    if found is not None:
        return found, "sysfs"
    found = []
    cmd = check.run(["lspci", "-D", "-nn"])
    if not cmd.ok or not cmd.out.strip():
        check.metrics["unreadable"]["pci"] = "no /sys/bus/pci/devices and %s" % cmd.why()
        return None, None
    for line in cmd.out.splitlines():
        match = LSPCI_RE.match(line.strip())
        if match and match.group(3).lower() in (NVIDIA, MELLANOX):
            found.append((match.group(1), match.group(3).lower(), match.group(4).lower(), match.group(2).lower()))
    return found, "lspci"


def gpus_from_driver(check):
    cmd = check.run(["nvidia-smi", "--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits"])
    rows = checklib.parse_query_csv(cmd.out, SMI_FIELDS) if cmd.ok else []
    gpus = []
    for row in rows:
        device = row["pci.device_id"].lower()
        device = device[2:6] if device.startswith("0x") else device[:4]
        gpus.append({"index": checklib.to_int(row["index"]), "name": row["name"], "bus_id": row["pci.bus_id"],
                     "device_id": device, "memory_mib": checklib.to_int(row["memory.total"]),
                     "driver_version": row["driver_version"], "uuid": row["uuid"],
                     "serial": "" if row["serial"] in ("[N/A]", "N/A") else row["serial"]})
    if not gpus:
        check.metrics["unreadable"]["nvidia-smi"] = cmd.why() if not cmd.ok else "no GPU rows in its answer"
    return gpus, cmd


def rdma_ports(check):
    base = "/sys/class/infiniband"
    ports = []
    for dev in check.listdir(base):
        for port in check.listdir("%s/%s/ports" % (base, dev)):
            root = "%s/%s/ports/%s" % (base, dev, port)
            ports.append({"device": dev, "port": port,
                          "link_layer": (check.read(root + "/link_layer") or "").strip() or None,
                          "state": (check.read(root + "/state") or "").strip() or None,
                          "rate": (check.read(root + "/rate") or "").strip() or None})
    return ports


def platform(check):
    """('container' | 'vm' | 'bare-metal' | 'unknown', the evidence)."""
    cgroup = check.read("/proc/1/cgroup") or ""
    if check.exists("/.dockerenv") or check.exists("/run/.containerenv"):
        return "container", "/.dockerenv or /run/.containerenv present"
    if CONTAINER_CGROUP_RE.search(cgroup):
        return "container", "PID 1's cgroup: %s" % checklib.first_line(CONTAINER_CGROUP_RE.search(cgroup).group(0))
    vendor = (check.read("/sys/class/dmi/id/sys_vendor") or "").strip()
    product = (check.read("/sys/class/dmi/id/product_name") or "").strip()
    flags = re.search(r"^flags\s*:(.*)$", check.read("/proc/cpuinfo", limit=1 << 16) or "", re.MULTILINE)
    hypervisor = bool(flags and " hypervisor" in flags.group(1) + " ")
    machine = " ".join(p for p in (vendor, product) if p)
    lowered = machine.lower()
    if hypervisor or any(v in lowered for v in HYPERVISOR_VENDORS) or "virtual machine" in lowered:
        if lowered.endswith(".metal"):  # EC2 bare-metal instances keep the "Amazon EC2" vendor
            return "bare-metal", machine
        return "vm", machine or "hypervisor CPU flag"
    if machine:
        return "bare-metal", machine
    return "unknown", "no DMI data and no hypervisor flag readable"


def privileges(check):
    restrict = (check.read("/proc/sys/kernel/dmesg_restrict") or "").strip()
    root = checklib.euid() == 0
    return {"root": root,
            "kernel_log": True if root or restrict == "0" else (False if restrict == "1" else None),
            "systemd": check.exists("/run/systemd/system")}


def body(check):
    check.metrics["unreadable"] = {}
    devices, pci_source = pci_devices(check)
    gpus, smi = gpus_from_driver(check)
    driver = MODULE_RE.search(check.read("/proc/driver/nvidia/version") or "")
    cuda = None
    if gpus:
        cuda = CUDA_RE.search(check.run(["nvidia-smi"]).out)
    kind, evidence = platform(check)
    inventory = {
        "hostname": os.environ.get("HOSTNAME") or os.uname()[1],
        "pci_source": pci_source,
        "gpus_pci": [{"bus_id": d[0], "device_id": d[2]} for d in devices or [] if d[1] == NVIDIA
                     and d[3] in GPU_CLASSES],
        "nvswitches": None if devices is None else sum(1 for d in devices if d[1] == NVIDIA and d[3] == BRIDGE_CLASS),
        "nics_pci": [{"bus_id": d[0], "device_id": d[2], "kind": NIC_CLASSES[d[3]]} for d in devices or []
                     if d[1] == MELLANOX and d[3] in NIC_CLASSES],
        "gpus": gpus,
        "nvidia_smi": None if smi.missing else smi.rc,
        "driver_version": driver.group(1) if driver else (gpus[0]["driver_version"] if gpus else None),
        "driver_loaded": bool(driver) or check.exists("/proc/driver/nvidia"),
        "device_nodes": [n for n in check.listdir("/dev") if n.startswith("nvidia")],
        "cuda_version": cuda.group(1) if cuda else None,
        "rdma": rdma_ports(check),
        "platform": kind,
        "platform_evidence": evidence,
        "tools": {tool: checklib.which(tool) is not None for tool in TOOLS},
        "privileges": privileges(check),
    }
    check.metrics.update(inventory)
    check.finish("inventory taken")


if __name__ == "__main__":
    checklib.main("host_inventory", body)
