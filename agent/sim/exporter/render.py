"""A simulated host's GPUs in dcgm-exporter's Prometheus exposition, field values from the host's state.

The layout is dcgm-exporter's GPU template (internal/pkg/rendermetrics/render_metrics.go): per field `# HELP`,
`# TYPE`, then one line per GPU with the labels gpu, UUID, pci_bus_id, device, modelName, Hostname (unless
--no-hostname), the label-type fields (DCGM_FI_DRIVER_VERSION) and, for DCGM_FI_DEV_XID_ERRORS, err_code and
err_msg (internal/pkg/collector/gpu_collector.go). Integers print as integers, doubles with six decimals (Go's %f).
A value DCGM cannot read is blank and dcgm-exporter writes no line for it: retired pages on GPUs that remap rows,
NVLink counters on GPUs without NVLink, every field but the Xid of a GPU fallen off the bus.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from agent.sim.state import Gpu, HostState
from agent.sim.tools import _nvml as nvml

HERE = Path(__file__).parent
DEFAULT_COUNTERS = HERE / "counters.csv"
TYPES = ("gauge", "counter", "label")
UNKNOWN_XID = "Unknown Error"  # dcgm-exporter's text for a code beyond its table


class CountersError(ValueError):
    """A collectors file the simulator cannot serve (bad line, or a field it does not render)."""


@dataclass(frozen=True)
class Counter:
    field: str
    kind: str  # gauge | counter | label
    help: str


Value = int | float | str | None  # None: blank (DCGM cannot read it), no line written
Reader = Callable[[HostState, Gpu, float], Value]


def _used_mib(gpu: Gpu) -> int:
    return sum(p.used_mib for p in gpu.processes)


def last_xid(host: HostState, gpu: Gpu) -> int:
    """The newest Xid the driver raised for this GPU since boot (DCGM's latest value of the Xid field), 0: none."""
    newest: tuple[float, int] | None = None
    for line in host.journal:
        if line.ident != "kernel" or line.age_s > host.uptime_s:
            continue
        match = nvml.XID_RE.search(line.text)
        if match and nvml.same_bdf(match.group(1), gpu.bus_id) and (newest is None or line.age_s < newest[0]):
            newest = (line.age_s, int(match.group(2)))
    return newest[1] if newest else 0


def _nvlink(value: Callable[[Gpu], int]) -> Reader:
    return lambda host, gpu, _: value(gpu) if gpu.nvlink else None


def _energy_mj(host: HostState, gpu: Gpu, elapsed_s: float) -> int:
    # a counter since boot that keeps rising while the exporter runs, at the GPU's present draw
    return int(gpu.power_draw_w * (host.uptime_s + elapsed_s) * 1000)


# DCGM field -> how the simulated state answers it
FIELDS: dict[str, Reader] = {
    "DCGM_FI_DEV_SM_CLOCK": lambda h, g, _: g.sm_clock_mhz,
    "DCGM_FI_DEV_MEM_CLOCK": lambda h, g, _: g.mem_clock_mhz,
    "DCGM_FI_DEV_MEMORY_TEMP": lambda h, g, _: g.memory_temperature_c,
    "DCGM_FI_DEV_GPU_TEMP": lambda h, g, _: g.temperature_c,
    "DCGM_FI_DEV_POWER_USAGE": lambda h, g, _: float(g.power_draw_w),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": _energy_mj,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": lambda h, g, _: g.pcie_replays,
    "DCGM_FI_DEV_GPU_UTIL": lambda h, g, _: g.utilization_pct,
    "DCGM_FI_DEV_XID_ERRORS": lambda h, g, _: last_xid(h, g),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": lambda h, g, _: g.clocks_event_reasons,
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": lambda h, g, _: g.clocks_event_reasons,  # its name before DCGM 3.3
    "DCGM_FI_DEV_FB_FREE": lambda h, g, _: g.memory_total_mib - _used_mib(g),
    "DCGM_FI_DEV_FB_USED": lambda h, g, _: _used_mib(g),
    # DRAM and SRAM together, as DCGM's *_TOTAL fields count every memory location
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": lambda h, g, _: g.ecc_volatile_dram_corrected + g.ecc_volatile_sram_corrected,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": lambda h, g, _: g.ecc_volatile_dram_uncorrected + g.ecc_volatile_sram_uncorrected,
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": lambda h, g, _: g.ecc_aggregate_dram_corrected + g.ecc_aggregate_sram_corrected,
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": lambda h, g, _: (g.ecc_aggregate_dram_uncorrected
                                                      + g.ecc_aggregate_sram_uncorrected),
    # A100 and newer remap rows instead of retiring pages: DCGM reports these blank
    "DCGM_FI_DEV_RETIRED_SBE": lambda h, g, _: None,
    "DCGM_FI_DEV_RETIRED_DBE": lambda h, g, _: None,
    "DCGM_FI_DEV_RETIRED_PENDING": lambda h, g, _: None,
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": _nvlink(lambda g: g.nvlink_crc_errors),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": _nvlink(lambda g: 0),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": _nvlink(lambda g: g.nvlink_replay_errors),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": _nvlink(lambda g: 0),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": lambda h, g, _: g.remapped_uncorrectable,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": lambda h, g, _: g.remapped_correctable,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": lambda h, g, _: int(g.remap_failure),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": lambda h, g, _: int(g.remap_pending),
    "DCGM_FI_DRIVER_VERSION": lambda h, g, _: h.driver.version,
}


