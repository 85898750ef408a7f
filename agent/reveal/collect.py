"""The Reveal telemetry collector: host metrics from procfs/sysfs, `nvidia-smi --query-gpu` and `perf stat` when
present, one row per interval, cumulative counters turned into per-second rates. Missing sources are skipped
and listed; the collector measures its own CPU time (its process and the tools it starts)."""

from __future__ import annotations

import os
import resource
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

GPU_FIELDS = ("utilization.gpu", "utilization.memory", "memory.used", "memory.total", "clocks.sm", "clocks.mem",
              "power.draw", "temperature.gpu", "ecc.errors.uncorrected.volatile.total", "pcie.link.width.current")
GPU_NAMES = ("util_pct", "mem_util_pct", "mem_used_mib", "mem_total_mib", "sm_clock_mhz", "mem_clock_mhz",
             "power_w", "temp_c", "ecc_uncorrected_errors", "pcie_width")
PERF_EVENTS = "cycles,instructions,cache-misses,branch-misses"
TOOL_TIMEOUT_S = 5.0


@dataclass
class Collection:
    frame: pd.DataFrame
    sources: list[str]
    missing: dict[str, str]  # source -> why it was skipped
    cpu_s: float  # CPU seconds spent by the collector and its children
    wall_s: float
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)

    @property
    def overhead_pct_of_core(self) -> float:
        return 100.0 * self.cpu_s / self.wall_s if self.wall_s else 0.0

    @property
    def overhead_pct_of_host(self) -> float:
        return self.overhead_pct_of_core / self.cpus


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def cpu_counters() -> dict[str, float]:
    """Per-core busy/total jiffies and the interrupt total from /proc/stat (cumulative)."""
    out: dict[str, float] = {}
    for line in (_read("/proc/stat") or "").splitlines():
        parts = line.split()
        if parts and parts[0].startswith("cpu"):
            vals = [float(v) for v in parts[1:]]
            idle = vals[3] + (vals[4] if len(vals) > 4 else 0.0)
            name = "cpu" if parts[0] == "cpu" else parts[0]
            out[f"{name}_total_j"], out[f"{name}_busy_j"] = sum(vals[:8]), sum(vals[:8]) - idle
        elif parts and parts[0] in ("intr", "ctxt"):
            out["irq_c" if parts[0] == "intr" else "ctxt_c"] = float(parts[1])
    return out


