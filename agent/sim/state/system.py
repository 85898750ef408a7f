"""OS, software, container, processes, logs and BMC state of a simulated host."""

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


@dataclass
class Software:
    os_name: str = "Ubuntu 22.04.4 LTS"
    kernel: str = "5.15.0-1061-azure"
    python: str = "3.10.12"
    torch: str = "2.1.2"
    torch_cuda: str = "12.1"
    torch_arch_list: list[str] = field(default_factory=lambda: ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80",
                                                                    "sm_86", "sm_90"])
    nccl: str = "2.18.5"  # NCCL bundled with torch
    system_nccl: str | None = None  # a libnccl.so on LD_LIBRARY_PATH, if any
    cuda_toolkit: str = "12.2"  # nvcc / user-space CUDA runtime in the image
    cudnn: str = "8.9.2"
    python_packages: dict[str, str] = field(default_factory=lambda: {
        "transformers": "4.36.2", "accelerate": "0.25.0", "deepspeed": "0.12.6"})
    container_toolkit: str | None = "1.14.6"
    ofed: str | None = "MLNX_OFED_LINUX-23.10-1.1.9.0"
    hpcx_ofed: str | None = "MLNX_OFED_LINUX-23.10-1.1.9.0"  # OFED the installed HPC-X/UCX was built for
    rdma_core: bool = True  # libibverbs / rdma-core user space present
    packages: dict[str, str] = field(default_factory=dict)  # dpkg-query view: name -> version
    nccl_net_plugins: list[str] = field(default_factory=lambda: ["libnccl-net.so"])


@dataclass
class Container:
    inside: bool = False  # the checks run inside a container
    nvidia_runtime: bool = True  # the container runtime has the nvidia runtime configured
    devices_cgroup_ok: bool = True  # devices cgroup still allows /dev/nvidia*


@dataclass
class PcieSwitch:
    bus_id: str
    name: str = "PLX Technology, Inc. PEX 89144"
    acs_src_valid: bool = False


@dataclass
class EdacCounts:
    correctable: int = 0
    uncorrectable: int = 0


@dataclass
class Mount:
    path: str
    size_bytes: int
    used_bytes: int = 0
    fstype: str = "tmpfs"
    source: str = "tmpfs"
