"""perftest `ib_write_bw` in loopback: server (no host argument) and client (`localhost`) outputs.

Bandwidth follows the port: line rate x wire efficiency, lower with a small active MTU; a port that is
not Active fails the way perftest does ("Port number 1 state is Down"), and `--use_cuda` without a
peer-memory module fails to register the GPU buffer ("Couldn't allocate MR"). Layout as in SuperBench's
ib_loopback test data and linux-rdma/perftest write_bw.c.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.sim.state import Hca, HostState
from agent.sim.tools import ToolOutput, usage_error
from agent.sim.tools import _nvml as nvml
from agent.sim.tools._rdma import WIRE_EFFICIENCY, gdr_module, verbs_present

COMMANDS = ("ib_write_bw",)
LINE = "-" * 87 + "\n"
MTU_FACTOR = {4096: 1.0, 2048: 0.985, 1024: 0.95, 512: 0.88, 256: 0.75}
PORT_STATES = {"Down": "Down", "Initializing": "Init", "Armed": "Armed"}


@dataclass
class Args:
    device: str | None = None
    size: int = 65536
    iters: int = 5000
    gbits: bool = False
    all_sizes: bool = False
    cuda: int | None = None
    gid_index: int | None = None
    server: str | None = None  # the host a client connects to; None: this is the server


def installed(host: HostState, command: str) -> bool:
    return verbs_present(host) and command not in host.software.missing_tools


def _parse(argv: list[str]) -> Args | None:
    args = Args()
    rest = argv[1:]
    takes_value = {"-d", "--ib-dev", "-s", "--size", "-n", "--iters", "-x", "--gid-index", "-p", "--port",
                   "-i", "--ib-port", "-D", "--duration", "-q", "--qp", "--use_cuda", "-m", "--mtu"}
    i = 0
    while i < len(rest):
        arg, value = rest[i], None
        if "=" in arg and arg.startswith("--"):
            arg, value = arg.split("=", 1)
        elif arg in takes_value:
            if i + 1 >= len(rest):
                return None
            value = rest[i + 1]
            i += 1
        try:
            if arg in ("-d", "--ib-dev"):
                args.device = value
            elif arg in ("-s", "--size"):
                args.size = int(str(value))
            elif arg in ("-n", "--iters"):
                args.iters = int(str(value))
            elif arg in ("-x", "--gid-index"):
                args.gid_index = int(str(value))
            elif arg == "--use_cuda":
                args.cuda = int(str(value))
            elif arg == "--report_gbits":
                args.gbits = True
            elif arg in ("-a", "--all"):
                args.all_sizes = True
            elif not arg.startswith("-"):
                args.server = arg
            elif arg not in takes_value and arg not in ("-F", "--CPU-freq", "--perform_warm_up", "-R", "--rdma_cm"):
                return None
        except ValueError:
            return None
        i += 1
    return args


def _cuda_preamble(host: HostState, index: int) -> str:
    lines = ["initializing CUDA", "Listing all CUDA devices in system:"]
    for g in host.gpus:
        _, bus, device, _ = nvml.bdf_numbers(g.bus_id)
        lines.append(f"CUDA device {g.index}: PCIe address is {bus:02X}:{device:02X}")
    gpu = host.gpus[index]
    lines += ["", f"Picking device No. {index}", f"[pid = 41721, dev = {index}] device name = [{gpu.name}]",
              "creating CUDA Ctx", "making it the current CUDA Ctx", "CUDA device integrated: 0",
              "cuMemAlloc() of a 16777216 bytes GPU buffer",
              "allocated GPU buffer address at 00007f0a12600000 pointer=0x7f0a12600000"]
    return "\n".join(lines) + "\n"


def _header(hca: Hca, args: Args) -> str:
    ib = hca.link_layer == "InfiniBand"
    rows = [
        "                    RDMA_Write BW Test",
        f" Dual-port       : OFF\t\tDevice         : {hca.name}",
        " Number of qps   : 1\t\tTransport type : IB",
        " Connection type : RC\t\tUsing SRQ      : OFF",
        " PCIe relax order: ON",
        " ibv_wr* API     : ON",
    ]
    if args.server is not None:
        rows.append(" TX depth        : 128")
    rows += [" CQ Moderation   : 1", f" Mtu             : {hca.active_mtu}[B]",
             f" Link type       : {'IB' if ib else 'Ethernet'}"]
    if not ib:
        rows.append(f" GID index       : {args.gid_index if args.gid_index is not None else 0}")
    rows += [" Max inline data : 0[B]", " rdma_cm QPs\t : OFF", " Data ex. method : Ethernet"]
    lid = f"{hca.lid:#06x}" if ib else "0000"
    gid = "" if ib else " GID: " + _gid_dotted(hca, args.gid_index or 0)
    return (LINE + "\n".join(rows) + "\n" + LINE
            + f" local address: LID {lid} QPN 0x0127 PSN 0x8a1e2f RKey 0x1fff00 VAddr 0x007f2c1a800000{gid}\n"
            + f" remote address: LID {lid} QPN 0x0128 PSN 0x3b4c5d RKey 0x1fee00 VAddr 0x007f0a12600000{gid}\n"
            + LINE)


def _gid_dotted(hca: Hca, index: int) -> str:
    gid = next((g.gid for g in hca.gids if g.index == index), "0000:" * 7 + "0000")
    digits = gid.replace(":", "")
    return ":".join(f"{int(digits[i:i + 2], 16):02d}" for i in range(0, 32, 2))


def _bw_gbps(hca: Hca, size: int) -> float:
    peak = hca.rate * WIRE_EFFICIENCY * MTU_FACTOR.get(hca.active_mtu, 0.9)
    return peak * size / (size + 12288)  # per-message overhead dominates small sizes


def _row(size: int, iters: int, gbps: float, gbits: bool) -> str:
    scale = 1.0 if gbits else 125.0  # Gb/s -> MB/s
    peak, avg = gbps * 1.0029 * scale, gbps * scale
    mpps = gbps * 1e9 / 8 / size / 1e6
    return f" {size:<10} {iters:<16} {peak:.2f}{' ' * 13}{avg:.2f}{' ' * 13}{mpps:.6f}\n"


def _failure(host: HostState, hca: Hca | None, args: Args) -> ToolOutput | None:
    if hca is None:
        return ToolOutput("", f"IB device {args.device} not found\n Unable to find the Infiniband/RoCE device\n", 1)
    if hca.state != "Active":
        return ToolOutput("", f" Port number {hca.port} state is {PORT_STATES.get(hca.state, 'Down')}\n"
                              " Couldn't set the link layer\n Couldn't get context for the device\n", 1)
    if args.cuda is None:
        return None
    if not host.driver.module_loaded or not host.gpus:
        return ToolOutput("initializing CUDA\ncuInit(0) returned 100\n",
                          "Couldn't init GPU context: 1\n Couldn't create IB resources\n", 1)
    if args.cuda >= len(host.gpus):
        return ToolOutput("initializing CUDA\n", f"No such device ID ({args.cuda}) exists in system\n", 1)
    if gdr_module(host) is None:  # ibv_reg_mr on device memory needs a peer-memory client
        return ToolOutput(_cuda_preamble(host, args.cuda),
                          "Couldn't allocate MR\nFailed to create MR\n Couldn't create IB resources\n", 1)
    return None


def run(host: HostState, argv: list[str]) -> ToolOutput:
    args = _parse(argv)
    if args is None:
        return usage_error("ib_write_bw", argv)
    hca = next((h for h in host.hcas if h.name == args.device), None) if args.device else (
        host.hcas[0] if host.hcas else None)
    failed = _failure(host, hca, args)
    if failed is not None:
        return failed
    assert hca is not None
    unit = "Gb/sec" if args.gbits else "MB/sec"
    out = _cuda_preamble(host, args.cuda) if args.cuda is not None else ""
    if args.server is None:
        out += "\n************************************\n* Waiting for client to connect... *\n"
        out += "************************************\n"
    out += _header(hca, args)
    out += f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]\n"
    sizes = [1 << k for k in range(1, 24)] if args.all_sizes else [args.size]
    iters = 2000 if args.all_sizes else args.iters
    out += "".join(_row(size, iters, _bw_gbps(hca, size), args.gbits) for size in sizes)
    out += LINE
    if args.cuda is not None:
        out += "deallocating GPU buffer 00007f0a12600000\ndestroying current CUDA Ctx\n"
    return ToolOutput(out)
