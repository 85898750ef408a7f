"""OS, software, container, processes, logs and BMC state of a simulated host.

Every default describes a healthy host: faults change these fields, renderers show them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LogLine:
    """One journal line; `age_s` is how long before "now" it was written, so a host never goes stale."""

    age_s: float
    ident: str  # "kernel", "systemd-networkd", "slurmd", ...
    text: str
    priority: int = 6


@dataclass
class SelEvent:
    """One BMC System Event Log entry (ipmitool sel elist)."""

    age_s: float
    sensor: str  # "Power Supply PSU1", "System ACPI Power State ACPI", ...
    event: str
    direction: str = "Asserted"


@dataclass
class StackFrame:
    function: str
    file: str
    line: int


@dataclass
class Thread:
    tid: int
    name: str
    frames: list[StackFrame] = field(default_factory=list)  # innermost first, as py-spy prints
    idle: bool = False


@dataclass
class Process:
    pid: int
    cmdline: str
    rank: int | None = None
    threads: list[Thread] = field(default_factory=list)
    ppid: int = 1
    env: dict[str, str] = field(default_factory=dict)  # /proc/PID/environ (RANK, LOCAL_RANK, ...)
    python: str = "3.10.12"
    python_path: str = "/usr/bin/python3.10"


def _default_packages() -> dict[str, str]:
    return {"transformers": "4.36.2", "accelerate": "0.27.2", "deepspeed": "0.12.6"}


@dataclass
class Software:
    os_name: str = "Ubuntu 22.04.4 LTS"
    kernel: str = "5.15.0-1061-azure"
    python: str = "3.10.12"
    torch: str = "2.1.2"
    torch_cuda: str = "12.1"
    torch_arch_list: list[str] = field(default_factory=lambda: ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80",
                                                                    "sm_86", "sm_90"])
    nccl: str = "2.18.5"  # NCCL bundled with torch (the nvidia-nccl-cu12 wheel)
    system_nccl: str | None = None  # a libnccl.so on LD_LIBRARY_PATH, if any
    system_nccl_dir: str = "/usr/local/nccl/lib"
    cuda_toolkit: str | None = "12.2"  # nvcc / user-space CUDA runtime in the image; None: no toolkit
    cudnn: str = "8.9.2"
    python_packages: dict[str, str] = field(default_factory=_default_packages)
    container_toolkit: str | None = "1.14.6"
    ofed: str | None = "MLNX_OFED_LINUX-23.10-1.1.9.0"
    hpcx_ofed: str | None = "MLNX_OFED_LINUX-23.10-1.1.9.0"  # OFED the installed HPC-X/UCX was built for
    rdma_core: bool = True  # libibverbs / rdma-core user space present
    packages: dict[str, str] = field(default_factory=dict)  # dpkg-query view: name -> version
    nccl_net_plugins: list[str] = field(default_factory=lambda: ["libnccl-net.so"])
    # forward-compatibility libcuda shipped in a container image (/usr/local/cuda/compat), if any
    container_cuda_driver: str | None = None
    docker: str | None = "24.0.7"  # docker engine version; None: no docker on this host
    missing_tools: list[str] = field(default_factory=list)  # executables absent from this host
    bmc_device: bool = True  # /dev/ipmi0 present (in-band IPMI to the BMC)


@dataclass
class Container:
    inside: bool = False  # the checks run inside a container
    nvidia_runtime: bool = True  # the container runtime has the nvidia runtime configured
    devices_cgroup_ok: bool = True  # devices cgroup still allows /dev/nvidia*
    container_id: str = "4f2a9c1e7b3d5a6c8e0f1b2d3c4e5f6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4"


@dataclass
class Machine:
    """The box the GPUs sit in, as DMI and /proc/cpuinfo show it (`sim_machine` in profiles.yaml)."""

    kind: str = "bare-metal"  # "vm" | "bare-metal"
    sys_vendor: str = "Supermicro"
    product_name: str = "SYS-821GE-TNHR"
    instance: str = ""  # the provider's name for the shape (Standard_ND96isr_H100_v5, g6.xlarge)
    cpus: int = 192  # logical CPUs
    smt: bool = True  # two threads per core, numbered as Linux does (second threads after all first threads)
    cpu_model: str = "Intel(R) Xeon(R) Platinum 8480C"

    @property
    def is_vm(self) -> bool:
        return self.kind == "vm"

    def cpulist(self, node: int, numa_nodes: int) -> str:
        """A NUMA node's CPUs as the kernel prints a cpulist ("0-47,96-143"): with SMT, Linux numbers every
        core's first thread before any second thread."""
        cores = self.cpus // 2 if self.smt else self.cpus
        per = max(cores // max(numa_nodes, 1), 1)
        ids = list(range(node * per, (node + 1) * per))
        if self.smt:
            ids += [cores + c for c in ids]
        return compress_cpulist(ids)


def compress_cpulist(ids: list[int]) -> str:
    ranges: list[tuple[int, int]] = []
    for value in sorted(ids):
        if ranges and value == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], value)
        else:
            ranges.append((value, value))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


@dataclass
class PcieSwitch:
    bus_id: str
    name: str = "PLX Technology, Inc. PEX 89144"
    acs_src_valid: bool = False


@dataclass
class EdacCounts:
    correctable: int = 0
    uncorrectable: int = 0
    controllers: int = 2  # mc0..mcN-1
    dimm: str = "CPU_SrcID#0_MC#0_Chan#1_DIMM#0"  # label of the DIMM the errors are on (mc0)


@dataclass
class Mount:
    path: str
    size_bytes: int
    used_bytes: int = 0
    fstype: str = "tmpfs"
    source: str = "tmpfs"
    options: str = ""  # extra /proc/mounts options, e.g. "size=65536k"
