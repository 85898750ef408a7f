"""nvidia-smi --query-gpu / --query-compute-apps / --query-remapped-rows with --format=csv[,noheader][,nounits].

Every field is looked up by name, as the real tool does; an unknown field is the real error (rc 2),
and values the hardware cannot report print as [N/A] like a real H100 does.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agent.sim.state import Gpu, GpuProcess, HostState, hardware
from agent.sim.tools import ToolOutput
from agent.sim.tools import _nvml as nvml

NA = "[N/A]"
RESERVED_MIB = 551
REASON_BITS = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
               "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
               "hw_power_brake_slowdown": 0x80, "display_clock_setting": 0x100}
Getter = Callable[[HostState, int, Gpu], object]


def _flag(value: bool) -> str:
    return "Enabled" if value else "Disabled"


def _mig(gpu: Gpu) -> str:
    return _flag(gpu.mig_mode) if hardware.part(gpu.pci_device_id).mig else NA


def _ecc(kind: str, scope: str, part: str) -> Getter:
    def get(host: HostState, index: int, gpu: Gpu) -> object:
        if gpu.ecc_mode != "Enabled" or (scope == "aggregate" and gpu.inforom_corrupt):
            return NA
        dram = getattr(gpu, f"ecc_{scope}_dram_{kind}")
        sram = getattr(gpu, f"ecc_{scope}_sram_{kind}")
        return {"total": dram + sram, "dram": dram, "device_memory": dram, "sram": sram}.get(part, NA)
    return get


def _reason(bit: int) -> Getter:
    return lambda host, index, gpu: "Active" if gpu.clocks_event_reasons & bit else "Not Active"


def _inforom(value: str) -> Getter:
    return lambda host, index, gpu: NA if gpu.inforom_corrupt else value


# field -> (getter, unit printed after the value unless nounits)
GPU_FIELDS: dict[str, tuple[Getter, str]] = {
    "index": (lambda h, i, g: i, ""),
    "name": (lambda h, i, g: g.name, ""),
    "gpu_name": (lambda h, i, g: g.name, ""),
    "pci.bus_id": (lambda h, i, g: g.bus_id, ""),
    "gpu_bus_id": (lambda h, i, g: g.bus_id, ""),
    "pci.device_id": (lambda h, i, g: f"0x{g.pci_device_id.upper()}10DE", ""),
    "uuid": (lambda h, i, g: g.uuid, ""),
    "gpu_uuid": (lambda h, i, g: g.uuid, ""),
    "serial": (lambda h, i, g: g.serial, ""),
    "gpu_serial": (lambda h, i, g: g.serial, ""),
    "vbios_version": (lambda h, i, g: g.vbios, ""),
    "driver_version": (lambda h, i, g: h.driver.kernel_module_version, ""),
    "count": (lambda h, i, g: len(nvml.devices(h)), ""),
    "timestamp": (lambda h, i, g: time.strftime("%Y/%m/%d %H:%M:%S.000"), ""),
    "persistence_mode": (lambda h, i, g: _flag(g.persistence_mode), ""),
    "accounting.mode": (lambda h, i, g: "Disabled", ""),
    "display_mode": (lambda h, i, g: "Disabled", ""),
    "display_active": (lambda h, i, g: "Disabled", ""),
    "mig.mode.current": (lambda h, i, g: _mig(g), ""),
    "mig.mode.pending": (lambda h, i, g: _mig(g), ""),
    "ecc.mode.current": (lambda h, i, g: g.ecc_mode, ""),
    "ecc.mode.pending": (lambda h, i, g: g.ecc_mode, ""),
    "compute_mode": (lambda h, i, g: g.compute_mode, ""),
    "compute_cap": (lambda h, i, g: g.compute_capability, ""),
    "pstate": (lambda h, i, g: "P0", ""),
    "fan.speed": (lambda h, i, g: NA, ""),
    "temperature.gpu": (lambda h, i, g: g.temperature_c, ""),
    "temperature.memory": (lambda h, i, g: g.memory_temperature_c, ""),
    "power.draw": (lambda h, i, g: f"{g.power_draw_w:.2f}", " W"),
    "power.draw.instant": (lambda h, i, g: f"{g.power_draw_w:.2f}", " W"),
    "power.limit": (lambda h, i, g: f"{g.power_limit_w:.2f}", " W"),
    "enforced.power.limit": (lambda h, i, g: f"{g.power_limit_w:.2f}", " W"),
    "power.default_limit": (lambda h, i, g: f"{g.default_power_limit_w:.2f}", " W"),
    "power.max_limit": (lambda h, i, g: f"{g.default_power_limit_w:.2f}", " W"),
    "power.min_limit": (lambda h, i, g: f"{g.default_power_limit_w * 2 / 7:.2f}", " W"),
    "clocks.sm": (lambda h, i, g: g.sm_clock_mhz, " MHz"),
    "clocks.current.sm": (lambda h, i, g: g.sm_clock_mhz, " MHz"),
    "clocks.gr": (lambda h, i, g: g.sm_clock_mhz, " MHz"),
    "clocks.current.graphics": (lambda h, i, g: g.sm_clock_mhz, " MHz"),
    "clocks.mem": (lambda h, i, g: g.mem_clock_mhz, " MHz"),
    "clocks.current.memory": (lambda h, i, g: g.mem_clock_mhz, " MHz"),
    "clocks.max.sm": (lambda h, i, g: g.max_sm_clock_mhz, " MHz"),
    "clocks.max.gr": (lambda h, i, g: g.max_sm_clock_mhz, " MHz"),
    "clocks.max.graphics": (lambda h, i, g: g.max_sm_clock_mhz, " MHz"),
    "clocks.max.mem": (lambda h, i, g: g.mem_clock_mhz, " MHz"),
    "clocks.max.memory": (lambda h, i, g: g.mem_clock_mhz, " MHz"),
    "clocks.applications.graphics": (lambda h, i, g: g.max_sm_clock_mhz, " MHz"),
    "clocks_event_reasons.active": (lambda h, i, g: f"0x{g.clocks_event_reasons:016X}", ""),
    "clocks_throttle_reasons.active": (lambda h, i, g: f"0x{g.clocks_event_reasons:016X}", ""),
    "clocks_event_reasons.supported": (lambda h, i, g: "0x00000000000001FF", ""),
    "clocks_throttle_reasons.supported": (lambda h, i, g: "0x00000000000001FF", ""),
    "utilization.gpu": (lambda h, i, g: g.utilization_pct, " %"),
    "utilization.memory": (lambda h, i, g: min(g.utilization_pct, 60), " %"),
    "memory.total": (lambda h, i, g: g.memory_total_mib, " MiB"),
    "memory.reserved": (lambda h, i, g: RESERVED_MIB, " MiB"),
    "memory.used": (lambda h, i, g: sum(p.used_mib for p in g.processes), " MiB"),
    "memory.free": (lambda h, i, g: g.memory_total_mib - RESERVED_MIB - sum(p.used_mib for p in g.processes),
                    " MiB"),
    "pcie.link.gen.current": (lambda h, i, g: g.pcie_gen_current, ""),
    "pcie.link.gen.gpucurrent": (lambda h, i, g: g.pcie_gen_current, ""),
    "pcie.link.gen.max": (lambda h, i, g: g.pcie_gen_max, ""),
    "pcie.link.gen.gpumax": (lambda h, i, g: g.pcie_gen_max, ""),
    "pcie.link.gen.hostmax": (lambda h, i, g: g.pcie_gen_max, ""),
    "pcie.link.width.current": (lambda h, i, g: g.pcie_width_current, ""),
    "pcie.link.width.max": (lambda h, i, g: g.pcie_width_max, ""),
    "retired_pages.single_bit_ecc.count": (lambda h, i, g: NA, ""),
    "retired_pages.sbe": (lambda h, i, g: NA, ""),
    "retired_pages.double_bit.count": (lambda h, i, g: NA, ""),
    "retired_pages.dbe": (lambda h, i, g: NA, ""),
    "retired_pages.pending": (lambda h, i, g: NA, ""),
    "inforom.img": (_inforom("G520.0200.00.05"), ""),
    "inforom.oem": (_inforom("2.1"), ""),
    "inforom.ecc": (_inforom("7.16"), ""),
    "inforom.pwr": (lambda h, i, g: NA, ""),
}
for _kind in ("corrected", "uncorrected"):
    for _scope in ("volatile", "aggregate"):
        for _part in ("total", "dram", "sram", "device_memory", "register_file", "l1_cache", "l2_cache",
                      "texture_memory", "texture_shared", "cbu"):
            GPU_FIELDS[f"ecc.errors.{_kind}.{_scope}.{_part}"] = (_ecc(_kind, _scope, _part), "")
for _prefix in ("clocks_event_reasons", "clocks_throttle_reasons"):
    for _name, _bit in REASON_BITS.items():
        GPU_FIELDS[f"{_prefix}.{_name}"] = (_reason(_bit), "")

ProcGetter = Callable[[int, Gpu, GpuProcess], object]
APP_FIELDS: dict[str, tuple[ProcGetter, str]] = {
    "pid": (lambda i, g, p: p.pid, ""),
    "process_name": (lambda i, g, p: p.name, ""),
    "name": (lambda i, g, p: p.name, ""),
    "used_gpu_memory": (lambda i, g, p: p.used_mib, " MiB"),
    "used_memory": (lambda i, g, p: p.used_mib, " MiB"),
    "gpu_bus_id": (lambda i, g, p: g.bus_id, ""),
    "gpu_uuid": (lambda i, g, p: g.uuid, ""),
    "gpu_name": (lambda i, g, p: g.name, ""),
    "gpu_serial": (lambda i, g, p: g.serial, ""),
    "timestamp": (lambda i, g, p: time.strftime("%Y/%m/%d %H:%M:%S.000"), ""),
}

REMAP_FIELDS: dict[str, Getter] = {
    "gpu_bus_id": lambda h, i, g: g.bus_id,
    "gpu_uuid": lambda h, i, g: g.uuid,
    "remapped_rows.correctable": lambda h, i, g: g.remapped_correctable,
    "remapped_rows.uncorrectable": lambda h, i, g: g.remapped_uncorrectable,
    "remapped_rows.pending": lambda h, i, g: "Yes" if g.remap_pending else "No",
    "remapped_rows.failure": lambda h, i, g: "Yes" if g.remap_failure else "No",
    "remapped_rows.histogram.max": lambda h, i, g: 2560 - g.remapped_correctable - g.remapped_uncorrectable,
    "remapped_rows.histogram.high": lambda h, i, g: min(1, g.remapped_correctable + g.remapped_uncorrectable),
    "remapped_rows.histogram.partial": lambda h, i, g: 0,
    "remapped_rows.histogram.low": lambda h, i, g: 0,
    "remapped_rows.histogram.none": lambda h, i, g: 0,
}


def query(host: HostState, opts: dict[str, str]) -> ToolOutput:
    fmt = [f.strip() for f in opts.get("--format", "").split(",") if f.strip()]
    if "csv" not in fmt:
        return ToolOutput("", "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n", 2)
    header, units = "noheader" not in fmt, "nounits" not in fmt
    selected = nvml.select(host, opts.get("-i"))
    lost = [nvml.lost_message(g) for _, g in selected if g.fallen_off_bus]
    live = [(i, g) for i, g in selected if not g.fallen_off_bus]
    if "--query-gpu" in opts:
        fields = _fields(opts["--query-gpu"])
        bad = next((f for f in fields if f not in GPU_FIELDS), None)
        rows = [[_cell(GPU_FIELDS[f][0](host, i, g), GPU_FIELDS[f][1], units) for f in fields] for i, g in live] \
            if bad is None else []
        unit_of = {f: GPU_FIELDS[f][1] for f in fields if f in GPU_FIELDS}
    elif "--query-compute-apps" in opts:
        fields = _fields(opts["--query-compute-apps"])
        bad = next((f for f in fields if f not in APP_FIELDS), None)
        rows = [[_cell(APP_FIELDS[f][0](i, g, p), APP_FIELDS[f][1], units) for f in fields]
                for i, g in live for p in g.processes] if bad is None else []
        unit_of = {f: APP_FIELDS[f][1] for f in fields if f in APP_FIELDS}
    elif "--query-remapped-rows" in opts:
        fields = _fields(opts["--query-remapped-rows"])
        bad = next((f for f in fields if f not in REMAP_FIELDS), None)
        rows = [[str(REMAP_FIELDS[f](host, i, g)) for f in fields] for i, g in live] if bad is None else []
        unit_of = {}
    else:
        return ToolOutput("", "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n", 2)
    if bad is not None:
        return ToolOutput(f'Field "{bad}" is not a valid field to query.\n\n', "", 2)
    lines = []
    if header:
        lines.append(", ".join(f + (f" [{unit_of[f].strip()}]" if units and unit_of.get(f) else "") for f in fields))
    lines += [", ".join(row) for row in rows]
    lines += lost
    return ToolOutput("".join(line + "\n" for line in lines), "", nvml.RC_GPU_LOST if lost else 0)


def _fields(spec: str) -> list[str]:
    return [f.strip() for f in spec.split(",") if f.strip()]


def _cell(value: object, unit: str, units: bool) -> str:
    text = str(value)
    if text.startswith("["):
        return text
    return text + unit if units else text
