"""What each dcgm-exporter metric says about a GPU, and how loud: the table the Prometheus pre-triage reads.

Metric names, types and meanings are dcgm-exporter's (etc/default-counters.csv; DCGM's field ids in go-dcgm); the
thresholds are those our own checks use on the same quantities (verification_scripts: pcie_link REPLAYS_WARN,
nvlink_status CRC_WARN, clocks_thermal_power MEMORY_TEMP_LIMIT and its reason bits, the profile's temp_limit_c).
A counter says how many, not when: the pre-triage dates it by its samples (rose inside the incident's window, flat
since before it, or no samples before it to tell).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MEMORY_TEMP_LIMIT_C = 95.0  # clocks_thermal_power.MEMORY_TEMP_LIMIT
# clock event reason bits (DCGM_CLOCKS_EVENT_REASON_*; dcgm-exporter clock_events_collector.go)
SW_POWER_CAP, HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, HW_POWER_BRAKE = 0x4, 0x8, 0x20, 0x40, 0x80
REASON_NAMES = {SW_POWER_CAP: "power_cap", HW_SLOWDOWN: "hw_slowdown", SW_THERMAL: "sw_thermal",
                HW_THERMAL: "hw_thermal", HW_POWER_BRAKE: "hw_power_brake"}
XID = "DCGM_FI_DEV_XID_ERRORS"
REASONS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")  # the latter before DCGM 3.3
GPU_TEMP, MEMORY_TEMP, POWER = "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_POWER_USAGE"


@dataclass(frozen=True)
class CounterRule:
    """A monotonic count. `rise_*`: how much it must rise inside the window to be WARN or FAIL; `level_*`: the
    same for a count that no sample dates (the series starts inside the window); a count flat since before the
    window is history (INFO)."""

    metric: str
    id: str
    what: str
    labels: tuple[str, ...]
    rise_warn: float = 1.0
    rise_fail: float | None = None
    level_warn: float | None = 1.0
    level_fail: float | None = None

    def evidence_level(self) -> float:
        """The smallest undated count that is evidence (a flat count at least this high is an old problem)."""
        return min((t for t in (self.level_fail, self.level_warn) if t is not None), default=math.inf)

    def severity(self, amount: float, dated: bool) -> str:
        fail, warn = (self.rise_fail, self.rise_warn) if dated else (self.level_fail, self.level_warn)
        if fail is not None and amount >= fail:
            return "FAIL"
        if warn is not None and amount >= warn:
            return "WARN"
        return "INFO"


@dataclass(frozen=True)
class FlagRule:
    """A state (a 0/1 gauge, or a count of things waiting): set at any sample of the window."""

    metric: str
    id: str
    what: str
    labels: tuple[str, ...]
    severity: str


UNCORRECTABLE = ("GPU.MEMORY.UNCORRECTABLE_ECC",)
NVLINK = ("INTERCONNECT_NETWORKING.NVLINK.LINK_HARDWARE_FAULT",)
PCIE = ("INTERCONNECT_NETWORKING.PCIE.RISER_OR_SLOT_FAULT",)

COUNTERS: tuple[CounterRule, ...] = (
    CounterRule("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc_dbe", "uncorrectable (double-bit) ECC errors since the "
                "driver loaded", UNCORRECTABLE, rise_fail=1, level_fail=1),
    CounterRule("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "ecc_dbe_lifetime", "uncorrectable ECC errors over the GPU's life",
                UNCORRECTABLE, rise_fail=1),
    CounterRule("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc_sbe", "corrected (single-bit) ECC errors since the driver "
                "loaded", ("GPU.MEMORY",), rise_warn=math.inf, level_warn=None),
    CounterRule("DCGM_FI_DEV_RETIRED_DBE", "retired_pages_dbe", "pages retired for double-bit errors",
                UNCORRECTABLE, rise_fail=1),
    CounterRule("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "remapped_rows_uncorrectable", "rows remapped for "
                "uncorrectable errors", UNCORRECTABLE, level_warn=None),
    CounterRule("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "remapped_rows_correctable", "rows remapped for correctable "
                "errors", ("GPU.MEMORY.ROW_REMAP_PENDING",), rise_warn=math.inf, level_warn=None),
    CounterRule("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "nvlink_crc_flit", "NVLink flow-control CRC errors",
                NVLINK, rise_warn=100, level_warn=100),
    CounterRule("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "nvlink_crc_data", "NVLink data CRC errors",
                NVLINK, rise_warn=100, level_warn=100),
    CounterRule("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "nvlink_replay", "NVLink replays", NVLINK,
                rise_warn=100, level_warn=100),
    CounterRule("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "nvlink_recovery", "NVLink link recoveries",
                NVLINK),
    CounterRule("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "pcie_replay", "PCIe replays (link errors retried)", PCIE,
                rise_warn=100, level_warn=1000),
)

FLAGS: tuple[FlagRule, ...] = (
    FlagRule("DCGM_FI_DEV_ROW_REMAP_FAILURE", "row_remap_failure", "row remapping failed (no spare rows left)",
             ("GPU.MEMORY.ROW_REMAP_FAILURE",), "FAIL"),
    FlagRule("DCGM_FI_DEV_ROW_REMAP_PENDING", "row_remap_pending", "a row remap is pending (applies at the next GPU "
             "reset)", ("GPU.MEMORY.ROW_REMAP_PENDING",), "WARN"),
    # a count, but a state like the pending remap: pages wait for the next GPU reset to be retired
    FlagRule("DCGM_FI_DEV_RETIRED_PENDING", "retired_pages_pending", "pages are pending retirement (a GPU reset "
             "retires them)", ("GPU.MEMORY.ROW_REMAP_PENDING",), "WARN"),
)

# the metrics whose absence leaves a question open: said per host when its exporter does not export them
WATCHED = (XID, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
           "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", REASONS[0], GPU_TEMP)


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in REASON_NAMES.items() if mask & bit]


def reason_finding(mask: int) -> tuple[str, str, tuple[str, ...]] | None:
    """(id, severity, labels) for the clock event reasons seen, or None when they say nothing is wrong (idle, the
    software power cap of a loaded GPU)."""
    if mask & (SW_THERMAL | HW_THERMAL):
        return "thermal_slowdown", "WARN", ("GPU.THERMAL.OVERHEATING_THROTTLE",)
    if mask & HW_POWER_BRAKE:
        return "power_brake", "WARN", ("GPU.POWER.PSU_INSUFFICIENT",)
    if mask & HW_SLOWDOWN:
        return "hw_slowdown", "WARN", ("GPU.THERMAL", "GPU.POWER")
    return None
