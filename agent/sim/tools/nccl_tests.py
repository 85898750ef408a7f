"""nccl-tests `all_reduce_perf` / `all_gather_perf` (single process, `-g N`), derived from the host.

Intra-node: bus bandwidth is the slowest GPU's active NVLink bandwidth x algorithm efficiency (NVLS on
NVSwitch Hopper reaches ~99 %, rings ~78 %); without an NVLink path NCCL falls back to PCIe P2P, which
hangs when ACS redirects peer traffic (rendered as nccl-tests' own `-T` timeout, never a real sleep).
With NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 every hop crosses the network, so the run measures the
HCAs NCCL picked (see _nccl.plan). Output layout as in nccl-tests 2.13 (root and #wrong columns).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from agent.sim.state import Gpu, HostState
from agent.sim.tools import ToolOutput, usage_error
from agent.sim.tools import _nvml as nvml
from agent.sim.tools._nccl import SOCKET_BUSBW, NetPlan, plan
from agent.sim.tools._rdma import WIRE_EFFICIENCY

COMMANDS = ("all_reduce_perf", "all_gather_perf")
PLUGIN_DIR = "/usr/lib/x86_64-linux-gnu"
PID = 41721
NVLS_EFFICIENCY = 0.9935  # NVLink SHARP all-reduce on HGX H100: 475 of 478 GB/s per GPU
RING_EFFICIENCY = 0.775  # ring all-reduce / all-gather over NVLink: A100 232 of 300 GB/s
PCIE_P2P_BUSBW = 21.6  # GB/s, GPU<->GPU through a PCIe switch (Gen4/Gen5 x16)
NET_RING_EFFICIENCY = 0.95  # IB loopback ring vs. the port's payload rate: Azure NDv5 46.4 of 48.9 GB/s
NO_GDR_FACTOR = 0.55  # staging through host memory when the HCA cannot reach GPU memory
EARLY_INFO = ("Bootstrap", "NET/Plugin", "Plugin name", "Failed to open libibverbs")
SIZE_SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


@dataclass
class Args:
    min_bytes: int = 32 << 20
    max_bytes: int = 32 << 20
    factor: int = 2
    gpus: int = 1
    timeout: int = 0
    check: bool = True


def installed(host: HostState, command: str) -> bool:
    return command not in host.software.missing_tools


def _size(text: str) -> int:
    text = text.strip()
    unit = SIZE_SUFFIX.get(text[-1:].upper(), 1)
    return int(float(text.rstrip("KMGkmg")) * unit)


def _parse(argv: list[str]) -> Args | None:
    args = Args()
    rest = argv[1:]
    flags = {"-b": "min_bytes", "--minbytes": "min_bytes", "-e": "max_bytes", "--maxbytes": "max_bytes",
             "-f": "factor", "--stepfactor": "factor", "-g": "gpus", "--ngpus": "gpus", "-T": "timeout",
             "--timeout": "timeout", "-c": "check", "--check": "check"}
    ignored = {"-t", "--nthreads", "-n", "--iters", "-w", "--warmup_iters", "-m", "--agg_iters", "-o", "--op",
               "-d", "--datatype", "-r", "--root", "-z", "--blocking", "-G", "--cudagraph", "-a", "--average",
               "-y", "--stream_null", "-C", "--report_cputime", "-R", "--local_register"}
    i = 0
    while i < len(rest):
        arg = rest[i]
        if i + 1 >= len(rest) or (arg not in flags and arg not in ignored):
            return None
        value = rest[i + 1]
        try:
            if arg in ("-b", "--minbytes", "-e", "--maxbytes"):
                setattr(args, flags[arg], _size(value))
            elif arg in ("-c", "--check"):
                args.check = value != "0"
            elif arg in flags:
                setattr(args, flags[arg], int(value))
        except ValueError:
            return None
        i += 2
    return args if args.gpus >= 1 and args.min_bytes <= args.max_bytes else None


def _sizes(args: Args) -> list[int]:
    sizes, size = [], args.min_bytes
    while size <= args.max_bytes:
        sizes.append(size)
        if args.factor <= 1:
            break
        size *= args.factor
    return sizes


def _cuda_error(host: HostState, n: int) -> str | None:
    if not host.driver.installed or not host.driver.module_loaded or not host.driver.device_nodes:
        return "no CUDA-capable device is detected"
    visible = [g for g in host.gpus if g.on_bus and g.driver_bound and not g.fallen_off_bus]
    if len(visible) < n:
        return "invalid device ordinal"
    return next((g.cuda_error for g in visible[:n] if g.cuda_error), None)


def _nvlink_gbps(gpu: Gpu) -> float:
    return sum(link for link in gpu.nvlink if link)


def _intranode_busbw(host: HostState, gpus: list[Gpu], env: Mapping[str, str], collective: str) -> float | None:
    """Bus bandwidth at large sizes; None: the collective hangs."""
    if len(gpus) == 1:
        return 0.0
    p2p = env.get("NCCL_P2P_DISABLE", "0") != "1"
    slowest = min(_nvlink_gbps(g) for g in gpus)
    if slowest == 0 or not p2p:
        if p2p and any(s.acs_src_valid for s in host.pcie_switches):
            return None  # peer writes bounce off the root complex and never complete
        width = min(g.pcie_width_current / max(g.pcie_width_max, 1) for g in gpus)
        return PCIE_P2P_BUSBW * width
    nvls = (collective == "all_reduce" and host.nvswitch_count > 0 and env.get("NCCL_NVLS_ENABLE", "1") != "0"
            and all(float(g.compute_capability) >= 9.0 for g in gpus))
    return slowest * (NVLS_EFFICIENCY if nvls else RING_EFFICIENCY)


def _net_busbw(net: NetPlan, n: int) -> float:
    if net.transport == "Socket" or not net.devices:
        return SOCKET_BUSBW
    load = Counter(i % len(net.devices) for i in range(n))
    mtu = {4096: 1.0, 2048: 0.985, 1024: 0.95}
    per_gpu = min(net.devices[k].rate * WIRE_EFFICIENCY / 8 * mtu.get(net.devices[k].active_mtu, 0.9) / count
                  for k, count in load.items())
    return per_gpu * NET_RING_EFFICIENCY * (1.0 if net.gdr else NO_GDR_FACTOR)


def _bus_id(gpu: Gpu) -> str:
    """NCCL's busId: the BDF's hex digits read as one number (0000:1b:00.0 -> 1b000, 0000:00:1e.0 -> 1e0)."""
    domain, bus, device, function = nvml.bdf_numbers(gpu.bus_id)
    return f"{domain << 20 | bus << 12 | device << 4 | function:x}"


def _prefix(host: HostState, rank: int, tid: int) -> str:
    return f"{host.hostname}:{PID}:{tid} [{rank}]"


def _nccl_lines(host: HostState, gpus: list[Gpu], env: Mapping[str, str], net: NetPlan, over_net: bool,
                nvls: bool) -> list[str]:
    level = env.get("NCCL_DEBUG", "").upper()
    lines = []
    early = [t for t in net.info if t.startswith(EARLY_INFO)]  # printed by ncclGetUniqueId, before the banner
    if level in ("INFO", "TRACE"):
        lines += [f"{_prefix(host, 0, PID)} NCCL INFO {text}" for text in early]
    if level in ("WARN", "INFO", "TRACE"):
        lines += [f"{_prefix(host, 0, PID)} NCCL WARN {text}" for text in net.warn]
    if net.error:
        return lines
    if level in ("VERSION", "WARN", "INFO", "TRACE"):
        lines.append(f"NCCL version {host.software.nccl}+cuda{host.software.torch_cuda}")
    if level not in ("INFO", "TRACE"):
        return lines
    tid = PID + 60
    lines += [f"{_prefix(host, 0, tid)} NCCL INFO {text}" for text in net.info if text not in early]
    n = len(gpus)
    for rank, gpu in enumerate(gpus):
        peer = gpus[(rank + 1) % n]
        if over_net:
            dev = rank % max(len(net.devices), 1)
            via = f"NET/{net.transport}/{dev}" + ("/GDRDMA" if net.gdr and net.transport != "Socket" else "")
            hop = f"{rank}[{_bus_id(gpu)}] -> {(rank + 1) % n}[{_bus_id(peer)}] [send] via {via}"
        elif env.get("NCCL_P2P_DISABLE", "0") == "1":
            hop = f"{rank}[{_bus_id(gpu)}] -> {(rank + 1) % n}[{_bus_id(peer)}] via SHM/direct/direct"
        else:
            hop = f"{rank}[{_bus_id(gpu)}] -> {(rank + 1) % n}[{_bus_id(peer)}] via P2P/IPC/read"
        lines.append(f"{_prefix(host, rank, tid + rank)} NCCL INFO Channel 00/0 : {hop}")
    if nvls:
        lines.append(f"{_prefix(host, 0, tid)} NCCL INFO NVLS multicast support is available on dev 0")
        lines.append(f"{_prefix(host, 0, tid)} NCCL INFO Connected NVLS")
    lines.append(f"{_prefix(host, 0, tid)} NCCL INFO Connected all rings")
    lines += [f"{_prefix(host, r, PID)} NCCL INFO comm 0x55d5c8e{r}f0 rank {r} nranks {n} cudaDev {r} busId "
              f"{_bus_id(g)} commId 0x7f3d2c1b5a6e9d04 - Init COMPLETE" for r, g in enumerate(gpus)]
    return lines


def _header(host: HostState, args: Args, gpus: list[Gpu]) -> list[str]:
    lines = [f"# nThread 1 nGpus {args.gpus} minBytes {args.min_bytes} maxBytes {args.max_bytes} step: "
             f"{args.factor}(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: {int(args.check)} graph: 0",
             "#", "# Using devices"]
    lines += [f"#  Rank {g.index:2d} Group  0 Pid {PID:6d} on {host.hostname:>10} device {g.index:2d} "
              f"[{g.bus_id[4:14].lower()}] {g.name}" for g in gpus]
    return lines


TABLE_HEAD = [
    "#",
    "#                                                              out-of-place                       in-place",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw"
    " #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
]


def _time_text(usec: float) -> str:
    # nccl-tests keeps the column 7 wide by dropping decimals as the time grows
    return f"{usec:.0f}" if usec >= 10000 else f"{usec:.1f}" if usec >= 100 else f"{usec:.2f}"


def _rows(args: Args, collective: str, n: int, peak: float, wrong: int) -> tuple[list[str], float]:
    factor = 2 * (n - 1) / n if collective == "all_reduce" else (n - 1) / n
    rows, total = [], 0.0
    for size in _sizes(args):
        busbw = peak * size / (size + (48 << 20))  # latency dominates below ~100 MB
        algbw = busbw / factor if factor else 0.0
        time_us = size / (algbw * 1e3) if algbw else 1.0
        count = size // 4 // (n if collective == "all_gather" else 1)
        redop = "sum" if collective == "all_reduce" else "none"
        bad = str(wrong) if args.check else "N/A"
        half = f"  {_time_text(time_us):>7}  {algbw:6.2f}  {busbw:6.2f}  {bad:>5}"
        rows.append(f"{size:12d}  {count:12d}  {'float':>8}  {redop:>6}  {-1:6d}{half}{half}")
        total += busbw
    return rows, total / max(len(rows), 1)


def run(host: HostState, argv: list[str]) -> ToolOutput:
    args = _parse(argv)
    if args is None:
        return usage_error(argv[0], argv)
    collective = "all_reduce" if argv[0] == "all_reduce_perf" else "all_gather"
    env = os.environ
    error = _cuda_error(host, args.gpus)
    if error:
        return ToolOutput(f"{host.hostname}: Test CUDA failure common.cu:892 '{error}'\n"
                          f" .. {host.hostname} pid {PID}: Test failure common.cu:1061\n", "", 2)
    gpus = [g for g in host.gpus if g.on_bus and g.driver_bound][: args.gpus]
    net = plan(host, env)
    over_net = env.get("NCCL_P2P_DISABLE") == "1" and env.get("NCCL_SHM_DISABLE") == "1" and args.gpus > 1
    peak = _net_busbw(net, args.gpus) if over_net else _intranode_busbw(host, gpus, env, collective)
    nvls = not over_net and peak is not None and peak > PCIE_P2P_BUSBW and collective == "all_reduce" \
        and host.nvswitch_count > 0 and env.get("NCCL_P2P_DISABLE", "0") != "1"
    out = _header(host, args, gpus) + _nccl_lines(host, gpus, env, net, over_net, nvls)
    if net.error:
        out += [f"{host.hostname}: Test NCCL failure common.cu:958 '{net.error}'",
                f" .. {host.hostname} pid {PID}: Test failure common.cu:1061"]
        return ToolOutput("\n".join(out) + "\n", "", 3)
    out += TABLE_HEAD
    if peak is None:
        limit = args.timeout or 300
        out += [f"{host.hostname}: Test timeout ({limit}s) common.cu:424",
                f" .. {host.hostname} pid {PID}: Test failure common.cu:1061"]
        return ToolOutput("\n".join(out) + "\n", "", 4)
    wrong = 1024 if any(g.sm_defect for g in gpus) else 0
    rows, average = _rows(args, collective, args.gpus, peak, wrong)
    bad_rows = len(rows) * 2 if wrong else 0
    out += [*rows, f"# Out of bounds values : {bad_rows} {'FAILED' if wrong else 'OK'}",
            f"# Avg bus bandwidth    : {average:.4g}", "#"]
    return ToolOutput("\n".join(out) + "\n", "", 1 if wrong else 0)


def files(host: HostState) -> dict[str, str | None]:
    """NCCL net plugins installed on the host (NCCL dlopens them from the library path)."""
    return {f"{PLUGIN_DIR}/{name}": None for name in host.software.nccl_net_plugins}
