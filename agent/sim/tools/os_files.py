"""OS state of a simulated host as files and `df`: limits, mounts, cpufreq, EDAC, container markers, cgroups.

/proc/self/limits, /proc/mounts, /proc/meminfo, the CPU governors, the EDAC counters, /.dockerenv and
/proc/1/cgroup inside a container, the container's devices cgroup, and a README on each data mount
(so a purged data directory leaves its mount point behind).
"""

from __future__ import annotations

from agent.sim.state import HostState, Mount
from agent.sim.tools import ToolOutput, usage_error

COMMANDS = ("df",)
MEM_TOTAL_KB = 2113479636
LIMITS = [  # (name, soft, hard, unit) of a root shell on the node, before memlock
    ("Max cpu time", "unlimited", "unlimited", "seconds"), ("Max file size", "unlimited", "unlimited", "bytes"),
    ("Max data size", "unlimited", "unlimited", "bytes"), ("Max stack size", "8388608", "unlimited", "bytes"),
    ("Max core file size", "0", "unlimited", "bytes"), ("Max resident set", "unlimited", "unlimited", "bytes"),
    ("Max processes", "8255196", "8255196", "processes"), ("Max open files", "1048576", "1048576", "files"),
]
LIMITS_TAIL = [
    ("Max address space", "unlimited", "unlimited", "bytes"), ("Max file locks", "unlimited", "unlimited", "locks"),
    ("Max pending signals", "8255196", "8255196", "signals"), ("Max msgqueue size", "819200", "819200", "bytes"),
    ("Max nice priority", "0", "0", ""), ("Max realtime priority", "0", "0", ""),
    ("Max realtime timeout", "unlimited", "unlimited", "us"),
]
BASE_DEVICE_RULES = ["c 1:5 rwm", "c 1:3 rwm", "c 1:9 rwm", "c 1:8 rwm", "c 5:0 rwm", "c 5:1 rwm", "c *:* m",
                     "b *:* m", "c 1:7 rwm", "c 136:* rwm", "c 5:2 rwm", "c 10:200 rwm"]
NVIDIA_UVM_MAJOR = 508


def limits(host: HostState) -> str:
    memlock = "unlimited" if host.memlock_kb is None else str(host.memlock_kb * 1024)
    rows = [*LIMITS, ("Max locked memory", memlock, memlock, "bytes"), *LIMITS_TAIL]
    lines = [f"{'Limit':<26}{'Soft Limit':<21}{'Hard Limit':<21}{'Units':<10}"]
    lines += [f"{name:<26}{soft:<21}{hard:<21}{unit:<10}" for name, soft, hard, unit in rows]
    return "\n".join(lines) + "\n"


def _mount_line(mount: Mount, inside: bool) -> str:
    options = "rw,nosuid,nodev,relatime" if mount.fstype == "tmpfs" else "rw,relatime"
    if mount.options:
        options += "," + mount.options
    source = "shm" if inside and mount.path == "/dev/shm" else mount.source
    return f"{source} {mount.path} {mount.fstype} {options} 0 0"


def mounts(host: HostState) -> str:
    lines = ["proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0",
             "sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0"]
    lines += [_mount_line(m, host.container.inside) for m in host.mounts]
    return "\n".join(lines) + "\n"


def _human(kib: int) -> str:
    """df -h: 1024-based, one decimal below 10 (64M, 1.0T)."""
    value, units = float(kib), "KMGTP"
    step = 0
    while value >= 1024 and step < len(units) - 1:
        value /= 1024
        step += 1
    return f"{value:.1f}{units[step]}" if value < 10 else f"{value:.0f}{units[step]}"


def _mount_for(host: HostState, path: str) -> Mount | None:
    path = path.rstrip("/") or "/"
    if any(path == m or path.startswith(m.rstrip("/") + "/") for m in host.missing_paths):
        return None
    known = any(path == m.path for m in host.mounts) or any(f == path or f.startswith(path + "/") for f in host.files)
    if not known:
        return None
    candidates = [m for m in host.mounts if path == m.path or path.startswith(m.path.rstrip("/") + "/")]
    return max(candidates, key=lambda m: len(m.path), default=None)


