"""GPU-side state of a simulated host: devices, driver, fabric manager, GPU processes.

Every default describes a healthy device; faults change these fields and the renderers derive what
nvidia-smi, DCGM, lspci and nvbandwidth show from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DRIVER_BUILD_DATE = "Tue Mar  5 22:42:28 UTC 2024"  # as the NVRM banner and /proc/driver/nvidia/version print it


@dataclass
class GpuProcess:
    pid: int
    name: str
    used_mib: int


@dataclass
class Gpu:
    index: int
    name: str
    bus_id: str  # "00000000:19:00.0"
    uuid: str
    serial: str
    vbios: str
    memory_total_mib: int
    compute_capability: str = "9.0"
    pci_device_id: str = "2330"  # PCI device id (10de:2330 = H100 SXM5 80GB)
    # visibility: on the PCI bus (lspci) / usable by the driver (nvidia-smi)
    on_bus: bool = True
    driver_bound: bool = True
    fallen_off_bus: bool = False  # lspci shows rev ff, nvidia-smi "Unable to determine the device handle"
    numa_node: int = 0
    pcie_switch: str = ""  # bus id of the PCIe switch above the GPU ("0000:16:00.0")
    nic_bus_id: str = ""  # bus id of the NIC behind the same switch (topo: PIX)
    # memory errors
    ecc_mode: str = "Enabled"
    ecc_volatile_dram_uncorrected: int = 0
    ecc_volatile_dram_corrected: int = 0
    ecc_volatile_sram_uncorrected: int = 0
    ecc_volatile_sram_corrected: int = 0
    ecc_aggregate_dram_uncorrected: int = 0
    ecc_aggregate_dram_corrected: int = 0
    ecc_aggregate_sram_uncorrected: int = 0
    ecc_aggregate_sram_corrected: int = 0
    sram_threshold_exceeded: bool = False
    remapped_correctable: int = 0
    remapped_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    inforom_corrupt: bool = False
    # NVLink: one entry per link, speed in GB/s, None = <inactive>
    nvlink: list[float | None] = field(default_factory=list)
    nvlink_crc_errors: int = 0
    nvlink_replay_errors: int = 0
    # PCIe
    pcie_gen_current: int = 5
    pcie_gen_max: int = 5
    pcie_width_current: int = 16
    pcie_width_max: int = 16
    pcie_replays: int = 0  # "Replays Since Reset"
    pcie_replay_rate: float = 0.0  # replays per minute, as DCGM's PCIe health watch measures it
    pcie_aer_errors: int = 0
    # clocks / thermal / power
    temperature_c: int = 34
    memory_temperature_c: int = 40
    power_draw_w: float = 72.0
    power_limit_w: float = 700.0
    default_power_limit_w: float = 700.0
    sm_clock_mhz: int = 1980
    max_sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    clocks_event_reasons: int = 0x0  # bitmask, see nvidia-smi clocks_event_reasons
    utilization_pct: int = 0
    persistence_mode: bool = True
    mig_mode: bool = False
    mig_instances: list[str] = field(default_factory=list)  # MIG device UUIDs when MIG is on
    mig_profile: str = ""  # profile of those instances, e.g. "3g.40gb"
    compute_mode: str = "Default"
    # compute behaviour seen by CUDA probes and active tests
    cuda_error: str | None = None  # error a CUDA context/kernel on this GPU raises
    sm_defect: bool = False  # GEMM results mismatch, DCGM diagnostic fails
    perf_factor: float = 1.0  # relative GEMM throughput (straggler < 1)
    processes: list[GpuProcess] = field(default_factory=list)


@dataclass
class Driver:
    version: str = "535.161.08"  # user-space (NVML) version
    kernel_module_version: str = "535.161.08"
    installed: bool = True
    module_loaded: bool = True
    device_nodes: bool = True  # /dev/nvidia0.., /dev/nvidiactl
    uvm_device_nodes: bool = True  # /dev/nvidia-uvm
    uvm_healthy: bool = True
    persistenced_active: bool = True
    cuda_version: str = "12.2"  # max CUDA version the driver supports (nvidia-smi banner)
    gsp_firmware: bool = True


@dataclass
class FabricManager:
    installed: bool = True
    active: bool = True
    version: str = "535.161.08"
    state: str = "Completed"  # nvidia-smi -q Fabric State
    status: str = "Success"
