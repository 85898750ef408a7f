"""nvidia-smi: the default table, -L, and dispatch to the query, -q, nvlink and topo renderers.

Driver states decide first (not installed: command not found; module not loaded: "couldn't
communicate" rc 9; user-space/kernel mismatch: rc 18), then per-GPU states (infoROM warnings, a GPU
lost from the bus: "Unable to determine the device handle" rc 15). Also writes the driver's files:
/proc/driver/nvidia/version and the /dev/nvidia* nodes.
"""

from __future__ import annotations

import time

from agent.sim.state import Gpu, HostState
from agent.sim.state.gpu import DRIVER_BUILD_DATE
from agent.sim.tools import ToolOutput, nvidia_smi_links, nvidia_smi_q, nvidia_smi_query, usage_error
from agent.sim.tools import _nvml as nvml

COMMANDS = ("nvidia-smi",)
WIDTH = 91
RULE = "+" + "-" * 89 + "+"
SPLIT = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"


def installed(host: HostState, command: str) -> bool:
    return nvml.tools_present(host) and not nvml.tool_missing(host, command)


def run(host: HostState, argv: list[str]) -> ToolOutput:
    args = argv[1:]
    if args and args[0] in ("nvlink", "topo"):
        renderer = nvidia_smi_links.nvlink if args[0] == "nvlink" else nvidia_smi_links.topo
        return _guarded(host, argv, lambda: renderer(host, args[1:]))
    opts = _options(args)
    if opts is None:
        return usage_error("nvidia-smi", argv)
    if any(k.startswith("--query-") for k in opts):
        return _guarded(host, argv, lambda: nvidia_smi_query.query(host, opts))
    if "-q" in opts:
        return _guarded(host, argv, lambda: nvidia_smi_q.render(host, opts.get("-d"), opts.get("-i")))
    if "-L" in opts:
        return _guarded(host, argv, lambda: _list(host))
    if not opts or set(opts) <= {"-i"}:
        return _guarded(host, argv, lambda: _table(host, opts.get("-i")))
    return usage_error("nvidia-smi", argv)


ALIASES = {"--query": "-q", "--list-gpus": "-L", "--display": "-d", "--id": "-i"}
TAKES_VALUE = {"-d", "-i", "--format"}


