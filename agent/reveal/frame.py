"""Telemetry input: load a CSV/Parquet file into per-host regular grids, and name each metric's category and
subsystem (Reveal §4.2: dynamic signals, error/event counters, static metrics)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

SUBSYSTEMS = ("cpu", "gpu", "memory", "network", "storage")
DEFAULT_HOST = "local"

# First match wins, so the specific prefixes (netpacket, diskbusy, vm_) come before generic words (busy, read).
SUBSYSTEM_PATTERNS: tuple[tuple[str, str], ...] = (
    ("gpu", r"^gpu|nvidia|^sm_|_sm_clock|pcie|nvlink|ecc|xid"),
    ("network", r"^net|netpacket|tcp|retrans|udp|^ib\d|^eth|^rx|^tx|_rx_|_tx_|drop|icmp"),
    ("storage", r"^disk|diskbusy|sector|^io_|_io_|^sd[a-z]|nvme|^blk|queue_depth|await"),
    ("memory", r"^mem|swap|dirty|writeback|pgfault|pgmaj|pgpg|^vm_|hugepage|slab|oom|cached|memfree"),
    ("cpu", r"cpu|irq|^proc_|runnable|blocked|pswitch|fork|ctxt|^load|ipc|cycles|instructions|stall|freq|"
            r"cache_miss|branch"),
)
# error and event counters are summed over a window (their burstiness is the signal)
COUNTER_PATTERN = re.compile(r"err|drop|retrans|ecc|xid|fault|discard|overrun|timeout|reset|throttle_events|"
                             r"_events?$|_count$", re.I)
# static or slowly varying sensors and sizes: excluded from single-host detection, kept for cross-host comparison
CUMULATIVE_PATTERN = re.compile(r"_total$|_cumulative$", re.I)
STATIC_PATTERN = re.compile(r"temp|total_|_max$|capacity|pcie_width|pcie_gen|power_limit|size|mtu|"
                            r"clock_max|_limit", re.I)


class FrameError(ValueError):
    """The telemetry file cannot be analysed (missing, unreadable, no timestamp, no numeric metric)."""


@dataclass
class MetricInfo:
    name: str
    subsystem: str  # one of SUBSYSTEMS, or "other" for names no pattern knows
    category: str  # dynamic | counter | static


@dataclass
class Telemetry:
    """One regular grid per host: `values[host]` is (samples, metrics) in `metrics` order; NaN where missing."""

    interval_s: float
    metrics: list[MetricInfo]
    hosts: list[str]
    times: dict[str, np.ndarray]
    values: dict[str, np.ndarray]
    skipped_columns: list[str] = field(default_factory=list)
    differenced: list[str] = field(default_factory=list)  # cumulative counters turned into per-sample deltas


def subsystem_of(name: str) -> str:
    low = name.lower()
    for subsystem, pattern in SUBSYSTEM_PATTERNS:
        if re.search(pattern, low):
            return subsystem
    return "other"


def category_of(name: str, column: np.ndarray) -> str:
    if COUNTER_PATTERN.search(name):
        return "counter"
    finite = column[np.isfinite(column)]
    if STATIC_PATTERN.search(name) or finite.size == 0 or np.ptp(finite) == 0:
        return "static"
    return "dynamic"


def read_table(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise FrameError(f"{path}: no such file")
    suffixes = "".join(path.suffixes).lower()
    try:
        if ".parquet" in suffixes or suffixes.endswith(".pq"):
            return pd.read_parquet(path)
        if ".csv" in suffixes:
            return pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise FrameError(f"{path}: unreadable: {str(exc).splitlines()[0]}") from None
    raise FrameError(f"{path}: unknown format {suffixes or '(no suffix)'}; give a .csv, .csv.gz or .parquet file")


def parse_timestamps(column: pd.Series) -> np.ndarray:
    """Epoch seconds (numbers) or ISO 8601 strings, as float epoch seconds."""
    if pd.api.types.is_numeric_dtype(column):
        return column.to_numpy(dtype=float)
    if pd.api.types.is_datetime64_any_dtype(column):
        stamps = pd.to_datetime(column, utc=True)
    else:
        stamps = pd.to_datetime(column, utc=True, errors="coerce", format="ISO8601")
        if stamps.isna().any():
            bad = column[stamps.isna()].iloc[0]
            raise FrameError(f"timestamp {bad!r} is neither epoch seconds nor ISO 8601")
    return (stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy()


def load(path: Path | str, hosts: list[str] | None = None) -> Telemetry:
    return from_frame(read_table(Path(path)), hosts, source=str(path))


def from_frame(df: pd.DataFrame, hosts: list[str] | None = None, source: str = "input") -> Telemetry:
    if "timestamp" not in df.columns:
        raise FrameError(f"{source}: no 'timestamp' column (columns: {', '.join(map(str, df.columns[:8]))} ...)")
    if df.empty:
        raise FrameError(f"{source}: no rows")
    df = df.copy()
    df["timestamp"] = parse_timestamps(df["timestamp"])
    df = df[np.isfinite(df["timestamp"])]
    df["host"] = df["host"].astype(str) if "host" in df.columns else DEFAULT_HOST
    if hosts:
        unknown = sorted(set(hosts) - set(df["host"]))
        if unknown:
            raise FrameError(f"{source}: host(s) {', '.join(unknown)} not in the file "
                             f"(hosts: {', '.join(sorted(df['host'].unique()))})")
        df = df[df["host"].isin(hosts)]
    skipped, numeric = [], []
    for col in df.columns:
        if col in ("timestamp", "host"):
            continue
        numeric_col = pd.api.types.is_numeric_dtype(df[col]) and not pd.api.types.is_bool_dtype(df[col])
        if not numeric_col or df[col].notna().sum() == 0:
            skipped.append(str(col))
        else:
            numeric.append(col)
    if not numeric:
        raise FrameError(f"{source}: no numeric metric column (skipped: {', '.join(skipped) or 'none'})")
    deltas = df.groupby("host")["timestamp"].diff().dropna()
    deltas = deltas[deltas > 0]
    if deltas.empty:
        raise FrameError(f"{source}: fewer than two distinct timestamps per host")
    interval = float(np.median(deltas))
    host_names = sorted(df["host"].unique())
    times: dict[str, np.ndarray] = {}
    values: dict[str, np.ndarray] = {}
    for host in host_names:
        part = df[df["host"] == host].sort_values("timestamp")
        part = part.drop_duplicates("timestamp", keep="last")
        times[host], values[host] = _regular_grid(part["timestamp"].to_numpy(),
                                                  part[numeric].to_numpy(dtype=float), interval)
    differenced = _difference_cumulative(numeric, values)
    stacked = np.vstack([values[h] for h in host_names])
    metrics = [MetricInfo(str(name), subsystem_of(str(name)), category_of(str(name), stacked[:, i]))
               for i, name in enumerate(numeric)]
    return Telemetry(interval, metrics, host_names, times, values, skipped, differenced)


def _regular_grid(stamps: np.ndarray, data: np.ndarray, interval: float) -> tuple[np.ndarray, np.ndarray]:
    """Snap samples onto a grid of the median interval; a gap of up to two intervals is filled with the last
    value (nmon and procfs samplers skip beats), longer gaps stay NaN so windows over them are dropped."""
    start = stamps[0]
    slots = np.rint((stamps - start) / interval).astype(int)
    grid = np.full((slots[-1] + 1, data.shape[1]), np.nan)
    grid[slots] = data
    filled = pd.DataFrame(grid).ffill(limit=2).to_numpy(dtype=float, copy=True)
    return start + np.arange(grid.shape[0]) * interval, filled


def _difference_cumulative(names: list[str], values: dict[str, np.ndarray]) -> list[str]:
    """Counter-named columns that never decrease on any host are cumulative (procfs style): their level says
    nothing, their per-sample increase does. Only counter names qualify, so a leaking gauge stays a level."""
    out = []
    for i, name in enumerate(names):
        if not (COUNTER_PATTERN.search(name) or CUMULATIVE_PATTERN.search(name)):
            continue
        series = [v[:, i][np.isfinite(v[:, i])] for v in values.values()]
        if any(s.size < 3 for s in series):
            continue
        if all(np.all(np.diff(s) >= 0) for s in series) and any(s[-1] > s[0] for s in series):
            for v in values.values():
                v[1:, i] = np.diff(v[:, i])
                v[0, i] = np.nan
            out.append(name)
    return out
