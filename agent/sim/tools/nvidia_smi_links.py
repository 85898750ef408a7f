"""nvidia-smi nvlink -s/-e and nvidia-smi topo -m, derived from each GPU's links and PCIe placement."""

from __future__ import annotations

from agent.sim.state import Gpu, Hca, HostState
from agent.sim.tools import ToolOutput
from agent.sim.tools import _nvml as nvml

ALL_INACTIVE = "NVML: Unable to retrieve NVLink information as all links are inactive"
LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def nvlink(host: HostState, args: list[str]) -> ToolOutput:
    mode, only = None, None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-s", "--status"):
            mode = "status"
        elif arg in ("-e", "--errorcounters"):
            mode = "errors"
        elif arg in ("-i", "--id") and i + 1 < len(args):
            only = args[i + 1]
            i += 1
        elif arg.startswith("--id="):
            only = arg.split("=", 1)[1]
        else:
            return ToolOutput("", f"Invalid combination of input arguments: {' '.join(args)}\n", 2)
        i += 1
    if mode is None:
        return ToolOutput("", "Invalid combination of input arguments. Please run 'nvidia-smi nvlink -h' for help.\n",
                          2)
    lines, rc = [], 0
    for index, gpu in nvml.select(host, only):
        if gpu.fallen_off_bus:
            lines.append(nvml.lost_message(gpu))
            rc = nvml.RC_GPU_LOST
            continue
        if not gpu.nvlink:
            continue  # a GPU without NVLink hardware: the driver lists nothing for it, not even its name
        lines.append(f"GPU {index}: {gpu.name} (UUID: {gpu.uuid})")
        if not nvml.active_links(gpu):
            lines.append(ALL_INACTIVE)
            continue
        lines += _link_status(gpu) if mode == "status" else _link_errors(gpu)
    return ToolOutput("".join(line + "\n" for line in lines), "", rc)


def _link_status(gpu: Gpu) -> list[str]:
    return [f"\t Link {k}: {speed:g} GB/s" if speed else f"\t Link {k}: <inactive>"
            for k, speed in enumerate(gpu.nvlink)]


def _link_errors(gpu: Gpu) -> list[str]:
    # the counters accumulate on the link that misbehaves: the first inactive one, else link 0
    noisy = next((k for k, speed in enumerate(gpu.nvlink) if not speed), 0)
    lines = []
    for k in range(len(gpu.nvlink)):
        replay = gpu.nvlink_replay_errors if k == noisy else 0
        crc = gpu.nvlink_crc_errors if k == noisy else 0
        lines += [f"\t Link {k}: Replay Errors: {replay}", f"\t Link {k}: Recovery Errors: {1 if replay else 0}",
                  f"\t Link {k}: CRC Errors: {crc}"]
    return lines


def topo(host: HostState, args: list[str]) -> ToolOutput:
    if args not in (["-m"], ["--matrix"]):
        return ToolOutput("", "Invalid combination of input arguments. Please run 'nvidia-smi topo -h' for help.\n", 2)
    gpus = nvml.devices(host)
    lost = [g for g in gpus if g.fallen_off_bus]
    if lost:
        return ToolOutput("\n".join(nvml.lost_message(g) for g in lost) + "\n", "", nvml.RC_GPU_LOST)
    nics = sorted(host.hcas, key=lambda h: int(h.name.rsplit("_", 1)[-1]) if h.name[-1].isdigit() else 0)
    names = [f"GPU{i}" for i in range(len(gpus))] + [f"NIC{k}" for k in range(len(nics))]
    rows = ["\t" + "\t".join([*names, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
    for i, gpu in enumerate(gpus):
        cells = [" X " if j == i else _gpu_gpu(gpu, other) for j, other in enumerate(gpus)]
        cells += [_gpu_nic(host, gpu, nic) for nic in nics]
        if host.topology_ok:
            cells += [host.machine.cpulist(gpu.numa_node, host.numa_nodes), str(gpu.numa_node), "N/A"]
        else:
            cells += [f"0-{host.machine.cpus - 1}", "N/A", "N/A"]
        rows.append(f"GPU{i}\t" + "\t".join(cells))
    for k, nic in enumerate(nics):
        cells = [_gpu_nic(host, gpu, nic) for gpu in gpus]
        cells += [" X " if m == k else ("NODE" if other.numa_node == nic.numa_node else "SYS")
                  for m, other in enumerate(nics)]
        rows.append(f"NIC{k}\t" + "\t".join(cells))
    if not nics:
        return ToolOutput("\n".join(rows) + "\n" + LEGEND + "\n")
    legend = ["", "NIC Legend:", ""] + [f"  NIC{k}: {nic.name}" for k, nic in enumerate(nics)]
    return ToolOutput("\n".join(rows) + "\n" + LEGEND + "\n".join(legend) + "\n\n")


def _gpu_gpu(a: Gpu, b: Gpu) -> str:
    """NV# over NVLink, else the PCIe path: one switch (PIX), root ports of one host bridge as a VM presents
    them (PHB), separate switches or root complexes of one socket (NODE), or across sockets (SYS)."""
    links = min(nvml.active_links(a), nvml.active_links(b))
    if links:
        return f"NV{links}"
    if a.numa_node != b.numa_node:
        return "SYS"
    if a.pcie_switch and a.pcie_switch == b.pcie_switch:
        return "PIX"
    if not a.pcie_switch and not b.pcie_switch and nvml.bdf_numbers(a.bus_id)[1] == nvml.bdf_numbers(b.bus_id)[1]:
        return "PHB"
    return "NODE"


def _gpu_nic(host: HostState, gpu: Gpu, nic: Hca) -> str:
    if not host.topology_ok:
        return "SYS"
    if gpu.nic_bus_id and nvml.same_bdf(gpu.nic_bus_id, nic.bus_id):
        return "PIX"
    return "NODE" if gpu.numa_node == nic.numa_node else "SYS"
