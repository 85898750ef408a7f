"""systemctl, lsmod and modinfo from the host's services and kernel modules, and the files lsmod reads
(/proc/modules, /sys/module): a container without kmod still sees the host's."""

from __future__ import annotations

from agent.sim.state import HostState
from agent.sim.tools import ToolOutput, usage_error

COMMANDS = ("systemctl", "lsmod", "modinfo")

MODULE_SIZES = {"nvidia": 56463360, "nvidia_uvm": 1437696, "nvidia_modeset": 1241088, "nvidia_drm": 61440,
                "nvidia_peermem": 16384, "mlx5_ib": 466944, "mlx5_core": 2023424, "ib_core": 438272,
                "ib_uverbs": 167936, "rdma_ucm": 28672}
USERS = {"nvidia": "nvidia_uvm,nvidia_peermem,nvidia_modeset", "ib_core": "mlx5_ib,ib_uverbs,rdma_ucm,nvidia_peermem",
         "mlx5_core": "mlx5_ib", "nvidia_modeset": "nvidia_drm"}


def _systemctl(host: HostState, argv: list[str]) -> ToolOutput:
    args = [a for a in argv[1:] if a not in ("--no-pager", "--quiet", "-q")]
    if not args or args[0] not in ("is-active", "is-enabled", "status"):
        return usage_error("systemctl", argv)
    verb, units = args[0], [u.removesuffix(".service") for u in args[1:]]
    out, rc = [], 0
    for unit in units:
        state = host.services.get(unit)
        if verb == "is-enabled":
            out.append("enabled" if state is not None else "not-found")
            rc = rc or (0 if state is not None else 1)
            continue
        if state is None:
            if verb == "status":
                return ToolOutput("", f"Unit {unit}.service could not be found.\n", 4)
            out.append("inactive")
            rc = 3
            continue
        if verb == "status":
            sub = "running" if state == "active" else "dead"
            out.append(f"* {unit}.service\n     Loaded: loaded (/lib/systemd/system/{unit}.service; enabled)\n"
                       f"     Active: {state} ({sub})")
        else:
            out.append(state)
        if state != "active":
            rc = 3
    return ToolOutput("\n".join(out) + "\n", "", rc)


def _users(host: HostState, name: str) -> list[str]:
    return [u for u in USERS.get(name, "").split(",") if u in host.kernel_modules]


def _lsmod(host: HostState) -> ToolOutput:
    rows = ["Module                  Size  Used by"]
    for name in host.kernel_modules:
        users = _users(host, name)
        rows.append(f"{name:<19} {MODULE_SIZES.get(name, 16384):>8}  {len(users)} {','.join(users)}".rstrip())
    return ToolOutput("\n".join(rows) + "\n")


def _proc_modules(host: HostState) -> str:
    # name size refcount users, state address taint (the address reads 0 without CAP_SYSLOG; out-of-tree and
    # unsigned modules carry (OE))
    rows = []
    for name in host.kernel_modules:
        users = _users(host, name)
        taint = " (POE)" if name == "nvidia" else " (OE)" if name.startswith("nvidia") else ""
        rows.append(f"{name} {MODULE_SIZES.get(name, 16384)} {len(users)} {','.join(users) + ',' if users else '-'} "
                    f"Live 0x0000000000000000{taint}")
    return "\n".join(rows) + "\n" if rows else ""


def files(host: HostState) -> dict[str, str | None]:
    out: dict[str, str | None] = {"/proc/modules": _proc_modules(host)}
    for name in host.kernel_modules:
        out[f"/sys/module/{name}/refcnt"] = f"{len(_users(host, name))}\n"
    return out


def _modinfo(host: HostState, argv: list[str]) -> ToolOutput:
    args = argv[1:]
    field = None
    if len(args) >= 2 and args[0] == "-F":
        field, args = args[1], args[2:]
    if len(args) != 1:
        return usage_error("modinfo", argv)
    name = args[0]
    known = name in MODULE_SIZES or name in host.kernel_modules
    if name.startswith("nvidia") and not host.driver.installed:
        known = False
    if not known:
        return ToolOutput("", f"modinfo: ERROR: Module {name} not found.\n", 1)
    version = host.driver.kernel_module_version if name.startswith("nvidia") else "23.10-1.1.9"
    info = {"filename": f"/lib/modules/{host.software.kernel}/updates/dkms/{name}.ko", "version": version,
            "license": "Dual MIT/GPL" if name.startswith("nvidia") else "Dual BSD/GPL",
            "description": f"{name} kernel module"}
    if field:
        return ToolOutput(info.get(field, "") + "\n")
    return ToolOutput("".join(f"{k + ':':<16}{v}\n" for k, v in info.items()))


def run(host: HostState, argv: list[str]) -> ToolOutput:
    if argv[0] == "systemctl":
        return _systemctl(host, argv)
    if argv[0] == "lsmod":
        return _lsmod(host)
    return _modinfo(host, argv)
