"""Slurm's client commands (scontrol, squeue ...) run as argument lists with a timeout, and their one-line
`Key=Value Key=Value ...` output (`scontrol show ... -o`) parsed.

No shell ever sees a job id, node name or reason: each is one argv element, checked against Slurm's own syntax
before it gets here. A command that is missing, times out or fails raises SlurmError with what Slurm said.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field

TIMEOUT_S = 20.0
# a job as scontrol names it: 1234, an array task 1234_7, a heterogeneous job's component 1234+1
JOB_ID = re.compile(r"\d{1,12}(?:_\d{1,9}|\+\d{1,4})?")
# one node (no hostlist expression, no spaces): what drain and resume act on
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
KEY = re.compile(r"([A-Za-z][A-Za-z0-9_:/.]*)=(.*)", re.DOTALL)
# a node's reason ends with who set it and when: "Reason=Kernel panic [root@2026-11-26T18:27:01]"; the reason text
# may hold spaces and '=' signs, so it is cut out before the rest is split into fields
REASON = re.compile(r"(?:^| )Reason=(.*) \[([^\[\]\s@]*)@([0-9T:-]+)\](?= [A-Za-z][A-Za-z0-9_]*=|$)")
# node states that take a node out of service for the circuit breaker (base state or flag, scontrol spelling)
OUT_OF_SERVICE = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING"})
DRAINED = frozenset({"DRAIN", "DRAINED", "DRAINING"})


class SlurmError(RuntimeError):
    """Slurm could not answer (scontrol missing, slurmctld down) or refused (unknown job or node, no permission)."""


def run(tool: str, args: list[str], timeout: float = TIMEOUT_S) -> str:
    """stdout of `tool args...`; SlurmError with the tool's own message when it cannot run or fails."""
    binary = shutil.which(tool)
    shown = shlex.join([tool, *args])
    if binary is None:
        raise SlurmError(f"{tool} not found on PATH: run aidai where Slurm's client commands work (a login or "
                         "controller node), or install Slurm's client (Debian: slurm-client)")
    try:
        proc = subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{shown}` did not answer within {timeout:.0f} s: is slurmctld up and reachable?") from None
    except OSError as exc:
        raise SlurmError(f"cannot run {tool}: {exc}") from None
    if proc.returncode != 0:
        said = [line.strip() for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        raise SlurmError(f"`{shown}` failed (exit {proc.returncode}): {said[-1] if said else 'no message'}")
    return proc.stdout


def fields(line: str) -> list[tuple[str, str]]:
    """The (key, value) pairs of one `-o` line, in order (a job's per-node detail repeats Nodes= and GRES=).
    A word without '=' continues the value before it (`OS=Linux 6.1.0 #1 SMP`)."""
    pairs: list[tuple[str, str]] = []
    for word in line.strip().split():
        match = KEY.fullmatch(word)
        if match:
            pairs.append((match.group(1), match.group(2)))
        elif pairs:
            key, value = pairs[-1]
            pairs[-1] = (key, f"{value} {word}")
    return pairs


def present(value: str | None) -> str:
    """Slurm's way of saying 'nothing' ((null), None, N/A, n/a) as an empty string."""
    value = (value or "").strip()
    return "" if value in ("(null)", "None", "N/A", "n/a", "None assigned") else value


def hostnames(expression: str) -> list[str]:
    """`node[1-3],gpu7` -> [node1, node2, node3, gpu7], as Slurm expands it."""
    return [line.strip() for line in run("scontrol", ["show", "hostnames", expression]).splitlines() if line.strip()]


@dataclass
class SlurmNode:
    """One node as `scontrol show node -o` describes it."""

    name: str
    address: str  # NodeAddr: where to reach it
    hostname: str = ""  # NodeHostName
    state: str = ""  # e.g. IDLE, MIXED+DRAIN, DOWN*+DRAIN
    partitions: list[str] = field(default_factory=list)
    reason: str = ""
    reason_by: str = ""  # who set the reason, and when: root@2026-11-26T18:27:01

    @property
    def flags(self) -> set[str]:
        # '*' not responding, '~' powered off, '#' powering up, '%' powering down, '$' maintenance, '@' reboot ...
        return {part.rstrip("*~#!%$@^-") for part in self.state.upper().split("+") if part}

    @property
    def out_of_service(self) -> bool:
        return bool(self.flags & OUT_OF_SERVICE)

    @property
    def drained(self) -> bool:
        return bool(self.flags & DRAINED)


def parse_node(line: str) -> SlurmNode:
    reason = REASON.search(line)
    rest = line[:reason.start()] + line[reason.end():] if reason else line
    values = dict(fields(rest))
    return SlurmNode(name=values.get("NodeName", ""), address=present(values.get("NodeAddr")),
                     hostname=present(values.get("NodeHostName")), state=values.get("State", ""),
                     partitions=[p for p in present(values.get("Partitions")).split(",") if p],
                     reason=reason.group(1).strip() if reason else present(values.get("Reason")),
                     reason_by=f"{reason.group(2)}@{reason.group(3)}" if reason else "")


def show_nodes(expression: str | None = None) -> list[SlurmNode]:
    """Every node (or those of a hostlist expression), as scontrol describes them."""
    out = run("scontrol", ["show", "node", "-o", *([expression] if expression else [])])
    return [parse_node(line) for line in out.splitlines() if line.startswith("NodeName=")]


def node(name: str) -> SlurmNode:
    if not NODE_NAME.fullmatch(name):
        raise SlurmError(f"{name!r} is not a Slurm node name (one node: letters, digits, '.', '_', '-')")
    try:
        found = [n for n in show_nodes(name) if n.name == name]
    except SlurmError as exc:
        if "not found" not in str(exc):
            raise
        found = []
    if not found:
        raise SlurmError(f"Slurm has no node {name!r}")
    return found[0]


def update_node(name: str, **settings: str) -> None:
    """`scontrol update NodeName=NAME Key=Value ...`, each pair one argument (a reason may hold spaces)."""
    if not NODE_NAME.fullmatch(name):
        raise SlurmError(f"{name!r} is not a Slurm node name")
    run("scontrol", ["update", f"NodeName={name}", *(f"{key}={value}" for key, value in settings.items())])
