"""lspci [-D] [-n|-nn] [-k] [-v|-vv|-vvv] [-s BDF] [-d VENDOR:[DEVICE]] for the GPUs, NVSwitches, the PCIe
switch ports above the GPUs (with their ACS control bits) and the Mellanox HCAs, and the sysfs tree lspci
and passive inventories read (/sys/bus/pci/devices/<bdf>/{vendor,device,class,numa_node}).

A GPU that fell off the bus reads `(rev ff)` with an unreadable config header; a GPU the driver
never bound has no "Kernel driver in use"; a degraded link shows in LnkSta of both link ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.sim.state import Gpu, HostState
from agent.sim.state.hardware import NVSWITCH_BUS_IDS, NVSWITCH_NAMES, part
from agent.sim.tools import ToolOutput, usage_error
from agent.sim.tools import _nvml as nvml

COMMANDS = ("lspci",)
GT_S = {1: "2.5GT/s", 2: "5GT/s", 3: "8GT/s", 4: "16GT/s", 5: "32GT/s", 6: "64GT/s"}
CLASS_NAMES = {"0300": "VGA compatible controller", "0302": "3D controller"}
SYSFS = "/sys/bus/pci/devices"
HCA_NAMES = {"MT4129": ("MT2910 Family [ConnectX-7]", "1021"), "MT4123": ("MT28908 Family [ConnectX-6]", "101b"),
             "MT4125": ("MT2892 Family [ConnectX-6 Dx]", "101d")}


@dataclass
class PciDev:
    bdf: str  # 0000:18:00.0
    cls: str
    code: str
    vendor: str
    vid: str
    name: str
    did: str
    rev: str
    numa: int = 0
    driver: str | None = None
    modules: str = ""
    detail: list[str] = field(default_factory=list)  # -vv capability lines (tab-indented)
    subsystem: str = ""

    @property
    def label(self) -> str:
        return f"{self.vendor} {self.name}" if self.vendor else self.name


def run(host: HostState, argv: list[str]) -> ToolOutput:
    args = argv[1:]
    flags: set[str] = set()
    slot = vendor = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-s", "-d") and i + 1 < len(args):
            slot, vendor = (args[i + 1], vendor) if arg == "-s" else (slot, args[i + 1])
            i += 1
        elif arg in ("-D", "-n", "-nn", "-k", "-v", "-vv", "-vvv", "-q", "-Q"):
            flags.add(arg)
        else:
            return usage_error("lspci", argv)
        i += 1
    verbose = 3 if "-vvv" in flags else 2 if "-vv" in flags else 1 if "-v" in flags else 0
    blocks = []
    for dev in sorted(_devices(host), key=lambda d: d.bdf):
        if (slot and not _slot_matches(slot, dev.bdf)) or (vendor and not _vendor_matches(vendor, dev)):
            continue
        lines = [_header(dev, flags)]
        if verbose:
            lines += _verbose(dev, verbose)
        elif "-k" in flags:
            lines += _kernel_lines(dev)
        blocks.append("\n".join(lines))
    sep = "\n\n" if verbose else "\n"
    return ToolOutput(sep.join(blocks) + ("\n\n" if verbose and blocks else "\n" if blocks else ""))


def _header(dev: PciDev, flags: set[str]) -> str:
    bdf = dev.bdf if "-D" in flags else dev.bdf[5:]
    if "-nn" in flags:
        text = f"{dev.cls} [{dev.code}]: {dev.label} [{dev.vid}:{dev.did}]"
    elif "-n" in flags:
        text = f"{dev.code}: {dev.vid}:{dev.did}"
    else:
        text = f"{dev.cls}: {dev.label}"
    return f"{bdf} {text} (rev {dev.rev})"


def _kernel_lines(dev: PciDev) -> list[str]:
    lines = [f"\tKernel driver in use: {dev.driver}"] if dev.driver else []
    return lines + ([f"\tKernel modules: {dev.modules}"] if dev.modules else [])


def _verbose(dev: PciDev, level: int) -> list[str]:
    if dev.rev == "ff":
        return ["\t!!! Unknown header type 7f", *_kernel_lines(dev)]
    lines = [f"\tSubsystem: {dev.vendor or dev.name} Device {dev.subsystem or dev.did}", f"\tNUMA node: {dev.numa}"]
    if level >= 2:
        lines += ["\tControl: I/O- Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr+ Stepping- SERR+ FastB2B- "
                  "DisINTx+", "\tStatus: Cap+ 66MHz- UDF- FastB2B- ParErr- DEVSEL=fast >TAbort- <TAbort- <MAbort- "
                  ">SERR- <PERR- INTx-", *dev.detail]
    return lines + _kernel_lines(dev)


def _link(cap_gen: int, cap_width: int, gen: int, width: int, port: str) -> list[str]:
    speed = GT_S.get(gen, "32GT/s") + (" (downgraded)" if gen < cap_gen else "")
    lanes = f"x{width}" + (" (downgraded)" if width < cap_width else "")
    return [f"\t\tLnkCap:\tPort #{port}, Speed {GT_S.get(cap_gen, '32GT/s')}, Width x{cap_width}, ASPM not supported",
            "\t\t\tClockPM+ Surprise- LLActRep- BwNot- ASPMOptComp+",
            "\t\tLnkCtl:\tASPM Disabled; RCB 64 bytes, Disabled- CommClk+",
            "\t\t\tExtSynch- ClockPM- AutWidDis- BWInt- AutBWInt-",
            f"\t\tLnkSta:\tSpeed {speed}, Width {lanes}",
            "\t\t\tTrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-"]


def _express(kind: str, link: list[str], errors: int = 0) -> list[str]:
    corr = "+" if errors else "-"
    return [f"\tCapabilities: [78] Express (v2) {kind}, MSI 00",
            "\t\tDevCap:\tMaxPayload 256 bytes, PhantFunc 0, Latency L0s unlimited, L1 <64us",
            "\t\tDevCtl:\tCorrErr- NonFatalErr+ FatalErr+ UnsupReq-",
            f"\t\tDevSta:\tCorrErr{corr} NonFatalErr- FatalErr- UnsupReq- AuxPwr- TransPend-", *link]


def _gpu_name(device_id: str) -> str:
    return part(device_id).lspci_name or f"Device {device_id}"


def _gpu_dev(gpu: Gpu) -> PciDev:
    info = part(gpu.pci_device_id)
    name, subsystem = _gpu_name(gpu.pci_device_id), info.subsystem
    link = _link(gpu.pcie_gen_max, gpu.pcie_width_max, gpu.pcie_gen_current, gpu.pcie_width_current, "0")
    detail = [f"\tPhysical Slot: {gpu.index + 1}", *_express("Endpoint", link, gpu.pcie_aer_errors),
              "\tCapabilities: [100 v1] Virtual Channel",
              "\tCapabilities: [420 v2] Advanced Error Reporting",
              f"\t\tCESta:\tRxErr{'+' if gpu.pcie_aer_errors else '-'} BadTLP- BadDLLP- Rollover- Timeout- "
              "AdvNonFatalErr-"]
    return PciDev(nvml.bdf_sysfs(gpu.bus_id), CLASS_NAMES[info.pci_class], info.pci_class, "NVIDIA Corporation",
                  "10de", name, gpu.pci_device_id, "ff" if gpu.fallen_off_bus else "a1", gpu.numa_node,
                  "nvidia" if gpu.driver_bound else None, "nvidiafb, nouveau, nvidia_drm, nvidia", detail, subsystem)


def _devices(host: HostState) -> list[PciDev]:
    devs = [_gpu_dev(gpu) for gpu in host.gpus if gpu.on_bus]
    device_id = host.gpus[0].pci_device_id if host.gpus else "2330"
    info = part(device_id)
    for k in range(host.lspci_extra_gpus):
        devs.append(PciDev(f"0000:{0xe8 + k:02x}:00.0", CLASS_NAMES[info.pci_class], info.pci_class,
                           "NVIDIA Corporation", "10de", _gpu_name(device_id), device_id, "a1",
                           host.numa_nodes - 1, None, "nvidiafb, nouveau, nvidia_drm, nvidia"))
    switch_id = info.nvswitch_id
    if switch_id:
        for bus in NVSWITCH_BUS_IDS[:host.nvswitch_count]:
            devs.append(PciDev(f"0000:{bus}:00.0", "Bridge", "0680", "NVIDIA Corporation", "10de",
                               NVSWITCH_NAMES.get(switch_id, f"Device {switch_id}"), switch_id, "a1", 0, "nvidia",
                               "nvidiafb, nouveau, nvidia_drm, nvidia"))
    for sw in host.pcie_switches:
        below = next((g for g in host.gpus if g.pcie_switch == sw.bus_id and g.on_bus), None)
        gen_max, width_max = (below.pcie_gen_max, below.pcie_width_max) if below else (5, 16)
        gen, width = (below.pcie_gen_current, below.pcie_width_current) if below else (5, 16)
        acs = "+" if sw.acs_src_valid else "-"
        detail = [*_express("Downstream Port (Slot+)", _link(gen_max, width_max, gen, width, "8")),
                  "\tCapabilities: [f24 v1] Access Control Services",
                  "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+",
                  f"\t\tACSCtl:\tSrcValid{acs} TransBlk- ReqRedir{acs} CmpltRedir{acs} UpstreamFwd{acs} EgressCtrl- "
                  "DirectTrans-"]
        devs.append(PciDev(sw.bus_id.lower(), "PCI bridge", "0604", "", "1000", sw.name, "c030", "b0",
                           below.numa_node if below else 0, "pcieport", "", detail))
    for hca in host.hcas:
        if not hca.bus_id:
            continue
        name, did = HCA_NAMES.get(hca.ca_type, (f"Device {hca.ca_type}", "1021"))
        ethernet = hca.link_layer == "Ethernet"
        detail = _express("Endpoint", _link(5, 16, 5, 16, "0"))
        devs.append(PciDev(hca.bus_id.lower(), "Ethernet controller" if ethernet else "Infiniband controller",
                           "0200" if ethernet else "0207", "Mellanox Technologies", "15b3", name, did, "00",
                           hca.numa_node, "mlx5_core", "mlx5_core", detail))
    return devs


def _slot_matches(spec: str, bdf: str) -> bool:
    """lspci -s [[[[<domain>]:]<bus>]:][<slot>][.[<func>]]; omitted parts match anything."""
    want_func = None
    if "." in spec:
        spec, want_func = spec.rsplit(".", 1)
    parts = spec.split(":")
    have = bdf.replace(".", ":").split(":")  # domain, bus, slot, func
    want = [None] * (3 - len(parts)) + parts if len(parts) <= 3 else parts[-3:]
    try:
        for w, h in zip(want, have[:3], strict=False):
            if w not in (None, "", "*") and int(w, 16) != int(h, 16):
                return False
        return want_func in (None, "", "*") or int(want_func, 16) == int(have[3], 16)
    except ValueError:
        return False


def _vendor_matches(spec: str, dev: PciDev) -> bool:
    vid, _, did = spec.partition(":")
    did = did.split(":")[0]
    return (not vid or vid.lower() == dev.vid) and (not did or did.lower() == dev.did.lower())


def files(host: HostState) -> dict[str, str | None]:
    """What the kernel exposes of each function under /sys/bus/pci/devices: ids, class and NUMA node."""
    out: dict[str, str | None] = {}
    for dev in _devices(host):
        base = f"{SYSFS}/{dev.bdf}"
        out[f"{base}/vendor"] = f"0x{dev.vid}\n"
        out[f"{base}/device"] = f"0x{dev.did.lower()}\n"
        out[f"{base}/class"] = f"0x{dev.code}00\n"
        out[f"{base}/numa_node"] = f"{dev.numa}\n"
    return out
