"""Labelled anomalies injected into real background telemetry (long format: timestamp, host, one column per
metric, nmon names as in the Exathlon traces) for the Reveal benchmark and tests.

Each kind changes the metrics a real occurrence would move, with the physics kept plausible: a saturated CPU
leaves no idle time, a leak takes free memory away at a steady rate and faults in new pages, a stalled disk is
busy but moves nothing while tasks block on it, a lossy link backs off (goodput and packets down) while it
retransmits and drops, and a slow host does the same work at a fraction of its peers' pace.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Injection:
    kind: str
    host: str
    start: float
    end: float
    subsystem: str  # what attribution should name ("imbalance" for a slow host: it is slow relative to peers)


Injector = Callable[[pd.DataFrame, np.ndarray, np.random.Generator], None]


def _cols(df: pd.DataFrame, *prefixes: str) -> list[str]:
    return [c for c in df.columns if any(c.startswith(p) for p in prefixes)]


def cpu_saturation(df: pd.DataFrame, rows: np.ndarray, rng: np.random.Generator) -> None:
    n = int(rows.sum())
    user = rng.uniform(88, 96, n)
    df.loc[rows, "CPU_ALL_User%"] = user
    df.loc[rows, "CPU_ALL_Sys%"] = 100 - user - rng.uniform(0.5, 2, n)
    df.loc[rows, "CPU_ALL_Idle%"] = rng.uniform(0, 1, n)
    df.loc[rows, "PROC_Runnable"] = df.loc[rows, "PROC_Runnable"] + rng.poisson(40, n)
    df.loc[rows, "PROC_pswitch"] = df.loc[rows, "PROC_pswitch"] * rng.uniform(2.5, 3.5, n)


def memory_leak(df: pd.DataFrame, rows: np.ndarray, rng: np.random.Generator) -> None:
    n = int(rows.sum())
    rate_mb = rng.uniform(400, 800)  # MB/s of anonymous memory never freed
    leaked = rate_mb * np.arange(1, n + 1)
    df.loc[rows, "MEM_memfree"] = df.loc[rows, "MEM_memfree"] - leaked
    df.loc[rows, "MEM_active"] = df.loc[rows, "MEM_active"] + leaked
    # first touch of each 4 KiB page is a minor fault
    df.loc[rows, "VM_pgfault"] = df.loc[rows, "VM_pgfault"] + rate_mb * 256 * rng.uniform(0.9, 1.1, n)


def disk_stall(df: pd.DataFrame, rows: np.ndarray, rng: np.random.Generator) -> None:
    n = int(rows.sum())
    for disk in ("sde", "sdi"):
        df.loc[rows, f"DISKBUSY_{disk}"] = rng.uniform(98, 100, n)
        df.loc[rows, f"DISKWRITE_{disk}"] = df.loc[rows, f"DISKWRITE_{disk}"] * 0.02
    df.loc[rows, "DISKREAD_sde"] = df.loc[rows, "DISKREAD_sde"] * 0.02
    df.loc[rows, "DISKXFER_sde"] = rng.uniform(0, 1, n)
    df.loc[rows, "PROC_Blocked"] = df.loc[rows, "PROC_Blocked"] + rng.poisson(6, n)
    df.loc[rows, "CPU_ALL_Wait%"] = df.loc[rows, "CPU_ALL_Wait%"] + rng.uniform(3, 6, n)


RETRANS = "tcp_retrans_events"  # the collector's names (collect.py); Exathlon's nmon traces lack both counters
DROPS = "net_ib0_drop_events"
BACKGROUND_LOSS = 1e-3  # retransmitted or dropped fraction of packets on a healthy link


def with_loss_counters(df: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """Add the retransmission and drop counters a real collector records, with a healthy link's background:
    a small Poisson fraction of the packets actually sent and received (so they burst with the traffic)."""
    out = df.copy()
    out[RETRANS] = rng.poisson(BACKGROUND_LOSS * out["NETPACKET_ib0-write/s"].clip(lower=0)).astype(float)
    out[DROPS] = rng.poisson(BACKGROUND_LOSS * out["NETPACKET_ib0-read/s"].clip(lower=0)).astype(float)
    return out


def network_drop(df: pd.DataFrame, rows: np.ndarray, rng: np.random.Generator) -> None:
    """A lossy link (2-8 % loss): TCP backs off, so goodput and the packet rate fall together (throughput goes
    as 1/sqrt(loss)), lost segments are retransmitted and the NIC counts drops. Open connections retransmit on
    their timeout even when little is being sent, hence a floor of a few retransmissions per second."""
    n = int(rows.sum())
    loss = rng.uniform(0.02, 0.08)
    goodput = rng.uniform(0.2, 0.5)
    sent = df.loc[rows, "NETPACKET_ib0-write/s"].to_numpy(dtype=float)
    received = df.loc[rows, "NETPACKET_ib0-read/s"].to_numpy(dtype=float)
    for col in _cols(df, "NET_ib0", "NETPACKET_ib0"):
        df.loc[rows, col] = df.loc[rows, col] * goodput * rng.uniform(0.8, 1.2, n)
    timeouts = rng.uniform(1, 4) / rng.uniform(0.2, 1.0)  # connections / RTO seconds
    df.loc[rows, RETRANS] = df.loc[rows, RETRANS] + rng.poisson(loss * sent + timeouts)
    df.loc[rows, DROPS] = df.loc[rows, DROPS] + rng.poisson(loss * received)


def host_slow(df: pd.DataFrame, rows: np.ndarray, rng: np.random.Generator) -> None:
    """A throttled host: each task takes ~3x the CPU time, its run queue grows, and it moves data at a third
    of the rate while its peers wait on it."""
    n = int(rows.sum())
    factor = rng.uniform(2.5, 3.5)
    busy = df.loc[rows, ["CPU_ALL_User%", "CPU_ALL_Sys%"]].to_numpy() * factor + rng.uniform(8, 12, (n, 1))
    df.loc[rows, ["CPU_ALL_User%", "CPU_ALL_Sys%"]] = np.minimum(busy, [85, 10])
    df.loc[rows, "PROC_Runnable"] = df.loc[rows, "PROC_Runnable"] + rng.poisson(8, n)
    for col in _cols(df, "NET_", "NETPACKET_", "DISKWRITE", "DISKREAD", "DISKXFER"):
        df.loc[rows, col] = df.loc[rows, col] / factor
    df.loc[rows, "CPU_ALL_Idle%"] = 100 - df.loc[rows, ["CPU_ALL_User%", "CPU_ALL_Sys%", "CPU_ALL_Wait%"]].sum(axis=1)


KINDS: dict[str, tuple[Injector, str]] = {
    "cpu_saturation": (cpu_saturation, "cpu"),
    "memory_leak": (memory_leak, "memory"),
    "disk_stall": (disk_stall, "storage"),
    "network_drop": (network_drop, "network"),
    "host_slow": (host_slow, "imbalance"),
}


def inject(df: pd.DataFrame, kind: str, host: str, start: float, duration: float,
           rng: np.random.Generator) -> tuple[pd.DataFrame, Injection]:
    """A copy of `df` with one anomaly of `kind` on `host` over [start, start + duration)."""
    if kind not in KINDS:
        raise KeyError(f"unknown anomaly kind {kind!r}; valid: {', '.join(KINDS)}")
    injector, subsystem = KINDS[kind]
    if kind == "network_drop" and RETRANS not in df.columns:
        raise ValueError(f"{kind} needs the loss counters of the background: add them with with_loss_counters")
    out = df.copy()
    metric_cols = [c for c in cols_of(out) if pd.api.types.is_numeric_dtype(out[c])]
    out[metric_cols] = out[metric_cols].astype(float)  # integer counters receive fractional rates
    rows = ((out["host"] == host) & (out["timestamp"] >= start) & (out["timestamp"] < start + duration)).to_numpy()
    if not rows.any():
        raise ValueError(f"no samples of host {host} in [{start}, {start + duration})")
    injector(out, rows, rng)
    return out, Injection(kind, host, start, start + duration, subsystem)


def cols_of(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if c not in ("timestamp", "host")]


def exathlon_long(path: str) -> pd.DataFrame:
    """The wide Exathlon node file (t, nodeN_METRIC...) as long format (timestamp, host, METRIC...)."""
    wide = pd.read_csv(path)
    parts = []
    for node in sorted({c.split("_", 1)[0] for c in wide.columns if c.startswith("node")}):
        cols = [c for c in wide.columns if c.startswith(node + "_")]
        part = wide[["t", *cols]].rename(columns={"t": "timestamp", **{c: c[len(node) + 1:] for c in cols}})
        part.insert(1, "host", node)
        # Exathlon marks a node's missing nmon snapshot with -1 in every metric: a gap, not a value
        parts.append(part[~(part[cols_of(part)] == -1).all(axis=1)])
    return pd.concat(parts, ignore_index=True)