def _df(host: HostState, argv: list[str]) -> ToolOutput:
    human, paths = False, []
    for arg in argv[1:]:
        if arg in ("-h", "--human-readable"):
            human = True
        elif arg in ("-k", "-P", "--portability"):
            pass
        elif arg.startswith("-"):
            return usage_error("df", argv)
        else:
            paths.append(arg)
    rows, errors = [], []
    for path in paths or [m.path for m in host.mounts]:
        mount = _mount_for(host, path)
        if mount is None:
            errors.append(f"df: {path}: No such file or directory\n")
            continue
        size, used = mount.size_bytes // 1024, mount.used_bytes // 1024
        avail = max(size - used, 0)
        pct = f"{-(-100 * used // size) if size else 0}%"
        source = "shm" if host.container.inside and mount.path == "/dev/shm" else mount.source
        numbers = [_human(v) if human else str(v) for v in (size, used, avail)]
        rows.append([source, *numbers, pct, mount.path])
    if not rows:
        return ToolOutput("", "".join(errors), 1)
    header = ["Filesystem", "Size" if human else "1K-blocks", "Used", "Avail" if human else "Available", "Use%",
              "Mounted on"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
    lines = []
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0])] + [row[i].rjust(widths[i]) for i in range(1, 5)] + [row[5]]
        lines.append(" ".join(cells))
    return ToolOutput("\n".join(lines) + "\n", "".join(errors), 1 if errors else 0)


def run(host: HostState, argv: list[str]) -> ToolOutput:
    return _df(host, argv)


def _edac(host: HostState) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    edac = host.edac
    for mc in range(edac.controllers):
        base = f"/sys/devices/system/edac/mc/mc{mc}"
        ue, ce = (edac.uncorrectable, edac.correctable) if mc == 0 else (0, 0)
        out[f"{base}/mc_name"] = f"Skylake Socket#{mc} IMC#0\n"
        out[f"{base}/ue_count"] = f"{ue}\n"
        out[f"{base}/ce_count"] = f"{ce}\n"
        for dimm in range(2):
            label = edac.dimm if (mc, dimm) == (0, 0) else f"CPU_SrcID#{mc}_MC#0_Chan#{1 - dimm}_DIMM#0"
            hit = (mc, dimm) == (0, 0)
            out[f"{base}/dimm{dimm}/dimm_label"] = label + "\n"
            out[f"{base}/dimm{dimm}/dimm_ue_count"] = f"{ue if hit else 0}\n"
            out[f"{base}/dimm{dimm}/dimm_ce_count"] = f"{ce if hit else 0}\n"
    return out


def _container(host: HostState) -> dict[str, str | None]:
    box = host.container
    if not box.inside:
        return {"/proc/1/cgroup": "0::/init.scope\n"}
    cgroup = "".join(f"{n}:{c}:/docker/{box.container_id}\n" for n, c in (
        (12, "devices"), (11, "memory"), (10, "cpu,cpuacct"), (9, "pids"), (8, "blkio"), (1, "name=systemd")))
    rules = list(BASE_DEVICE_RULES)
    if box.devices_cgroup_ok and box.nvidia_runtime:
        rules += ["c 195:255 rw"] + [f"c 195:{i} rw" for i in range(len(host.gpus))]
        rules += [f"c {NVIDIA_UVM_MAJOR}:0 rw", f"c {NVIDIA_UVM_MAJOR}:1 rw"]
    return {"/.dockerenv": None, "/proc/1/cgroup": cgroup,
            "/sys/fs/cgroup/devices/devices.list": "\n".join(rules) + "\n"}


def files(host: HostState) -> dict[str, str | None]:
    out: dict[str, str | None] = {
        "/proc/self/limits": limits(host),
        "/proc/mounts": mounts(host),
        "/proc/meminfo": f"MemTotal:       {MEM_TOTAL_KB} kB\nMemFree:        {MEM_TOTAL_KB * 9 // 10} kB\n",
        "/sys/devices/system/cpu/online": f"0-{host.machine.cpus - 1}\n",
    }
    for cpu in range(4):
        out[f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"] = host.cpu_governor + "\n"
    out.update(_edac(host))
    out.update(_container(host))
    for mount in host.mounts:
        if mount.path not in ("/", "/dev/shm") and not any(mount.path.startswith(m) for m in host.missing_paths):
            out[f"{mount.path}/README"] = (f"{mount.path}: scratch space; files not accessed for 30 days are "
                                           "purged.\n")
    return out
