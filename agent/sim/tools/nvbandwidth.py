"""nvbandwidth -t TEST...: copy-bandwidth matrices derived from each GPU's PCIe link and NVLinks.

Host<->device cells scale with PCIe generation and width; device<->device cells with the active
NVLinks of both ends, falling to PCIe rates without NVLink and collapsing where ACS redirects peer
traffic. A CUDA context that cannot be created fails the run the way CUDA reports it.
"""

from __future__ import annotations

from agent.sim.state import Gpu, HostState
from agent.sim.tools import ToolOutput, usage_error
from agent.sim.tools import _nvml as nvml

COMMANDS = ("nvbandwidth",)
VERSION = "v0.4"
# test -> (title of the matrix, kind: h2d | d2h | d2d, factor on the one-way bandwidth)
TESTS = {
    "host_to_device_memcpy_ce": ("memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)", "h2d", 1.0),
    "device_to_host_memcpy_ce": ("memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)", "d2h", 1.0),
    "host_to_device_bidirectional_memcpy_ce": ("memcpy CE CPU(row) <-> GPU(column) bandwidth (GB/s)", "h2d", 0.9),
    "device_to_host_bidirectional_memcpy_ce": ("memcpy CE CPU(row) <-> GPU(column) bandwidth (GB/s)", "d2h", 0.9),
    "device_to_device_memcpy_read_ce": ("memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)", "d2d", 1.0),
    "device_to_device_memcpy_write_ce": ("memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)", "d2d", 1.0),
    "device_to_device_bidirectional_memcpy_read_ce": ("memcpy CE GPU(row) <-> GPU(column) bandwidth (GB/s)",
                                                      "d2d", 0.93),
    "host_to_device_memcpy_sm": ("memcpy SM CPU(row) -> GPU(column) bandwidth (GB/s)", "h2d", 0.98),
    "device_to_host_memcpy_sm": ("memcpy SM CPU(row) <- GPU(column) bandwidth (GB/s)", "d2h", 0.98),
    "device_to_device_memcpy_read_sm": ("memcpy SM GPU(row) <- GPU(column) bandwidth (GB/s)", "d2d", 0.97),
    "device_to_device_memcpy_write_sm": ("memcpy SM GPU(row) -> GPU(column) bandwidth (GB/s)", "d2d", 0.97),
}


def installed(host: HostState, command: str) -> bool:
    return host.driver.installed and not nvml.tool_missing(host, command)


def run(host: HostState, argv: list[str]) -> ToolOutput:
    tests, listing = _parse(argv[1:])
    if tests is None:
        return usage_error("nvbandwidth", argv)
    if listing:
        return ToolOutput("".join(f"{i}, {name}:\n\t{TESTS[name][0]}\n" for i, name in enumerate(TESTS)))
    unknown = [t for t in tests if t not in TESTS]
    if unknown:
        return ToolOutput("", f"ERROR: Testcase {unknown[0]} not found!\n", 1)
    head = _banner(host)
    error = _cuda_error(host)
    if error:
        return ToolOutput(head, f"CUDA error: {error} in function cuInit\n", 1)
    gpus = nvml.cuda_devices(host)
    head += "".join(f"Device {i}: {g.name} ({g.bus_id[:14]})\n" for i, g in enumerate(gpus)) + "\n"
    body = []
    for test in tests or list(TESTS):
        title, kind, factor = TESTS[test]
        if kind == "d2d" and len(gpus) < 2:
            body.append("Waived: \n")
            continue
        body.append(_matrix(host, test, title, kind, factor, gpus))
    return ToolOutput(head + "".join(body) + "NOTE: The reported results may not reflect the full capabilities of "
                      "the platform.\nPerformance can vary with software drivers, hardware clocks, and system "
                      "topology.\n")


def _parse(args: list[str]) -> tuple[list[str] | None, bool]:
    tests: list[str] = []
    listing = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-t", "--testcase"):
            i += 1
            while i < len(args) and not args[i].startswith("-"):
                tests.append(args[i])
                i += 1
            continue
        if arg.startswith("--testcase="):
            tests += arg.split("=", 1)[1].split(",")
        elif arg in ("-i", "--testSamples", "-b", "--bufferSize") and i + 1 < len(args):
            i += 1
        elif arg in ("-l", "--list"):
            listing = True
        elif arg not in ("-v", "--verbose", "-d", "--disableAffinity", "-j", "--json"):
            return None, False
        i += 1
    return tests, listing


def _banner(host: HostState) -> str:
    major, _, minor = host.driver.cuda_version.partition(".")
    cuda = f"{int(major)}{int(minor or 0):02d}0"
    return (f"nvbandwidth Version: {VERSION}\nBuilt from Git version: {VERSION}\n\n"
            f"CUDA Runtime Version: {cuda}\nCUDA Driver Version: {cuda}\n"
            f"Driver Version: {host.driver.kernel_module_version}\n\n")


def _cuda_error(host: HostState) -> str | None:
    """What cuInit / the first context reports on this host, or None when CUDA works."""
    driver = host.driver
    if not driver.module_loaded or not driver.device_nodes or not driver.uvm_device_nodes:
        return "no CUDA-capable device is detected"
    if driver.version != driver.kernel_module_version:
        return "system has unsupported display driver / cuda driver combination"
    if not driver.uvm_healthy:
        return "unknown error"
    if host.nvswitch_count and host.fabric_manager.state != "Completed":
        return "system not yet initialized"
    broken = next((g for g in nvml.cuda_devices(host) if g.cuda_error), None)
    if broken is not None and broken.cuda_error:
        return broken.cuda_error.removeprefix("CUDA error: ")
    if not nvml.cuda_devices(host):
        return "no CUDA-capable device is detected"
    return None


def _matrix(host: HostState, test: str, title: str, kind: str, factor: float, gpus: list[Gpu]) -> str:
    cols = range(len(gpus))
    lines = [f"Running {test}.", title, "  " + "".join(f"{c:>10}" for c in cols)]
    total = 0.0
    if kind == "d2d":
        for r, row_gpu in enumerate(gpus):
            cells = []
            for c, col_gpu in enumerate(gpus):
                if r == c:
                    cells.append(f"{'N/A':>10}")
                    continue
                value = round(nvml.p2p_gbps(host, row_gpu, col_gpu) * factor, 2)
                total += value
                cells.append(f"{value:>10.2f}")
            lines.append(f"{r:>2}" + "".join(cells))
    else:
        values = [round(nvml.h2d_gbps(g) * factor * (0.995 if kind == "d2h" else 1.0), 2) for g in gpus]
        total = sum(values)
        lines.append(f"{0:>2}" + "".join(f"{v:>10.2f}" for v in values))
    lines += ["", f"SUM {test} {total:.2f}", "", ""]
    return "\n".join(lines)