def gauges() -> dict[str, float]:
    out: dict[str, float] = {}
    mem = {}
    for line in (_read("/proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        if rest.split():
            mem[key] = float(rest.split()[0])
    if mem:
        out["mem_used_pct"] = 100.0 * (1 - mem.get("MemAvailable", 0) / max(mem.get("MemTotal", 1), 1))
        for key in ("Dirty", "Writeback", "Cached", "AnonPages"):
            out[f"mem_{key.lower()}_kb"] = mem.get(key, 0.0)
        out["swap_used_kb"] = mem.get("SwapTotal", 0.0) - mem.get("SwapFree", 0.0)
    freqs = []
    for cpu in sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*")):
        text = _read(str(cpu / "cpufreq" / "scaling_cur_freq"))
        if text and text.strip().isdigit():
            freqs.append(float(text) / 1000)
    if freqs:
        out["cpu_freq_mhz"] = sum(freqs) / len(freqs)
    load = (_read("/proc/loadavg") or "").split()
    if len(load) > 3:
        out["cpu_runnable"] = float(load[3].split("/")[0])
    return out


def io_counters() -> dict[str, float]:
    """Cumulative disk, network, VM and TCP counters (the rates are computed between samples)."""
    out: dict[str, float] = {}
    for line in (_read("/proc/diskstats") or "").splitlines():
        p = line.split()
        if len(p) >= 14 and not p[2].startswith(("loop", "ram", "dm-")) and not p[2][-1].isdigit():
            out[f"disk_{p[2]}_sectors_read_c"], out[f"disk_{p[2]}_sectors_written_c"] = float(p[5]), float(p[9])
            out[f"disk_{p[2]}_io_ms_c"] = float(p[12])
            out[f"disk_{p[2]}_queue"] = float(p[11])  # in flight: a gauge
    for line in (_read("/proc/net/dev") or "").splitlines()[2:]:
        name, _, rest = line.partition(":")
        name, p = name.strip(), rest.split()
        if name != "lo" and len(p) >= 12:
            out[f"net_{name}_rx_bytes_c"], out[f"net_{name}_tx_bytes_c"] = float(p[0]), float(p[8])
            out[f"net_{name}_drop_c"] = float(p[3]) + float(p[11])
    vm = dict(line.split() for line in (_read("/proc/vmstat") or "").splitlines() if len(line.split()) == 2)
    for key in ("pgmajfault", "pswpin", "pswpout", "pgpgout"):
        if key in vm:
            out[f"vm_{key}_c"] = float(vm[key])
    lines = [line.split() for line in (_read("/proc/net/snmp") or "").splitlines() if line.startswith("Tcp:")]
    if len(lines) == 2 and "RetransSegs" in lines[0]:
        out["tcp_retrans_c"] = float(lines[1][lines[0].index("RetransSegs")])
    return out


def nvidia_smi() -> dict[str, float] | None:
    try:
        proc = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    out: dict[str, float] = {}
    for index, line in enumerate(proc.stdout.strip().splitlines()):
        for name, value in zip(GPU_NAMES, (v.strip() for v in line.split(",")), strict=False):
            try:
                out[f"gpu{index}_{name}"] = float(value)
            except ValueError:
                continue  # "[N/A]" on GPUs without that sensor
    return out


def _rates(prev: dict[str, float], cur: dict[str, float], dt: float) -> dict[str, float]:
    out: dict[str, float] = {}
    cores = {k[:-len("_total_j")] for k in cur if k.endswith("_total_j")}
    for core in cores:
        total = cur[f"{core}_total_j"] - prev.get(f"{core}_total_j", cur[f"{core}_total_j"])
        busy = cur[f"{core}_busy_j"] - prev.get(f"{core}_busy_j", cur[f"{core}_busy_j"])
        out[f"{core}_busy_pct"] = 100.0 * busy / total if total > 0 else 0.0
    for key, value in cur.items():
        if key.endswith("_c") and key in prev:
            rate = max(value - prev[key], 0.0) / dt
            out[key[:-2] + ("_per_s" if not key.endswith(("drop_c", "retrans_c")) else "_events")] = rate
        elif not key.endswith(("_j", "_c")):
            out[key] = value
    return out


def collect(interval: float, duration: float, use_gpu: bool = True, use_perf: bool = True) -> Collection:
    missing: dict[str, str] = {}
    sources = ["procfs", "sysfs"]
    if not Path("/proc/stat").exists():
        raise RuntimeError("no /proc/stat: the collector needs Linux procfs")
    gpu = use_gpu and shutil.which("nvidia-smi") is not None and nvidia_smi() is not None
    if gpu:
        sources.append("nvidia-smi")
    else:
        missing["nvidia-smi"] = "disabled" if not use_gpu else "not installed or no GPU answered"
    perf_proc = None
    if use_perf and shutil.which("perf"):
        perf_proc = subprocess.Popen(["perf", "stat", "-a", "-x", ",", "-I", str(int(interval * 1000)), "-e",
                                      PERF_EVENTS], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        sources.append("perf")
    else:
        missing["perf"] = "disabled" if not use_perf else "perf not installed"
    host = socket.gethostname()
    rows: list[dict[str, float | str]] = []
    start_cpu = time.process_time()
    start = prev_t = time.monotonic()
    prev = {**cpu_counters(), **io_counters()}
    while time.monotonic() - start < duration:
        time.sleep(max(0.0, prev_t + interval - time.monotonic()))
        now = time.monotonic()
        cur = {**cpu_counters(), **io_counters()}
        row: dict[str, float | str] = {"timestamp": time.time(), "host": host,
                                       **_rates(prev, cur, now - prev_t), **gauges()}
        if gpu:
            row.update(nvidia_smi() or {})
        rows.append(row)
        prev, prev_t = cur, now
    wall = time.monotonic() - start
    frame = pd.DataFrame(rows)
    if perf_proc is not None:
        frame = _merge_perf(frame, perf_proc, missing)
        if "perf" in missing:
            sources.remove("perf")
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = time.process_time() - start_cpu + children.ru_utime + children.ru_stime
    return Collection(frame, sources, missing, cpu_s, wall)


def _merge_perf(frame: pd.DataFrame, proc: subprocess.Popen[str], missing: dict[str, str]) -> pd.DataFrame:
    """perf stat -I prints `time,count,unit,event,...` per interval on stderr; join them by interval index."""
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    per_tick: dict[float, dict[str, float]] = {}
    for line in err.splitlines():
        p = line.split(",")
        if len(p) >= 4 and p[1].replace(".", "", 1).isdigit():
            per_tick.setdefault(float(p[0]), {})[f"perf_{p[3].replace('-', '_')}"] = float(p[1])
    if not per_tick:
        missing["perf"] = "perf stat gave no counters (perf_event_paranoid or no PMU access)"
        return frame
    perf = pd.DataFrame([per_tick[t] for t in sorted(per_tick)][: len(frame)])
    return pd.concat([frame.reset_index(drop=True), perf], axis=1)


def write(frame: pd.DataFrame, path: Path) -> None:
    if path.suffix == ".csv" or path.name.endswith(".csv.gz"):
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
