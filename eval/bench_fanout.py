"""Fan-out: one passive-check round over many hosts, for several limits on the hosts checked at once.

A round is what a diagnosis starts with on every host: the inventory (host_inventory) and preflight's five passive
checks (framework_versions, gpu_inventory, container_runtime, ofed_stack, nccl_env), through the diagnosis' own
CheckRunner with `max_parallel_hosts` = the limit (each host runs up to `--per-host` checks at once).

Hosts, two ways (both real scripts, real parsers):
- `sim`: a simulated scenario of N H100 hosts (agent/sim); each check is a local process with the host's tool shims.
- `ssh`: the same N simulated hosts behind one real sshd on 127.0.0.1, each reached as its own host over its own
  SSH connection (one SshExecutor per host: handshake, SFTP upload of the scripts, remote `timeout`, cleanup), the
  host's environment sourced remotely (`?env=.../activate`). sshd runs with `MaxStartups 1024`, since N real hosts
  would each take one connection, not N.

Measured per (transport, N, limit): wall of the round, CPU of this process (the runner's threads, paramiko) and CPU
of its children (the check processes for sim; for ssh, sshd and everything it ran, reaped when it stops), results
that came back UNKNOWN (a limit that loses hosts does not win), and the CPU that other processes on the machine used
during the round (all CPU time in /proc/stat minus ours: the machine is shared, and what others take is not ours to
use). Everything runs on this machine: the "remote" work of the SSH hosts shares its CPUs, so the SSH rows are an
upper bound on the local cost and a lower bound on what many real hosts would allow.

    python -m eval.bench_fanout --hosts 64 --limits 8 16 32 64 --out eval/results/fanout.md
    python -m eval.bench_fanout --hosts 256 --limits 8 16 32 --out eval/results/fanout.md --append

Memory: each host in flight runs up to `--per-host` check processes with their tool shims (about 26 MB of RSS
together each); 128 hosts x 4 would be about 13 GB on this shared 23 GB machine, so the recorded runs stop at 64
hosts at once (32 for 256 hosts: over SSH, 32 already loses results to timeouts here, see the table).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from agent.checks.runner import CheckRunner
from agent.executors.base import Executor
from agent.executors.hosts import executors_for
from agent.executors.ssh import SshExecutor, SshTarget
from agent.models import Verdict
from agent.preflight.collect import CHECKS
from agent.sim.scenario import create_scenario
from tests.sshd import Sshd, start_sshd

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Row:
    transport: str
    hosts: int
    limit: int
    wall_s: float
    cpu_self_s: float
    cpu_children_s: float
    results: int
    unknown: int
    why_unknown: str  # the commonest reasons, e.g. "41 x timed out after 30 s"
    others_cpu_s: float  # CPU seconds other processes used on this machine during the round

    @property
    def cpu_s(self) -> float:
        return self.cpu_self_s + self.cpu_children_s


def cpu() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def machine_cpu() -> float:
    """CPU seconds the whole machine has spent busy (user, nice, system, irq, softirq, steal), from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The live child processes of `pid` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def stop_sshd(sshd: Sshd, timeout_s: float = 120.0) -> None:
    """Stop sshd only once every connection's process has ended and been reaped by it: a per-connection sshd holds
    the CPU of everything its session ran, and one still alive when the listener stops is reparented to init and its
    CPU is lost to this process's accounting."""
    deadline = time.monotonic() + timeout_s
    while children(sshd.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    sshd.stop()


def sim_hosts(scenario: Path, n: int) -> list[Executor]:
    return executors_for([f"sim:{scenario / f'node-{k}'}" for k in range(1, n + 1)])


def ssh_hosts(scenario: Path, n: int, sshd: Sshd, known: Path) -> list[Executor]:
    executors: list[Executor] = []
    for k in range(1, n + 1):
        target = SshTarget(user=sshd.user, host="127.0.0.1", port=sshd.port, key_file=str(sshd.client_key),
                           known_hosts=str(known), remote_env=str(scenario / f"node-{k}" / "activate"),
                           connect_timeout=60)
        executor = SshExecutor(target)
        executor.name = f"ssh://node-{k}"  # one address, N hosts: each its own connection
        executors.append(executor)
    return executors


def one_round(executors: list[Executor], limit: int, per_host: int) -> tuple[int, list[str]]:
    """The inventory and preflight's checks on every host; (results, why each UNKNOWN one is)."""
    runner = CheckRunner(executors, max_parallel_hosts=limit, workers=per_host)
    try:
        runner.take_inventory()
        results = runner.run(list(CHECKS), hosts=runner.checkable())
        cannot = [e.cannot_check for e in runner.expectations.values() if e.cannot_check]
    finally:
        for executor in executors:
            executor.close()
    unknown = [r.reason or r.summary for r in results if r.verdict == Verdict.UNKNOWN]
    return len(results) + len(cannot), unknown + [f"inventory: {why}" for why in cannot]


def commonest(reasons: list[str], top: int = 2) -> str:
    """The commonest reasons, host names and numbers masked so that the same failure counts once."""
    masked = Counter(re.sub(r"\d+", "N", re.sub(r"ssh://\S+|node-\d+", "HOST", r))[:90] for r in reasons)
    return "; ".join(f"{n} x {why}" for why, n in masked.most_common(top))


def measure(transport: str, scenario: Path, n: int, limit: int, per_host: int, work: Path) -> Row:
    sshd = None
    if transport == "ssh":
        sshd = start_sshd(work / f"sshd-{n}-{limit}", ("MaxStartups 1024", "MaxSessions 64"))
        known = sshd.known_hosts(work / f"known-{n}-{limit}")
        executors = ssh_hosts(scenario, n, sshd, known)
    else:
        executors = sim_hosts(scenario, n)
    self0, kids0 = cpu()
    busy0 = machine_cpu()
    began = time.perf_counter()
    try:
        results, unknown = one_round(executors, limit, per_host)
    finally:
        wall = time.perf_counter() - began
        if sshd is not None:  # reaped here: sshd's CPU and its sessions' join this process's children
            stop_sshd(sshd)
    self1, kids1 = cpu()
    others = machine_cpu() - busy0 - (self1 - self0) - (kids1 - kids0)
    return Row(transport, n, limit, round(wall, 2), round(self1 - self0, 2), round(kids1 - kids0, 2), results,
               len(unknown), commonest(unknown), round(max(others, 0.0), 1))


def table(rows: list[Row]) -> str:
    lines = ["| hosts over | hosts | limit | wall | CPU (this process + children) | of which children | results "
             "(UNKNOWN) | other processes' CPU meanwhile | why UNKNOWN |", "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        best = min((r for r in rows if (r.transport, r.hosts) == (row.transport, row.hosts) and not r.unknown),
                   key=lambda r: r.wall_s, default=None)
        mark = "**" if row is best else ""
        lines.append(f"| {row.transport} | {row.hosts} | {mark}{row.limit}{mark} | {mark}{row.wall_s:.1f} s{mark} | "
                     f"{row.cpu_s:.1f} s | {row.cpu_children_s:.1f} s | {row.results} ({row.unknown}) | "
                     f"{row.others_cpu_s:.0f} s | {row.why_unknown or '-'} |")
    return "\n".join(lines)


def best_limits(rows: list[Row]) -> list[str]:
    out = []
    for key in dict.fromkeys((r.transport, r.hosts) for r in rows):
        clean = [r for r in rows if (r.transport, r.hosts) == key and not r.unknown]
        if clean:
            best = min(clean, key=lambda r: r.wall_s)
            out.append(f"{key[0]}, {key[1]} hosts: limit {best.limit} ({best.wall_s:.1f} s)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--limits", type=int, nargs="+", default=[8, 16, 32, 64, 128])
    parser.add_argument("--transports", nargs="+", choices=("sim", "ssh"), default=["sim", "ssh"])
    parser.add_argument("--per-host", type=int, default=4, help="checks at once on one host (CheckRunner workers)")
    parser.add_argument("--out", type=Path, help="write the markdown here")
    parser.add_argument("--append", action="store_true", help="append to --out instead of replacing it")
    args = parser.parse_args(argv)
    if "ssh" in args.transports and not (shutil.which("sshd") or Path("/usr/sbin/sshd").exists()):
        parser.error("--transports ssh needs OpenSSH's sshd (make sshd installs it)")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="aidai-fanout-") as tmp:
        work = Path(tmp)
        scenario = work / "fleet"
        began = time.perf_counter()
        create_scenario(scenario, hosts=[f"node-{k}" for k in range(1, max(args.hosts) + 1)])
        print(f"scenario of {max(args.hosts)} simulated hosts in {time.perf_counter() - began:.0f} s", file=sys.stderr)
        for transport in args.transports:
            for n in args.hosts:
                for limit in args.limits:
                    row = measure(transport, scenario, n, limit, args.per_host, work)
                    rows.append(row)
                    print(f"{row.transport} {row.hosts} hosts, limit {row.limit}: wall {row.wall_s} s, CPU "
                          f"{row.cpu_s:.1f} s, {row.unknown} of {row.results} UNKNOWN (others' CPU meanwhile "
                          f"{row.others_cpu_s:.0f} s) {row.why_unknown}", file=sys.stderr, flush=True)
    head = (f"Fan-out benchmark (`python -m eval.bench_fanout {' '.join(argv or sys.argv[1:])}`), "
            f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, this machine: {os.cpu_count()} CPUs, "
            f"Python {platform.python_version()}; a round = host_inventory + "
            f"{', '.join(CHECKS)} on every host, {args.per_host} checks at once per host. Bold: the best wall among "
            "the limits that lost no result.")
    text = "\n\n".join([head, table(rows), "Best limit: " + "; ".join(best_limits(rows)) + "."]) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a" if args.append else "w", encoding="utf-8") as handle:
            handle.write(("\n" if args.append and args.out.exists() and args.out.stat().st_size else "") + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