def _options(args: list[str]) -> dict[str, str] | None:
    """Flags and values as nvidia-smi accepts them (-d X, --display=X, --query-gpu=a,b)."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        key, eq, value = arg.partition("=")
        key = ALIASES.get(key, key)
        if eq:
            opts[key] = value
        elif key in TAKES_VALUE:
            if i + 1 >= len(args):
                return None
            opts[key] = args[i + 1]
            i += 1
        elif key in ("-q", "-L") or key.startswith("--query-"):
            opts[key] = ""
        else:
            return None
        i += 1
    return opts


def _guarded(host: HostState, argv: list[str], render) -> ToolOutput:
    """Driver-level failures replace any output; infoROM warnings precede it."""
    error = nvml.driver_error(host)
    if error is not None:
        message, rc = error
        return ToolOutput(message, "", rc)
    out: ToolOutput = render()
    warnings = nvml.inforom_warnings(host)
    if warnings:
        out.stdout = "\n".join(warnings) + "\n" + out.stdout
    return out


def _list(host: HostState) -> ToolOutput:
    lines, rc = [], 0
    for index, gpu in nvml.select(host, None):
        if gpu.fallen_off_bus:
            lines.append(nvml.lost_message(gpu))
            rc = nvml.RC_GPU_LOST
            continue
        lines.append(f"GPU {index}: {gpu.name} (UUID: {gpu.uuid})")
        if gpu.mig_mode:
            for k, mig in enumerate(gpu.mig_instances):
                lines.append(f"  MIG {gpu.mig_profile or '1g.10gb':<13} Device {k:>2}: (UUID: {mig})")
    return ToolOutput("\n".join(lines) + "\n", "", rc)


def _table(host: HostState, only: str | None) -> ToolOutput:
    selected = nvml.select(host, only)
    lost = [g for _, g in selected if g.fallen_off_bus]
    if lost:
        # NVML cannot enumerate a lost device, and nvidia-smi gives up on the whole table
        return ToolOutput("\n".join(nvml.lost_message(g) for g in lost) + "\n", "", nvml.RC_GPU_LOST)
    driver = host.driver
    out = [time.strftime("%a %b %d %H:%M:%S %Y"), RULE,
           f"| NVIDIA-SMI {driver.version:<23}Driver Version: {driver.kernel_module_version:<15}"
           f"CUDA Version: {driver.cuda_version:<9}|",
           "|" + SPLIT[1:],
           "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
           "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
           "|                                         |                        |               MIG M. |",
           "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|"]
    for index, gpu in selected:
        out += _gpu_rows(index, gpu)
        out.append(SPLIT)
    out += ["", RULE,
            "| Processes:" + " " * 78 + "|",
            "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |",
            "|        ID   ID                                                               Usage      |",
            "|" + "=" * 89 + "|"]
    rows = [_process_row(index, gpu.mig_mode, p) for index, gpu in selected for p in gpu.processes]
    out += rows or ["|  No running processes found" + " " * 61 + "|"]
    out.append(RULE)
    return ToolOutput("\n".join(out) + "\n")


def _gpu_rows(index: int, gpu: Gpu) -> list[str]:
    persistence = "On" if gpu.persistence_mode else "Off"
    ecc = str(gpu.ecc_volatile_dram_uncorrected + gpu.ecc_volatile_sram_uncorrected) \
        if gpu.ecc_mode == "Enabled" else "N/A"
    used = used_mib(gpu)
    mig = "Enabled" if gpu.mig_mode else "Disabled"
    return [
        f"|{index:>4}  {_short(gpu.name):<29}{persistence:>4}  |{gpu.bus_id:>19} Off |{ecc:>21} |",
        f"| N/A{gpu.temperature_c:>5}C{pstate(gpu):>6}{round(gpu.power_draw_w):>15}W / {round(gpu.power_limit_w):>4}W |"
        f"{used:>8}MiB / {gpu.memory_total_mib:>6}MiB |{gpu.utilization_pct:>7}%{gpu.compute_mode:>13} |",
        f"|{'':41}|{'':24}|{mig:>21} |",
    ]


def _short(name: str) -> str:
    """The table's name cell: long names lose their tail to "..." ("NVIDIA RTX 6000 Ada Gene...")."""
    return name if len(name) <= 29 else name[:24] + "..."


def _process_row(index: int, mig: bool, proc) -> str:
    gi = ci = "N/A" if not mig else "0"
    name = proc.name if len(proc.name) <= 40 else "..." + proc.name[-37:]
    return f"|{index:>5}   {gi:>3}  {ci:>3}  {proc.pid:>9}      C   {name:<40}{proc.used_mib:>8}MiB |"


def used_mib(gpu: Gpu) -> int:
    return sum(p.used_mib for p in gpu.processes)


def pstate(gpu: Gpu) -> str:
    return "P0" if gpu.utilization_pct or gpu.sm_clock_mhz >= gpu.max_sm_clock_mhz * 0.5 else "P5"


def files(host: HostState) -> dict[str, str | None]:
    """/proc/driver/nvidia/version while the module is loaded; the /dev nodes the driver created."""
    out: dict[str, str | None] = {}
    driver = host.driver
    if not (driver.installed and driver.module_loaded):
        return out
    out["/proc/driver/nvidia/version"] = (
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {driver.kernel_module_version}  {DRIVER_BUILD_DATE}\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")
    if host.container.inside and not host.container.nvidia_runtime:
        return out
    if driver.device_nodes:
        out["/dev/nvidiactl"] = None
        for minor, _gpu in enumerate(nvml.devices(host)):
            out[f"/dev/nvidia{minor}"] = None
    if driver.device_nodes and driver.uvm_device_nodes:
        out["/dev/nvidia-uvm"] = None
        out["/dev/nvidia-uvm-tools"] = None
    return out