def read_counters(path: Path = DEFAULT_COUNTERS) -> list[Counter]:
    """A dcgm-exporter collectors file: `FIELD, type, help` per line, `#` comments; every field must be one the
    simulator renders (a real exporter would serve it; a simulated one must not pretend)."""
    counters: list[Counter] = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) != 3:
            raise CountersError(f"{path}:{number}: expected `FIELD, type, help`, got {line!r}")
        field, kind, text = parts
        if kind not in TYPES:
            raise CountersError(f"{path}:{number}: type {kind!r} is not one of {', '.join(TYPES)}")
        if field not in FIELDS:
            raise CountersError(f"{path}:{number}: the simulator does not render {field}; it renders "
                                f"{', '.join(sorted(FIELDS))}")
        counters.append(Counter(field, kind, text))
    if not any(c.kind != "label" for c in counters):
        raise CountersError(f"{path}: no metric field to serve")
    return counters


@cache
def xid_messages() -> dict[int, str]:
    with (HERE / "xid_messages.csv").open(newline="", encoding="utf-8") as handle:
        return {int(row["code"]): row["err_msg"] for row in csv.DictReader(handle)}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _format(value: int | float | str) -> str:
    if isinstance(value, float):
        return f"{value:f}"
    return str(value)


def render(host: HostState, counters: list[Counter], *, hostname: bool = True, elapsed_s: float = 0.0) -> str:
    """The exposition text dcgm-exporter would serve for this host now (`elapsed_s`: since the exporter began)."""
    gpus = list(enumerate(nvml.devices(host)))
    labels: dict[int, str] = {}
    for index, gpu in gpus:
        pairs = [f'gpu="{index}"', f'UUID="{gpu.uuid}"', f'pci_bus_id="{gpu.bus_id}"', f'device="nvidia{index}"',
                 f'modelName="{_escape(gpu.name)}"']
        if hostname:
            pairs.append(f'Hostname="{_escape(host.hostname)}"')
        for c in sorted((c for c in counters if c.kind == "label"), key=lambda c: c.field):
            value = FIELDS[c.field](host, gpu, elapsed_s)
            if value is not None:
                pairs.append(f'{c.field}="{_escape(str(value))}"')
        labels[index] = ",".join(pairs)
    out: list[str] = []
    for counter in counters:
        if counter.kind == "label":
            continue
        lines = []
        for index, gpu in gpus:
            if gpu.fallen_off_bus and counter.field != "DCGM_FI_DEV_XID_ERRORS":
                continue  # DCGM reads nothing from a GPU that left the bus; the driver's Xid event still arrives
            value = FIELDS[counter.field](host, gpu, elapsed_s)
            if value is None:
                continue
            extra = ""
            if counter.field == "DCGM_FI_DEV_XID_ERRORS":
                code = int(value)
                extra = f',err_code="{code}",err_msg="{_escape(xid_messages().get(code, UNKNOWN_XID))}"'
            lines.append(f"{counter.field}{{{labels[index]}{extra}}} {_format(value)}")
        if lines:
            out += [f"# HELP {counter.field} {counter.help}", f"# TYPE {counter.field} {counter.kind}", *lines]
    return "\n".join(out) + "\n" if out else ""


def driver_error(host: HostState) -> str | None:
    """Why DCGM cannot start on this host (no driver, NVML failing), or None."""
    if not host.driver.installed:
        return "NVIDIA driver not installed: DCGM cannot start"
    problem = nvml.driver_error(host)
    return problem[0].strip() if problem else None
