"""What the NVIDIA driver exposes of a simulated host: the rules every GPU tool renderer shares.

nvidia-smi, dcgmi, nvbandwidth and lspci all derive their output from these functions, so one fault
shows consistently across tools (a GPU that fell off the bus is lost to NVML, `rev ff` to lspci and
absent from CUDA; two inactive NVLinks lower `topo -m`, `nvlink -s` and P2P bandwidth alike).
"""

from __future__ import annotations

import re

from agent.sim.state import Gpu, HostState

COMM_FAILURE = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                "Make sure that the latest NVIDIA driver is installed and running.\n")
RC_GPU_LOST = 15
XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+)")
# H2D copy-engine bandwidth of a Gen5 x16 link as nvbandwidth measures it (Azure ND H100 v5: ~55 GB/s)
H2D_GEN5_X16_GBPS = 55.3
# share of the raw NVLink rate a device-to-device copy-engine read reaches (H100: ~390 of 478 GB/s)
NVLINK_COPY_EFFICIENCY = 0.816
ACS_P2P_GBPS = 11.6  # P2P bounced through the root complex once ACS redirects it


def tools_present(host: HostState) -> bool:
    """nvidia-smi and libnvidia-ml exist: the driver is installed and, in a container, injected by its runtime."""
    if not host.driver.installed:
        return False
    return not (host.container.inside and not host.container.nvidia_runtime)


def tool_missing(host: HostState, command: str) -> bool:
    return command in getattr(host.software, "missing_tools", ())


def driver_error(host: HostState) -> tuple[str, int] | None:
    """The message and exit code with which NVML initialisation fails, or None when it works."""
    driver = host.driver
    if not driver.module_loaded or not driver.device_nodes:
        return COMM_FAILURE, 9
    if driver.version != driver.kernel_module_version:
        return ("Failed to initialize NVML: Driver/library version mismatch\n"
                f"NVML library version: {short_version(driver.version)}\n", 18)
    if host.container.inside and not host.container.devices_cgroup_ok:
        return "Failed to initialize NVML: Unknown Error\n", 255
    return None


def devices(host: HostState) -> list[Gpu]:
    """GPUs the driver bound at boot, in PCI order: NVML's index order (a lost GPU keeps its slot)."""
    return sorted((g for g in host.gpus if g.on_bus and g.driver_bound), key=lambda g: g.bus_id.upper())


def cuda_devices(host: HostState) -> list[Gpu]:
    """GPUs a CUDA program can open: bound and still on the bus."""
    return [g for g in devices(host) if not g.fallen_off_bus]


def select(host: HostState, spec: str | None) -> list[tuple[int, Gpu]]:
    """(NVML index, GPU) pairs for `-i`: an index, a bus id or a UUID (comma-separated)."""
    pairs = list(enumerate(devices(host)))
    if spec is None:
        return pairs
    wanted = [s.strip() for s in spec.split(",") if s.strip()]
    chosen = []
    for index, gpu in pairs:
        for item in wanted:
            if item == str(index) or item.lower() == gpu.uuid.lower() or same_bdf(item, gpu.bus_id):
                chosen.append((index, gpu))
                break
    return chosen


def lost_message(gpu: Gpu) -> str:
    return f"Unable to determine the device handle for GPU{gpu.bus_id}: Unknown Error"


def inforom_warnings(host: HostState) -> list[str]:
    return [f"WARNING: infoROM is corrupted at gpu {bdf_short(g.bus_id)}"
            for g in devices(host) if g.inforom_corrupt and not g.fallen_off_bus]


def short_version(version: str) -> str:
    return ".".join(version.split(".")[:2])


def bdf_parts(text: str) -> tuple[int, int, int] | None:
    """(domain, bus, device) of any BDF spelling: 00000000:5D:00.0, 0000:5d:00, 5d:00.0."""
    parts = text.strip().split(".")[0].split(":")
    try:
        if len(parts) == 3:
            return int(parts[0], 16), int(parts[1], 16), int(parts[2], 16)
        if len(parts) == 2:
            return 0, int(parts[0], 16), int(parts[1], 16)
    except ValueError:
        return None
    return None


def bdf_numbers(bus_id: str) -> tuple[int, int, int, int]:
    """(domain, bus, device, function) of 00000000:1E:00.0 or 0000:00:1e.0."""
    domain, bus, rest = bus_id.split(":")
    device, _, function = rest.partition(".")
    return int(domain, 16), int(bus, 16), int(device, 16), int(function or "0", 16)


def same_bdf(a: str, b: str) -> bool:
    pa, pb = bdf_parts(a), bdf_parts(b)
    return pa is not None and pa == pb


def bdf_short(bus_id: str) -> str:
    """00000000:5D:00.0 -> 0000:5D:00.0 (nvidia-smi's warnings)."""
    return bus_id[4:] if len(bus_id) == 16 else bus_id


def bdf_kernel(bus_id: str) -> str:
    """00000000:5D:00.0 -> 0000:5d:00 (NVRM Xid lines)."""
    return bdf_short(bus_id).lower().rsplit(".", 1)[0]


def bdf_sysfs(bus_id: str) -> str:
    """00000000:5D:00.0 -> 0000:5d:00.0 (kernel device names, lspci -D)."""
    return bdf_short(bus_id).lower()


def active_links(gpu: Gpu) -> int:
    return sum(1 for speed in gpu.nvlink if speed)


def link_speed(gpu: Gpu) -> float:
    return next((speed for speed in gpu.nvlink if speed), 0.0)


def recent_xids(host: HostState, max_age_s: float = 3600.0) -> list[tuple[Gpu, int]]:
    """Xids the driver reported within max_age_s, with their GPU: what DCGM's Xid watch has recorded."""
    found: list[tuple[Gpu, int]] = []
    for line in host.journal:
        if line.ident != "kernel" or line.age_s > max_age_s:
            continue
        match = XID_RE.search(line.text)
        if not match:
            continue
        gpu = next((g for g in host.gpus if same_bdf(match.group(1), g.bus_id)), None)
        if gpu is not None and (gpu, int(match.group(2))) not in found:
            found.append((gpu, int(match.group(2))))
    return found


def switch_acs(host: HostState, gpu: Gpu) -> bool:
    """ACS source validation on the PCIe switch above the GPU (peer traffic redirected upstream)."""
    return any(s.acs_src_valid for s in host.pcie_switches if s.bus_id == gpu.pcie_switch)


def h2d_gbps(gpu: Gpu) -> float:
    """Host<->device copy bandwidth: scales with PCIe generation and width; a small per-slot spread."""
    scale = 2.0 ** (gpu.pcie_gen_current - 5) * gpu.pcie_width_current / 16.0
    return round(H2D_GEN5_X16_GBPS * scale - 0.01 * (gpu.index % 4), 2)


def p2p_gbps(host: HostState, a: Gpu, b: Gpu) -> float:
    """Device-to-device copy bandwidth: NVLink when both ends have active links, else PCIe."""
    if switch_acs(host, a) or switch_acs(host, b):
        return round(ACS_P2P_GBPS - 0.1 * ((a.index + b.index) % 3), 2)
    links = min(active_links(a), active_links(b))
    if links:
        speed = min(link_speed(a), link_speed(b))
        return round(links * speed * NVLINK_COPY_EFFICIENCY - 0.07 * ((a.index * 3 + b.index) % 5), 2)
    pcie = min(h2d_gbps(a), h2d_gbps(b))
    return round(pcie * (0.8 if a.numa_node == b.numa_node else 0.5), 2)
