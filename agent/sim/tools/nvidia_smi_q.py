"""nvidia-smi -q [-d SECTIONS] [-i ID]: the "NVSMI LOG" text of a 535-series driver.

Layout follows a real H100 dump (4-space indentation, keys padded to column 42); `-d` prints only
the sections that display type selects, as the real tool does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from agent.sim.state import Gpu, HostState
from agent.sim.state.hardware import part
from agent.sim.tools import ToolOutput
from agent.sim.tools import _nvml as nvml

# -d display type -> the top-level sections it prints
DISPLAY = {
    "MEMORY": {"FB Memory Usage", "BAR1 Memory Usage", "Conf Compute Protected Memory Usage"},
    "UTILIZATION": {"Utilization"},
    "ECC": {"ECC Mode", "ECC Errors"},
    "TEMPERATURE": {"Temperature"},
    "POWER": {"GPU Power Readings", "Module Power Readings"},
    "CLOCK": {"Clocks", "Applications Clocks", "Default Applications Clocks", "Deferred Clocks", "Max Clocks",
              "Max Customer Boost Clocks", "Clock Policy"},
    "COMPUTE": {"Compute Mode"},
    "PIDS": {"Processes"},
    "PERFORMANCE": {"Performance State", "Clocks Event Reasons"},
    "PAGE_RETIREMENT": {"Retired Pages"},
    "ROW_REMAPPER": {"Remapped Rows"},
    "RESET_STATUS": {"GPU Reset Status"},
    "VOLTAGE": {"Voltage"},
    "GSP_FIRMWARE_VERSION": {"GSP Firmware Version"},
}
Section = tuple[str, list[str]]


def kv(depth: int, key: str, value: object = None) -> str:
    label = "    " * depth + key
    return label if value is None else f"{label.ljust(42)}: {value}"


def render(host: HostState, display: str | None, only: str | None) -> ToolOutput:
    wanted: set[str] | None = None
    if display:
        wanted = set()
        for name in display.upper().split(","):
            if name.strip() not in DISPLAY:
                return ToolOutput(f"Invalid display type: {name.strip()}\n", "", 2)
            wanted |= DISPLAY[name.strip()]
    selected = nvml.select(host, only)
    out = ["", "==============NVSMI LOG==============", "",
           kv(0, "Timestamp", time.strftime("%a %b %d %H:%M:%S %Y")),
           kv(0, "Driver Version", host.driver.kernel_module_version),
           kv(0, "CUDA Version", host.driver.cuda_version), "",
           kv(0, "Attached GPUs", len(nvml.devices(host)))]
    rc = 0
    for index, gpu in selected:
        if gpu.fallen_off_bus:
            out.append(nvml.lost_message(gpu))
            rc = nvml.RC_GPU_LOST
            continue
        out.append(f"GPU {gpu.bus_id}")
        for title, lines in _sections(host, index, gpu):
            if wanted is None or title in wanted:
                out += lines
        out.append("")
    return ToolOutput("\n".join(out) + "\n", "", rc)


def _sections(host: HostState, index: int, gpu: Gpu) -> list[Section]:
    return _identity(host, index, gpu) + _pci(gpu) + _performance(gpu) + _memory(gpu) + _ecc(gpu) \
        + _thermal_power(gpu) + _clocks(gpu) + _tail(host, gpu)


def _single(depth_key: str, value: object) -> Section:
    return depth_key, [kv(1, depth_key, value)]


def _block(title: str, rows: Sequence[tuple[int, str, object]]) -> Section:
    return title, [kv(1, title)] + [kv(depth, key, value) for depth, key, value in rows]


def _identity(host: HostState, index: int, gpu: Gpu) -> list[Section]:
    na = "N/A" if gpu.inforom_corrupt else None
    info = part(gpu.pci_device_id)
    mig = ("Enabled" if gpu.mig_mode else "Disabled") if info.mig else "N/A"
    _, bus, device, function = nvml.bdf_numbers(gpu.bus_id)
    reset_required = "Yes" if gpu.remap_pending else "No"
    return [
        _single("Product Name", gpu.name), _single("Product Brand", "NVIDIA"),
        _single("Product Architecture", info.architecture), _single("Display Mode", "Disabled"),
        _single("Display Active", "Disabled"),
        _single("Persistence Mode", "Enabled" if gpu.persistence_mode else "Disabled"),
        _single("Addressing Mode", "None"),
        _block("MIG Mode", [(2, "Current", mig), (2, "Pending", mig)]),
        _single("Accounting Mode", "Disabled"), _single("Accounting Mode Buffer Size", 4000),
        _block("Driver Model", [(2, "Current", "N/A"), (2, "Pending", "N/A")]),
        _single("Serial Number", gpu.serial), _single("GPU UUID", gpu.uuid), _single("Minor Number", index),
        _single("VBIOS Version", gpu.vbios), _single("MultiGPU Board", "No"),
        _single("Board ID", f"0x{bus << 8 | device << 3 | function:x}"),
        _single("GPU Part Number", f"{gpu.pci_device_id.upper()}-885-A1"),
        _block("Inforom Version", [(2, "Image Version", na or "G520.0200.00.05"), (2, "OEM Object", na or "2.1"),
                                   (2, "ECC Object", na or "7.16"), (2, "Power Management Object", "N/A")]),
        _block("GPU Operation Mode", [(2, "Current", "N/A"), (2, "Pending", "N/A")]),
        _single("GSP Firmware Version", host.driver.kernel_module_version if host.driver.gsp_firmware else "N/A"),
        _block("GPU Virtualization Mode", [(2, "Virtualization Mode", "None"), (2, "Host VGPU Mode", "N/A")]),
        _block("GPU Reset Status", [(2, "Reset Required", reset_required), (2, "Drain and Reset Recommended", "No")]),
    ]


def _pci(gpu: Gpu) -> list[Section]:
    domain, bus, device, _ = nvml.bdf_numbers(gpu.bus_id)
    return [_block("PCI", [
        (2, "Bus", f"0x{bus:02X}"), (2, "Device", f"0x{device:02X}"), (2, "Domain", f"0x{domain:04X}"),
        (2, "Device Id", f"0x{gpu.pci_device_id.upper()}10DE"), (2, "Bus Id", gpu.bus_id),
        (2, "Sub System Id", f"0x{part(gpu.pci_device_id).subsystem.upper()}10DE"), (2, "GPU Link Info", None),
        (3, "PCIe Generation", None),
        (4, "Max", gpu.pcie_gen_max), (4, "Current", gpu.pcie_gen_current),
        (4, "Device Current", gpu.pcie_gen_current), (4, "Device Max", gpu.pcie_gen_max),
        (4, "Host Max", gpu.pcie_gen_max), (3, "Link Width", None), (4, "Max", f"{gpu.pcie_width_max}x"),
        (4, "Current", f"{gpu.pcie_width_current}x"), (2, "Bridge Chip", None), (3, "Type", "N/A"),
        (3, "Firmware", "N/A"), (2, "Replays Since Reset", gpu.pcie_replays), (2, "Replay Number Rollovers", 0),
        (2, "Tx Throughput", f"{3875 if gpu.utilization_pct else 632} KB/s"), (2, "Rx Throughput", "574 KB/s"),
        (2, "Atomic Caps Inbound", "N/A"),
        (2, "Atomic Caps Outbound", "FETCHADD_32 FETCHADD_64 SWAP_32 SWAP_64 CAS_32 CAS_64")])]


def _performance(gpu: Gpu) -> list[Section]:
    def state(bit: int) -> str:
        return "Active" if gpu.clocks_event_reasons & bit else "Not Active"

    return [_single("Fan Speed", "N/A"),
            _single("Performance State", "P0"),
            _block("Clocks Event Reasons", [
                (2, "Idle", state(0x1)), (2, "Applications Clocks Setting", state(0x2)),
                (2, "SW Power Cap", state(0x4)), (2, "HW Slowdown", state(0x8)),
                (3, "HW Thermal Slowdown", state(0x40)), (3, "HW Power Brake Slowdown", state(0x80)),
                (2, "Sync Boost", state(0x10)), (2, "SW Thermal Slowdown", state(0x20)),
                (2, "Display Clock Setting", state(0x100))]),
            _single("Sparse Operation Mode", "Disabled")]


def _memory(gpu: Gpu) -> list[Section]:
    used = sum(p.used_mib for p in gpu.processes)
    reserved = 551
    util = gpu.utilization_pct
    return [_block("FB Memory Usage", [(2, "Total", f"{gpu.memory_total_mib} MiB"), (2, "Reserved", f"{reserved} MiB"),
                                       (2, "Used", f"{used} MiB"),
                                       (2, "Free", f"{gpu.memory_total_mib - reserved - used} MiB")]),
            _block("BAR1 Memory Usage", [(2, "Total", "131072 MiB"), (2, "Used", "1 MiB"), (2, "Free", "131071 MiB")]),
            _block("Conf Compute Protected Memory Usage", [(2, "Total", "0 MiB"), (2, "Used", "0 MiB"),
                                                           (2, "Free", "0 MiB")]),
            _single("Compute Mode", gpu.compute_mode),
            _block("Utilization", [(2, "Gpu", f"{util} %"), (2, "Memory", f"{min(util, 60)} %"),
                                   (2, "Encoder", "0 %"), (2, "Decoder", "0 %"), (2, "JPEG", "0 %"),
                                   (2, "OFA", "0 %")])]


def _ecc(gpu: Gpu) -> list[Section]:
    enabled = gpu.ecc_mode == "Enabled"

    def counters(scope: str) -> list[tuple[int, str, object]]:
        na = not enabled or (scope == "aggregate" and gpu.inforom_corrupt)

        def value(name: str) -> object:
            return "N/A" if na else getattr(gpu, f"ecc_{scope}_{name}")

        return [(3, "SRAM Correctable", value("sram_corrected")),
                (3, "SRAM Uncorrectable Parity", "N/A" if na else 0),
                (3, "SRAM Uncorrectable SEC-DED", value("sram_uncorrected")),
                (3, "DRAM Correctable", value("dram_corrected")), (3, "DRAM Uncorrectable", value("dram_uncorrected"))]

    sram_sources = gpu.ecc_aggregate_sram_uncorrected
    remap_rows: list[tuple[int, str, object]] = [
        (2, "Correctable Error", gpu.remapped_correctable), (2, "Uncorrectable Error", gpu.remapped_uncorrectable),
        (2, "Pending", "Yes" if gpu.remap_pending else "No"),
        (2, "Remapping Failure Occurred", "Yes" if gpu.remap_failure else "No"),
        (2, "Bank Remap Availability Histogram", None),
        (3, "Max", f"{2560 - gpu.remapped_correctable - gpu.remapped_uncorrectable} bank(s)"),
        (3, "High", f"{min(1, gpu.remapped_correctable + gpu.remapped_uncorrectable)} bank(s)"),
        (3, "Partial", "0 bank(s)"), (3, "Low", "0 bank(s)"), (3, "None", "0 bank(s)")]
    mode = gpu.ecc_mode
    return [
        _block("ECC Mode", [(2, "Current", mode), (2, "Pending", mode)]),
        _block("ECC Errors", [(2, "Volatile", None), *counters("volatile"), (2, "Aggregate", None),
                              *counters("aggregate"),
                              (3, "SRAM Threshold Exceeded", "Yes" if gpu.sram_threshold_exceeded else "No"),
                              (2, "Aggregate Uncorrectable SRAM Sources", None), (3, "SRAM L2", 0),
                              (3, "SRAM SM", sram_sources), (3, "SRAM Microcontroller", 0), (3, "SRAM PCIE", 0),
                              (3, "SRAM Other", 0)]),
        _block("Retired Pages", [(2, "Single Bit ECC", "N/A"), (2, "Double Bit ECC", "N/A"),
                                 (2, "Pending Page Blacklist", "N/A")]),
        _block("Remapped Rows", remap_rows),
    ]


def _thermal_power(gpu: Gpu) -> list[Section]:
    temp = gpu.temperature_c
    limit = gpu.power_limit_w
    return [
        _block("Temperature", [(2, "GPU Current Temp", f"{temp} C"), (2, "GPU T.Limit Temp", f"{85 - temp} C"),
                               (2, "GPU Shutdown T.Limit Temp", "-8 C"), (2, "GPU Slowdown T.Limit Temp", "-2 C"),
                               (2, "GPU Max Operating T.Limit Temp", "0 C"), (2, "GPU Target Temperature", "N/A"),
                               (2, "Memory Current Temp", f"{gpu.memory_temperature_c} C"),
                               (2, "Memory Max Operating T.Limit Temp", "0 C")]),
        _block("GPU Power Readings", [(2, "Power Draw", f"{gpu.power_draw_w:.2f} W"),
                                      (2, "Current Power Limit", f"{limit:.2f} W"),
                                      (2, "Requested Power Limit", f"{limit:.2f} W"),
                                      (2, "Default Power Limit", f"{gpu.default_power_limit_w:.2f} W"),
                                      (2, "Min Power Limit", f"{gpu.default_power_limit_w * 2 / 7:.2f} W"),
                                      (2, "Max Power Limit", f"{gpu.default_power_limit_w:.2f} W")]),
        _block("Module Power Readings", [(2, key, "N/A") for key in (
            "Power Draw", "Current Power Limit", "Requested Power Limit", "Default Power Limit", "Min Power Limit",
            "Max Power Limit")]),
    ]


def _clocks(gpu: Gpu) -> list[Section]:
    sm, top, mem = gpu.sm_clock_mhz, gpu.max_sm_clock_mhz, gpu.mem_clock_mhz
    return [
        _block("Clocks", [(2, "Graphics", f"{sm} MHz"), (2, "SM", f"{sm} MHz"), (2, "Memory", f"{mem} MHz"),
                          (2, "Video", f"{int(sm * 0.78)} MHz")]),
        _block("Applications Clocks", [(2, "Graphics", f"{top} MHz"), (2, "Memory", f"{mem} MHz")]),
        _block("Default Applications Clocks", [(2, "Graphics", f"{top} MHz"), (2, "Memory", f"{mem} MHz")]),
        _block("Deferred Clocks", [(2, "Memory", "N/A")]),
        _block("Max Clocks", [(2, "Graphics", f"{top} MHz"), (2, "SM", f"{top} MHz"), (2, "Memory", f"{mem} MHz"),
                              (2, "Video", f"{int(top * 0.78)} MHz")]),
        _block("Max Customer Boost Clocks", [(2, "Graphics", f"{top} MHz")]),
        _block("Clock Policy", [(2, "Auto Boost", "N/A"), (2, "Auto Boost Default", "N/A")]),
        _block("Voltage", [(2, "Graphics", "670.000 mV")]),
    ]


def _tail(host: HostState, gpu: Gpu) -> list[Section]:
    if host.nvswitch_count:
        fabric = [(2, "State", host.fabric_manager.state), (2, "Status", host.fabric_manager.status)]
    else:
        fabric = [(2, "State", "N/A"), (2, "Status", "N/A")]
    if gpu.processes:
        rows: list[tuple[int, str, object]] = []
        for proc in gpu.processes:
            rows += [(2, "GPU instance ID", "N/A"), (2, "Compute instance ID", "N/A"), (2, "Process ID", proc.pid),
                     (3, "Type", "C"), (3, "Name", proc.name), (3, "Used GPU Memory", f"{proc.used_mib} MiB")]
        processes = _block("Processes", rows)
    else:
        processes = _single("Processes", "None")
    return [_block("Fabric", fabric), processes]
