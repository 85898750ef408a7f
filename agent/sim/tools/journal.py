"""Kernel ring buffer and systemd journal: dmesg and journalctl, with times relative to "now"."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from agent.sim.state import HostState, LogLine
from agent.sim.tools import ToolOutput, usage_error

COMMANDS = ("dmesg", "journalctl")
SYSLOG_IDENT_PID = {"systemd-networkd": 1021, "slurmd": 2210, "nvidia-persistenced": 1873}


def _now() -> float:
    return time.time()


def _boot_lines(host: HostState) -> list[LogLine]:
    """Kernel lines still in the ring buffer: everything since boot."""
    return sorted((line for line in host.journal if line.ident == "kernel" and line.age_s <= host.uptime_s),
                  key=lambda line: -line.age_s)


def _iso(epoch: float, sep: str = ",") -> str:
    stamp = datetime.fromtimestamp(epoch, tz=UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S") + f"{sep}{stamp.microsecond:06d}+00:00"


def _dmesg(host: HostState, argv: list[str]) -> ToolOutput:
    args = argv[1:]
    fmt = "raw"
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-T", "--ctime"):
            fmt = "ctime"
        elif arg == "--time-format" and i + 1 < len(args):
            fmt = {"iso": "iso", "ctime": "ctime", "reltime": "raw", "delta": "raw", "notime": "notime"}.get(
                args[i + 1], "")
            i += 1
            if not fmt:
                return usage_error("dmesg", argv)
        elif arg.startswith("--time-format="):
            fmt = arg.split("=", 1)[1]
        elif arg in ("-k", "--kernel", "-x", "--decode", "-L", "--color=never", "--nopager", "-P"):
            pass
        else:
            return usage_error("dmesg", argv)
        i += 1
    now = _now()
    out = []
    for line in _boot_lines(host):
        mono = host.uptime_s - line.age_s
        if fmt == "iso":
            out.append(f"{_iso(now - line.age_s)} {line.text}")
        elif fmt == "ctime":
            stamp = datetime.fromtimestamp(now - line.age_s).strftime("%a %b %e %H:%M:%S %Y")
            out.append(f"[{stamp}] {line.text}")
        elif fmt == "notime":
            out.append(line.text)
        else:
            out.append(f"[{mono:12.6f}] {line.text}")
    return ToolOutput("\n".join(out) + ("\n" if out else ""))


def _parse_since(value: str, now: float) -> float | None:
    value = value.strip()
    if value.startswith("-") and value[1:-1].isdigit():
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(value[-1])
        return now - int(value[1:-1]) * unit if unit else None
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"):
        try:
            return datetime.strptime(value, fmt).timestamp()
        except ValueError:
            continue
    if value == "today":
        return datetime.now().replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    return None


def _journalctl(host: HostState, argv: list[str]) -> ToolOutput:
    args = argv[1:]
    kernel_only = False
    units: list[str] = []
    since: float | None = None
    until: float | None = None
    grep: str | None = None
    output = "short"
    now = _now()
    i = 0
    while i < len(args):
        arg = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None
        if arg in ("-k", "--dmesg"):
            kernel_only = True
        elif arg in ("--no-pager", "-q", "--quiet", "-b", "--boot", "-a", "--all"):
            pass
        elif arg in ("-o", "--output") and nxt:
            output = nxt
            i += 1
        elif arg.startswith("--output="):
            output = arg.split("=", 1)[1]
        elif arg in ("-u", "--unit", "-t", "--identifier") and nxt:
            units.append(nxt.removesuffix(".service"))
            i += 1
        elif (arg in ("-S", "--since", "-U", "--until") and nxt) or arg.startswith(("--since=", "--until=")):
            text = arg.split("=", 1)[1] if "=" in arg else nxt
            stamp = _parse_since(text or "", now)
            if stamp is None:
                return ToolOutput("", f"Failed to parse timestamp: {text}\n", 1)
            if arg.startswith(("-S", "--since")):
                since = stamp
            else:
                until = stamp
            i += 0 if "=" in arg else 1
        elif arg in ("-g", "--grep") and nxt:
            grep = nxt
            i += 1
        else:
            return usage_error("journalctl", argv)
        i += 1
    if output not in ("short", "short-iso", "cat"):
        return usage_error("journalctl", argv)
    lines = sorted(host.journal, key=lambda line: -line.age_s)
    if kernel_only:
        lines = [line for line in lines if line.ident == "kernel" and line.age_s <= host.uptime_s]
    if units:
        lines = [line for line in lines if line.ident in units]
    if since is not None:
        lines = [line for line in lines if now - line.age_s >= since]
    if until is not None:
        lines = [line for line in lines if now - line.age_s <= until]
    if grep is not None:
        import re

        pattern = re.compile(grep, re.IGNORECASE if grep.islower() else 0)
        lines = [line for line in lines if pattern.search(line.text)]
    if not lines:
        return ToolOutput("-- No entries --\n")
    out = []
    for line in lines:
        ident = line.ident if line.ident == "kernel" else f"{line.ident}[{SYSLOG_IDENT_PID.get(line.ident, 977)}]"
        epoch = now - line.age_s
        if output == "cat":
            out.append(line.text)
        elif output == "short-iso":
            when = datetime.fromtimestamp(epoch).astimezone().strftime("%Y-%m-%dT%H:%M:%S%z")
            out.append(f"{when} {host.hostname} {ident}: {line.text}")
        else:
            when = datetime.fromtimestamp(epoch).strftime("%b %d %H:%M:%S")
            out.append(f"{when} {host.hostname} {ident}: {line.text}")
    return ToolOutput("\n".join(out) + "\n")


def run(host: HostState, argv: list[str]) -> ToolOutput:
    return _dmesg(host, argv) if argv[0] == "dmesg" else _journalctl(host, argv)


def files(host: HostState) -> dict[str, str]:
    """Static syslog copies for tools that read files; written at creation, so times are frozen then."""
    now = _now()
    lines = []
    for line in sorted(host.journal, key=lambda line: -line.age_s):
        stamp = datetime.fromtimestamp(now - line.age_s).strftime("%b %e %H:%M:%S")
        ident = line.ident if line.ident == "kernel" else f"{line.ident}[{SYSLOG_IDENT_PID.get(line.ident, 977)}]"
        lines.append(f"{stamp} {host.hostname} {ident}: {line.text}\n")
    kern = [line for line in lines if " kernel: " in line]
    return {"/var/log/syslog": "".join(lines), "/var/log/kern.log": "".join(kern)}
