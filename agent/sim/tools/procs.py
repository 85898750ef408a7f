"""Processes of a simulated host: `ps -eo ...` and `py-spy dump --pid N`, plus /proc/PID/{cmdline,environ}.

The host's daemons come from its active services; the job's processes (training ranks, DataLoader
workers, the launcher) from HostState.processes, whose threads and frames py-spy prints.
"""

from __future__ import annotations

from agent.sim.state import HostState, Process
from agent.sim.tools import ToolOutput, usage_error

COMMANDS = ("ps", "py-spy")
DAEMONS = [  # (pid, service that must be active or None, args)
    (1, None, "/sbin/init"),
    (612, None, "/lib/systemd/systemd-journald"),
    (1021, None, "/lib/systemd/systemd-networkd"),
    (1480, None, "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups"),
    (1873, "nvidia-persistenced", "/usr/bin/nvidia-persistenced --user nvidia-persistenced --uuid-paths"),
    (1902, "nv-hostengine", "/usr/bin/nv-hostengine -n --service-account nvidia-dcgm"),
    (2210, "slurmd", "/usr/sbin/slurmd -D -s"),
    (2301, "docker", "/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock"),
    (2404, "nvidia-fabricmanager", "/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg"),
]
FIELDS = {"pid": ("PID", 7, True), "ppid": ("PPID", 7, True), "user": ("USER", 8, False),
          "comm": ("COMMAND", 15, False), "args": ("COMMAND", 0, False), "cmd": ("CMD", 0, False),
          "command": ("COMMAND", 0, False)}


def table(host: HostState) -> list[tuple[int, int, str, str]]:
    """(pid, ppid, user, args) of every process, in pid order."""
    rows: list[tuple[int, int, str, str]] = []
    if host.container.inside:
        rows.append((1, 0, "root", "/bin/bash"))
    else:
        rows += [(pid, 0 if pid == 1 else 1, "root", args) for pid, unit, args in DAEMONS
                 if unit is None or host.services.get(unit) == "active"]
    rows += [(p.pid, p.ppid, "ubuntu", p.cmdline) for p in host.processes]
    return sorted(rows)


def _ps(host: HostState, argv: list[str]) -> ToolOutput:
    args = argv[1:]
    fields = ["pid", "tty", "time", "cmd"]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-e", "-A", "ax", "aux", "-ww", "ww", "-w"):
            pass
        elif arg in ("-eo", "-o", "-Ao") and i + 1 < len(args):
            fields = [f.split("=")[0].strip() for f in args[i + 1].split(",")]
            i += 1
        elif arg.startswith("-o") and len(arg) > 2:
            fields = [f.split("=")[0].strip() for f in arg[2:].split(",")]
        else:
            return usage_error("ps", argv)
        i += 1
    unknown = [f for f in fields if f not in FIELDS]
    if unknown:
        return ToolOutput("", f'error: unknown user-defined format specifier "{unknown[0]}"\n', 1)
    lines = [_row([FIELDS[f][0] for f in fields], fields)]
    for pid, ppid, user, cmd in table(host):
        values = {"pid": str(pid), "ppid": str(ppid), "user": user, "comm": cmd.split()[0].rsplit("/", 1)[-1][:15],
                  "args": cmd, "cmd": cmd, "command": cmd}
        lines.append(_row([values[f] for f in fields], fields))
    return ToolOutput("\n".join(lines) + "\n")


def _row(values: list[str], fields: list[str]) -> str:
    cells = []
    for value, name in zip(values, fields, strict=True):
        _title, width, right = FIELDS[name]
        cells.append(value.rjust(width) if right else (value if not width else value.ljust(width)))
    return " ".join(cells).rstrip()


def _process(host: HostState, pid: int) -> Process | None:
    return next((p for p in host.processes if p.pid == pid), None)


def _py_spy(host: HostState, argv: list[str]) -> ToolOutput:
    args = argv[1:]
    if args[:1] in (["--version"], ["-V"]):
        return ToolOutput("py-spy 0.3.14\n")
    if not args or args[0] != "dump":
        return usage_error("py-spy", argv)
    pid = None
    rest = args[1:]
    for i, arg in enumerate(rest):
        if arg in ("--pid", "-p") and i + 1 < len(rest) and rest[i + 1].isdigit():
            pid = int(rest[i + 1])
        elif arg.startswith("--pid="):
            pid = int(arg.split("=", 1)[1])
    if pid is None:
        return usage_error("py-spy", argv)
    proc = _process(host, pid)
    if proc is None:
        if any(row[0] == pid for row in table(host)):
            return ToolOutput("", f"Error: Failed to find python version from target process {pid}\n", 1)
        return ToolOutput("", "Error: No such process (os error 3)\n", 1)
    out = [f"Process {proc.pid}: {proc.cmdline}", f"Python v{proc.python} ({proc.python_path})", ""]
    for thread in proc.threads:
        out.append(f'Thread {thread.tid} ({"idle" if thread.idle else "active"}): "{thread.name}"')
        out += [f"    {f.function} ({f.file}:{f.line})" if f.line else f"    {f.function} ({f.file})"
                for f in thread.frames]
        out.append("")
    return ToolOutput("\n".join(out))


def run(host: HostState, argv: list[str]) -> ToolOutput:
    return _ps(host, argv) if argv[0] == "ps" else _py_spy(host, argv)


def installed(host: HostState, command: str) -> bool:
    return command not in host.software.missing_tools


def files(host: HostState) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for proc in host.processes:
        out[f"/proc/{proc.pid}/cmdline"] = proc.cmdline.replace(" ", "\0") + "\0"
        env = {**host.env, **proc.env}
        out[f"/proc/{proc.pid}/environ"] = "".join(f"{k}={v}\0" for k, v in env.items())
    return out
