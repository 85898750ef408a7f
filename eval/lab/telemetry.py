"""Per-node telemetry of a lab job, and the anomalies that telemetry shows but the job's logs may not (issue 36).

The lab's nodes share one kernel, so the host-wide /proc/stat, /proc/meminfo and /proc/net/dev are the same for
every node; what tells one node from another is what a container-level collector reads: each node runs in cgroups
of its own (cpu, cpuacct, memory, blkio), so its CPU time, throttling, memory and page faults are the node's own;
its processes' scheduler run-queue delay, context switches and storage bytes come from /proc/<pid>; its TCP
traffic and retransmissions from `ss -tinp` on the sockets its processes own. One row per node every INTERVAL_S
seconds, cumulative counters as per-second rates, written as a long CSV (timestamp, host, metrics...) that
`aidai reveal detect` reads.

Anomalies (applied to one node for `duration_s`, from the moment the job has logged `after_steps` step lines):
cpu_contention (a busy process in the node's cgroups), cpu_quota (a CFS quota of a twentieth of a core on the
node), mem_pressure (the node's memory limit just above its resident set: the node's data cache no longer fits, so
its reads go to disk; the OOM killer is held off, so an allocation past the limit waits instead of killing),
disk_contention (a process on the node writing its disk with O_DIRECT), packet_loss (iptables drops a random 20 %
of the packets the node sends, as `tc netem loss` on its interface would: real loss, but no delay — this kernel has
no `tc netem`, so delay is not in the lab) and noisy_neighbour (a process on the node churning memory: allocating,
touching and freeing 300 MB in a loop). "none": no anomaly.
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import ClassVar

CGROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpu", "cpuacct", "memory", "blkio")
INTERVAL_S = 0.5
KINDS = ("cpu_contention", "cpu_quota", "mem_pressure", "disk_contention", "packet_loss", "noisy_neighbour")
# the subsystem a right attribution names
SUBSYSTEM = {"cpu_contention": "cpu", "cpu_quota": "cpu", "mem_pressure": "memory", "disk_contention": "storage",
             "packet_loss": "network", "noisy_neighbour": "memory"}
QUOTA_US, PERIOD_US = 5_000, 100_000  # a twentieth of a core: a node's rank needs about a sixth
TICK = os.sysconf("SC_CLK_TCK")
_SS_RETRANS = re.compile(r"retrans:\d+/(\d+)")
_SS_FIELD = re.compile(r"\b(bytes_sent|bytes_received|segs_out|segs_in):(\d+)")
_SS_PID = re.compile(r"pid=(\d+)")


def groups_of(tag: str) -> dict[str, Path]:
    return {c: CGROOT / c / tag for c in CONTROLLERS}


def make_groups(tag: str) -> dict[str, Path]:
    groups = groups_of(tag)
    for path in groups.values():
        path.mkdir(exist_ok=True)
    return groups


def remove_groups(tag: str) -> None:
    for path in groups_of(tag).values():
        remove_cgroup(path)


def remove_cgroup(path: Path) -> None:
    for _ in range(50):
        if not path.exists():
            break
        try:
            path.rmdir()
        except OSError:  # the killed processes leave the cgroup a moment later
            time.sleep(0.2)


def join_script(groups: dict[str, Path]) -> str:
    """Shell lines that move the shell (and so what it execs and forks) into the node's cgroups."""
    return "".join(f"echo $$ > {p}/cgroup.procs && " for p in groups.values())


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _kv(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            with contextlib.suppress(ValueError):
                out[parts[0]] = float(parts[1])
    return out


def _num(path: Path) -> float:
    text = _read(path).strip()
    try:
        return float(text.split()[0]) if text else 0.0
    except ValueError:
        return 0.0


def cgroup_counters(groups: dict[str, Path]) -> dict[str, float]:
    """The node's cgroup readings: cumulative ones end in _c, gauges do not."""
    out: dict[str, float] = {"cpu_usage_c": _num(groups["cpuacct"] / "cpuacct.usage") / 1e9}
    acct = _kv(_read(groups["cpuacct"] / "cpuacct.stat"))
    out["cpu_sys_c"] = acct.get("system", 0.0) / TICK
    stat = _kv(_read(groups["cpu"] / "cpu.stat"))
    out["cpu_throttled_c"] = stat.get("throttled_time", 0.0) / 1e9
    out["cpu_throttled_events_c"] = stat.get("nr_throttled", 0.0)
    mem = _kv(_read(groups["memory"] / "memory.stat"))
    out["mem_rss_mb"] = mem.get("total_rss", 0.0) / 2**20
    out["mem_cache_mb"] = mem.get("total_cache", 0.0) / 2**20
    out["mem_pgfault_c"] = mem.get("total_pgfault", 0.0)
    out["mem_pgmajfault_c"] = mem.get("total_pgmajfault", 0.0)
    out["mem_limit_hit_events_c"] = _num(groups["memory"] / "memory.failcnt")
    read = write = ops = 0.0
    for line in _read(groups["blkio"] / "blkio.throttle.io_service_bytes").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in ("Read", "Write"):
            if parts[1] == "Read":
                read += float(parts[2])
            else:
                write += float(parts[2])
    for line in _read(groups["blkio"] / "blkio.throttle.io_serviced").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "Total":
            ops += float(parts[2])
    out["disk_blkio_kb_c"], out["disk_ops_c"] = (read + write) / 1024, ops
    return out


class Processes:
    """The node's processes (its cgroup's members): scheduler run-queue delay, context switches, threads, and the
    bytes they had read from and written to storage (/proc/<pid>/io: O_DIRECT and page-cache writes alike, which
    cgroup v1's blkio statistics miss). Per-process counters are summed as increases, so a process that exits
    (a `dd` that finished) takes nothing already counted with it."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], float] = {}
        self.total = {"cpu_runq_wait_c": 0.0, "ctxt_voluntary_c": 0.0, "ctxt_involuntary_c": 0.0,
                      "disk_read_kb_c": 0.0, "disk_write_kb_c": 0.0}

    def _add(self, pid: str, key: str, value: float) -> None:
        self.total[key] += max(value - self.seen.get((pid, key), 0.0), 0.0)
        self.seen[(pid, key)] = value

    def update(self, groups: dict[str, Path]) -> dict[str, float]:
        threads = 0.0
        for pid in _read(groups["cpu"] / "cgroup.procs").split():
            sched = _read(Path(f"/proc/{pid}/schedstat")).split()
            if len(sched) >= 2:
                self._add(pid, "cpu_runq_wait_c", float(sched[1]) / 1e9)
            status = _kv(_read(Path(f"/proc/{pid}/status")).replace(":", " "))
            self._add(pid, "ctxt_voluntary_c", status.get("voluntary_ctxt_switches", 0.0))
            self._add(pid, "ctxt_involuntary_c", status.get("nonvoluntary_ctxt_switches", 0.0))
            threads += status.get("Threads", 0.0)
            io = _kv(_read(Path(f"/proc/{pid}/io")).replace(":", " "))
            self._add(pid, "disk_read_kb_c", io.get("read_bytes", 0.0) / 1024)
            self._add(pid, "disk_write_kb_c", io.get("write_bytes", 0.0) / 1024)
        return {**self.total, "proc_threads": threads}


class Sockets:
    """Per node, its TCP traffic and retransmissions from `ss -tinp`: each socket belongs to the node whose cgroup
    holds the process that owns it, and its cumulative counters (bytes_sent, bytes_received, segs_out, segs_in,
    retrans) are summed as increases per socket, so a socket that closes takes nothing already counted with it.
    (Addresses do not tell nodes apart on the job's loopback: a connecting socket's source is 127.0.0.1.)"""

    FIELDS: ClassVar[dict[str, str]] = {"bytes_sent": "net_tx_kb_c", "bytes_received": "net_rx_kb_c",
                                        "segs_out": "net_tx_segs_c", "segs_in": "net_rx_segs_c"}

    def __init__(self, hosts: list[str]) -> None:
        self.seen: dict[tuple[str, str], float] = {}
        self.total = {h: {**dict.fromkeys(self.FIELDS.values(), 0.0), "tcp_retrans_c": 0.0} for h in hosts}

    def update(self, owner: dict[str, str]) -> dict[str, dict[str, float]]:
        """`owner`: pid -> host."""
        ss = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, timeout=5)
        key, host = "", None
        for line in ss.stdout.splitlines():
            if line and not line[0].isspace():
                parts = line.split()
                key = " ".join(parts[3:5]) if len(parts) >= 5 else ""
                pid = _SS_PID.search(line)
                host = owner.get(pid.group(1)) if pid else None
                continue
            if not key or host is None:
                continue
            found = {name: float(v) for name, v in _SS_FIELD.findall(line)}
            retrans = _SS_RETRANS.search(line)
            if retrans:
                found["retrans"] = float(retrans.group(1))
            for name, value in found.items():
                column = self.FIELDS.get(name) or ("tcp_retrans_c" if name == "retrans" else "")
                if not column:
                    continue
                scale = 1024.0 if name.startswith("bytes") else 1.0
                self.total[host][column] += max(value - self.seen.get((key, name), 0.0), 0.0) / scale
                self.seen[(key, name)] = value
        return {h: dict(v) for h, v in self.total.items()}


def rates(prev: dict[str, float], cur: dict[str, float], dt: float) -> dict[str, float]:
    """Per-second rates of the cumulative readings (names ending in _c), gauges as they are, and the share of
    the segments sent in the interval that were retransmissions (a loss rate, whatever the traffic)."""
    out: dict[str, float] = {}
    if "tcp_retrans_c" in cur and "net_tx_segs_c" in cur:
        sent = cur["net_tx_segs_c"] - prev.get("net_tx_segs_c", cur["net_tx_segs_c"])
        retrans = cur["tcp_retrans_c"] - prev.get("tcp_retrans_c", cur["tcp_retrans_c"])
        out["tcp_retrans_pct"] = round(100 * retrans / sent, 3) if sent > 0 else 0.0
    for key, value in cur.items():
        if not key.endswith("_c"):
            out[key] = round(value, 4)
            continue
        rate = max(value - prev.get(key, value), 0.0) / dt
        name = key[:-2]
        if name in ("cpu_usage", "cpu_sys", "cpu_throttled", "cpu_runq_wait"):
            out[f"{name}_pct"] = round(100 * rate, 3)  # seconds per second, as percent of one core
        elif name.endswith("_events") or name in ("tcp_retrans",) or "fault" in name:
            out[name if name.endswith("_events") else f"{name}_events"] = round(rate, 3)
        else:
            out[f"{name}_per_s"] = round(rate, 3)
    return out


class Sampler(threading.Thread):
    """Samples every node every `interval` seconds into `path` (long CSV) until stop()."""

    def __init__(self, groups: dict[str, dict[str, Path]], path: Path, interval: float = INTERVAL_S) -> None:
        super().__init__(daemon=True)
        self.groups, self.path, self.interval = groups, path, interval
        self.halt = threading.Event()
        self.procs: dict[str, Processes] = {}
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self.rows = 0

    def read(self, sockets: Sockets) -> dict[str, dict[str, float]]:
        owner = {pid: host for host, groups in self.groups.items()
                 for pid in _read(groups["cpu"] / "cgroup.procs").split()}
        net = sockets.update(owner)
        return {host: {**cgroup_counters(groups), **self.procs[host].update(groups), **net[host]}
                for host, groups in self.groups.items()}

    def run(self) -> None:
        self.procs = {host: Processes() for host in self.groups}
        retrans = Sockets(list(self.groups))
        began_cpu = time.process_time()  # the whole job process: an upper bound on the sampler's own cost
        began = prev_t = time.monotonic()
        prev = self.read(retrans)
        with self.path.open("w", newline="") as fh:
            writer: csv.DictWriter[str] | None = None
            while not self.halt.wait(max(0.0, prev_t + self.interval - time.monotonic())):
                now, stamp = time.monotonic(), time.time()
                cur = self.read(retrans)
                for host in self.groups:
                    row = {"timestamp": round(stamp, 3), "host": host, **rates(prev[host], cur[host], now - prev_t)}
                    if writer is None:
                        writer = csv.DictWriter(fh, fieldnames=list(row))
                        writer.writeheader()
                    writer.writerow(row)
                    self.rows += 1
                fh.flush()
                prev, prev_t = cur, now
        self.wall_s = time.monotonic() - began
        self.cpu_s = time.process_time() - began_cpu

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=10)


class Anomaly:
    """One anomaly on one node: start() applies it, stop() undoes it; what was done is returned for the truth."""

    def __init__(self, kind: str, host: str, addr: str, groups: dict[str, Path], workdir: Path) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown telemetry anomaly {kind!r}; valid: {', '.join(KINDS)}")
        self.kind, self.host, self.addr, self.groups, self.workdir = kind, host, addr, groups, workdir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.undo: list[list[str]] = []
        self.saved: dict[Path, str] = {}

    def _spawn(self, script: str) -> None:
        """A process inside the node's cgroups (it shares the node's CPU time, memory limit and disk)."""
        self.procs.append(subprocess.Popen(["sh", "-c", join_script(self.groups) + script],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                           start_new_session=True))

    def _write(self, path: Path, value: str) -> None:
        self.saved.setdefault(path, _read(path).strip())
        path.write_text(value)

    def start(self) -> str:
        kind = self.kind
        if kind == "cpu_contention":
            self._spawn("exec sh -c 'while :; do :; done'")
            return "a busy process in the node's cgroups"
        if kind == "cpu_quota":
            self._write(self.groups["cpu"] / "cpu.cfs_period_us", str(PERIOD_US))
            self._write(self.groups["cpu"] / "cpu.cfs_quota_us", str(QUOTA_US))
            return f"CPU quota {QUOTA_US / PERIOD_US:.2f} core on the node"
        if kind == "mem_pressure":
            # the limit just above the node's resident memory: its data cache (train.py's read_mb) no longer fits
            mem = _kv(_read(self.groups["memory"] / "memory.stat"))
            limit = int(mem.get("total_rss", 0.0) + 16 * 2**20)
            self._write(self.groups["memory"] / "memory.oom_control", "1")  # wait, do not kill
            self._write(self.groups["memory"] / "memory.limit_in_bytes", str(limit))
            return (f"memory limit {limit // 2**20} MiB (resident {mem.get('total_rss', 0.0) / 2**20:.0f} MiB, "
                    f"cache {mem.get('total_cache', 0.0) / 2**20:.0f} MiB)")
        if kind == "disk_contention":
            target = self.workdir / f"disk-hog-{self.host}"
            self._spawn(f"while :; do dd if=/dev/zero of={target} bs=1M count=64 oflag=direct conv=notrunc "
                        f"status=none; done")
            self.undo.append(["rm", "-f", str(target)])
            return "a process on the node writing its disk (O_DIRECT, 1 MiB blocks)"
        if kind == "packet_loss":
            # what `tc netem loss` on the node's interface does: a share of every packet the node sends is lost
            # on its way. On the job's loopback a packet passes the sender's OUTPUT and then the receiver's INPUT:
            # a drop in OUTPUT is reported to the sending socket (which quietly sends again, no retransmission),
            # a drop in INPUT is loss on the wire. The rules match each TCP connection of the node's processes:
            # addresses alone miss the connections the node opened, whose source is 127.0.0.1
            p = "0.2"
            mine = set(_read(self.groups["cpu"] / "cgroup.procs").split())
            ss = subprocess.run(["ss", "-tnpH"], capture_output=True, text=True, timeout=5).stdout
            flows = 0
            for line in ss.splitlines():
                parts, pid = line.split(), _SS_PID.search(line)
                if len(parts) < 5 or not pid or pid.group(1) not in mine:
                    continue
                # gloo's sockets are AF_INET6 with v4-mapped addresses; on the wire (and to iptables) they are IPv4
                (la, lp), (ra, rp) = (x.replace("[::ffff:", "").replace("]", "").rsplit(":", 1) for x in parts[3:5])
                for src, sport, dst, dport in ((la, lp, ra, rp),):
                    rule = ["INPUT", "-p", "tcp", "-s", src, "--sport", sport, "-d", dst, "--dport", dport,
                            "-m", "statistic", "--mode", "random", "--probability", p, "-j", "DROP"]
                    subprocess.run(["iptables", "-I", *rule[:1], "1", *rule[1:]], check=True, timeout=10,
                                   capture_output=True)
                    self.undo.append(["iptables", "-D", *rule])
                flows += 1
            return f"iptables drops {float(p):.0%} of the packets the node sends on its {flows} TCP connection(s)"
        # noisy_neighbour: memory churn, a few hundred MB allocated, touched and freed in a loop
        self._spawn(f"exec {sys.executable} -c 'import numpy as np\nwhile True:\n a = np.ones(40_000_000)\n"
                    f" a *= 2\n del a'")
        return "a process on the node allocating, touching and freeing 300 MB in a loop"

    def stop(self) -> str:
        """Undoes the anomaly; returns what it did that can be counted (packets the loss rules dropped)."""
        done = ""
        if self.kind == "packet_loss":
            listing = subprocess.run(["iptables", "-L", "INPUT", "-v", "-x", "-n"], capture_output=True, text=True,
                                     timeout=10).stdout
            dropped = sum(int(line.split()[0]) for line in listing.splitlines()
                          if "DROP" in line and "statistic" in line and line.split()[0].isdigit())
            done = f"{dropped} packets dropped"
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        # the limit first, then the OOM killer back on (in reverse order of saving)
        for path, value in reversed(list(self.saved.items())):
            with contextlib.suppress(OSError):
                path.write_text(value if "oom_control" not in path.name else "0")
        for argv in self.undo:
            subprocess.run(argv, timeout=10, capture_output=True)
        return done
