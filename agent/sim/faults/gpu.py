"""GPU, driver, fabric-manager, NVLink/PCIe/topology and GPU-process faults, plus GPU noise.

Each fault changes the device/driver state that nvidia-smi, DCGM, lspci and nvbandwidth are rendered
from, and writes the kernel lines the real driver prints (Xid text as NVRM logs it). Fields the CUDA
probes read (Gpu.cuda_error, sm_defect, perf_factor, driver_bound, Driver.*) are set where a real
CUDA program would see the fault.
"""

from __future__ import annotations

import hashlib

from agent.sim.faults.registry import FaultError, Param, fault, noise
from agent.sim.state import Gpu, GpuProcess, HostState, SelEvent, hardware
from agent.sim.tools._nvml import bdf_kernel, bdf_sysfs

GPU = Param("gpu", int, 3, help="GPU index (nvidia-smi order on the healthy host)")
JOB_PID = 41721
JOB_PROCESS = "/usr/bin/python3.10"
DRIVER_PREFIXES = ("nvidia", "NVRM", "[drm] [nvidia-drm]", "Disabling lock debugging")


def _gpu(host: HostState, index: int) -> Gpu:
    return host.gpu(index)  # KeyError names the valid indices; the scenario turns it into a FaultError


def _require_nvlink(host: HostState, fid: str) -> None:
    if not any(g.nvlink for g in host.gpus):
        raise FaultError(f"{fid}: {host.profile} has no NVLink (its GPUs talk over PCIe only)")


def _who(pid: int | None, name: str | None) -> str:
    return f"pid={pid}, name={name}" if pid else "pid='<unknown>', name=<unknown>"


def xid(host: HostState, gpu: Gpu, code: int, text: str, age_s: float = 300.0, pid: int | None = None,
        name: str | None = None) -> None:
    """An NVRM Xid line; the driver names the GPU (UUID, serial) before its first Xid since boot."""
    bdf = bdf_kernel(gpu.bus_id)
    if not any(f"NVRM: GPU at PCI:{bdf}:" in line.text for line in host.journal):
        host.kernel(f"NVRM: GPU at PCI:{bdf}: {gpu.uuid}", age_s=age_s + 0.002)
        host.kernel(f"NVRM: GPU Board Serial Number: {gpu.serial}", age_s=age_s + 0.001)
    host.kernel(f"NVRM: Xid (PCI:{bdf}): {code}, {_who(pid, name)}, {text}", age_s=age_s)


def _phys_addr(gpu: Gpu) -> int:
    return 0x1200000000 + int(hashlib.sha256(gpu.uuid.encode()).hexdigest()[:7], 16) * 0x20


def _load(gpu: Gpu, util: int = 100, power: float = 0.85) -> None:
    gpu.utilization_pct = util
    gpu.power_draw_w = round(gpu.power_limit_w * power, 2)


# ---- memory ------------------------------------------------------------------------------------------
@fault("gpu.ecc_uncorrectable", "GPU.MEMORY.UNCORRECTABLE_ECC", GPU, Param("count", int, 1))
def ecc_uncorrectable(host: HostState, p: dict) -> None:
    """HBM double-bit error: volatile+aggregate DBE, row marked for remap, Xid 48 then 63; CUDA fails on it."""
    gpu = _gpu(host, p["gpu"])
    if p["count"] < 1:
        raise FaultError(f"gpu.ecc_uncorrectable: count must be >= 1, got {p['count']}")
    gpu.ecc_volatile_dram_uncorrected += p["count"]
    gpu.ecc_aggregate_dram_uncorrected += p["count"]
    gpu.remap_pending = True
    gpu.cuda_error = "CUDA error: uncorrectable ECC error encountered"
    addr = _phys_addr(gpu)
    xid(host, gpu, 48, "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
                       f"physAddr 0x{addr:x} partition 2, subpartition 1.", age_s=900.0)
    xid(host, gpu, 63, f"Row Remapper: New row (0x{addr:016x}) marked for remapping, reset gpu to activate.",
        age_s=899.97)


@fault("gpu.row_remap_pending", "GPU.MEMORY.ROW_REMAP_PENDING", GPU)
def row_remap_pending(host: HostState, p: dict) -> None:
    """Correctable-error row marked for remapping; applies only after a GPU reset (Xid 63)."""
    gpu = _gpu(host, p["gpu"])
    gpu.remapped_correctable += 1
    gpu.remap_pending = True
    gpu.ecc_aggregate_dram_corrected += 2
    xid(host, gpu, 63, f"Row Remapper: New row (0x{_phys_addr(gpu):016x}) marked for remapping, reset gpu to "
                       "activate.", age_s=1500.0)


@fault("gpu.row_remap_failure", "GPU.MEMORY.ROW_REMAP_FAILURE", GPU)
def row_remap_failure(host: HostState, p: dict) -> None:
    """A bank ran out of spare rows: Remapping Failure Occurred Yes, Xid 64 (RMA path)."""
    gpu = _gpu(host, p["gpu"])
    gpu.remap_failure = True
    gpu.remapped_uncorrectable += 1
    gpu.ecc_aggregate_dram_uncorrected += 1
    xid(host, gpu, 64, f"Row Remapper Error: (0x{_phys_addr(gpu):016x}) - All reserved rows for bank are remapped",
        age_s=1200.0)


@fault("gpu.ecc_contained", "GPU.MEMORY.CONTAINED_ECC_ERROR", GPU,
       Param("kind", str, "contained", choices=("contained", "uncontained")))
def ecc_contained(host: HostState, p: dict) -> None:
    """Uncorrectable error the GPU contained to the job's channels (Xid 94); uncontained: Xid 95, reset needed."""
    gpu = _gpu(host, p["gpu"])
    gpu.ecc_volatile_dram_uncorrected += 1
    gpu.ecc_aggregate_dram_uncorrected += 1
    if p["kind"] == "uncontained":
        xid(host, gpu, 95, "Uncontained: FBHUB. RST: Yes, D-RST: No", age_s=600.0)
        gpu.cuda_error = "CUDA error: uncorrectable ECC error encountered"
        return
    xid(host, gpu, 94, "Contained: SM (0x1). RST: No, D-RST: No", age_s=600.0)
    for k, channel in enumerate(range(8, 12)):
        xid(host, gpu, 94, f"Ch {channel:08x}", age_s=599.99 - 0.01 * k, pid=JOB_PID + gpu.index, name="python3.10")


@fault("gpu.inforom_corrupt", "GPU.MEMORY.INFOROM_CORRUPTION", GPU)
def inforom_corrupt(host: HostState, p: dict) -> None:
    """InfoROM unreadable: nvidia-smi warns on every call and reports the InfoROM fields as N/A."""
    _gpu(host, p["gpu"]).inforom_corrupt = True


# ---- availability / hardware ---------------------------------------------------------------------------
@fault("gpu.fallen_off_bus", "GPU.AVAILABILITY.FALLEN_OFF_BUS", GPU)
def fallen_off_bus(host: HostState, p: dict) -> None:
    """Xid 79: the GPU stops answering on PCIe; lspci reads rev ff, NVML cannot get its handle."""
    gpu = _gpu(host, p["gpu"])
    gpu.fallen_off_bus = True
    gpu.cuda_error = "CUDA error: unknown error"
    gpu.utilization_pct = 0
    gpu.processes = []
    _fall_off(host, gpu, age_s=420.0)


def _fall_off(host: HostState, gpu: Gpu, age_s: float) -> None:
    bdf = bdf_sysfs(gpu.bus_id)
    xid(host, gpu, 79, "GPU has fallen off the bus.", age_s=age_s)
    for k, text in enumerate([f"NVRM: GPU {bdf}: GPU has fallen off the bus.", f"NVRM: The NVIDIA GPU {bdf}",
                              f"NVRM: (PCI ID: 10de:{gpu.pci_device_id}) installed in this system has",
                              "NVRM: fallen off the bus and is not responding to commands."]):
        host.kernel(text, age_s=age_s - 0.001 * (k + 1), priority=3)


@fault("gpu.missing", "GPU.AVAILABILITY.MISSING_GPU", GPU)
def missing(host: HostState, p: dict) -> None:
    """The GPU is on the PCI bus but the driver failed to initialise it at boot: lspci 8, nvidia-smi 7."""
    gpu = _gpu(host, p["gpu"])
    gpu.driver_bound = False
    bdf = bdf_sysfs(gpu.bus_id)
    boot = host.uptime_s - 11.0
    host.kernel(f"NVRM: GPU {bdf}: RmInitAdapter failed! (0x24:0x65:1459)", age_s=boot, priority=3)
    host.kernel(f"NVRM: GPU {bdf}: rm_init_adapter failed, device minor number {gpu.index}", age_s=boot - 0.001,
                priority=3)


XID_TEXT = {
    62: "0e8a(1d6c) 00000000 00000000",
    45: "Ch 00000010",
    13: "Graphics SM Warp Exception on (GPC 4, TPC 1, SM 0): Out Of Range Address",
    46: "GPU stopped processing",
    109: "Ch 00000012, errorString CTX SWITCH TIMEOUT, Info 0x3c040",
}


@fault("gpu.faulty", "GPU.HARDWARE.FAULTY_GPU", GPU, Param("xid", int, 62, help="Xid the driver logs; 0: none"))
def faulty(host: HostState, p: dict) -> None:
    """Defective SMs: GEMM results mismatch, DCGM diagnostics fail; the driver logs the Xid it raised."""
    gpu = _gpu(host, p["gpu"])
    gpu.sm_defect = True
    if p["xid"]:
        app = p["xid"] in (13, 45)
        xid(host, gpu, p["xid"], XID_TEXT.get(p["xid"], "Ch 00000010"), age_s=1800.0,
            pid=JOB_PID + gpu.index if app else None, name="python3.10" if app else None)


@fault("gpu.slow", "GPU.PERFORMANCE.SLOW_GPU_STRAGGLER", GPU, Param("factor", float, 0.8))
def slow(host: HostState, p: dict) -> None:
    """A straggler: under load its SM clock and GEMM throughput stay at `factor` of the others'."""
    if not 0.0 < p["factor"] < 1.0:
        raise FaultError(f"gpu.slow: factor must be between 0 and 1, got {p['factor']}")
    gpu = _gpu(host, p["gpu"])
    gpu.perf_factor = p["factor"]
    gpu.sm_clock_mhz = int(gpu.max_sm_clock_mhz * p["factor"])
    _load(gpu, power=0.7)


@fault("gpu.power_brake", "GPU.POWER.PSU_INSUFFICIENT", GPU, Param("xid", int, 0, help="79: the GPU also drops"))
def power_brake(host: HostState, p: dict) -> None:
    """Insufficient PSU capacity: the board asserts HW power brake under load; the BMC logs a PSU event."""
    gpu = _gpu(host, p["gpu"])
    _load(gpu, power=0.99)
    gpu.clocks_event_reasons |= 0x88  # HW slowdown + HW power brake
    gpu.sm_clock_mhz = int(gpu.max_sm_clock_mhz * 0.55)
    host.sel.append(SelEvent(age_s=700.0, sensor="Power Supply PSU3", event="Failure detected"))
    if p["xid"] == 79:
        gpu.fallen_off_bus = True
        gpu.cuda_error = "CUDA error: unknown error"
        _fall_off(host, gpu, age_s=650.0)
    elif p["xid"]:
        raise FaultError(f"gpu.power_brake: xid may be 0 or 79, got {p['xid']}")


@fault("gpu.thermal_throttle", "GPU.THERMAL.OVERHEATING_THROTTLE", GPU, Param("temp", int, 92))
def thermal_throttle(host: HostState, p: dict) -> None:
    """Overheating: temperature above the slowdown point, HW/SW thermal slowdown active, clocks low."""
    gpu = _gpu(host, p["gpu"])
    gpu.temperature_c = p["temp"]
    gpu.memory_temperature_c = p["temp"] + 6
    gpu.clocks_event_reasons |= 0x68  # HW slowdown + SW thermal + HW thermal
    gpu.sm_clock_mhz = int(gpu.max_sm_clock_mhz * 0.62)
    _load(gpu, power=0.8)


# ---- driver -------------------------------------------------------------------------------------------
@fault("driver.library_mismatch", "SYSTEM_SOFTWARE.DRIVER.LIBRARY_VERSION_MISMATCH",
       Param("version", str, "550.90.07", help="user-space driver version installed over the loaded module"))
def library_mismatch(host: HostState, p: dict) -> None:
    """User-space driver upgraded without reloading the kernel module: NVML refuses to initialise."""
    loaded = host.driver.kernel_module_version
    if p["version"] == loaded:
        raise FaultError(f"driver.library_mismatch: version must differ from the loaded module {loaded}")
    host.driver.version = p["version"]
    for k, text in enumerate([f"NVRM: API mismatch: the client has the version {p['version']}, but",
                              f"NVRM: this kernel module has the version {loaded}.  Please",
                              "NVRM: make sure that this kernel module and all NVIDIA driver",
                              "NVRM: components have the same version."]):
        host.kernel(text, age_s=240.0 - 0.001 * k, priority=3)


@fault("driver.module_not_loaded", "SYSTEM_SOFTWARE.DRIVER.KERNEL_MODULE_NOT_LOADED")
def module_not_loaded(host: HostState, p: dict) -> None:
    """The nvidia kernel module never loaded this boot (e.g. kernel updated without DKMS rebuild)."""
    host.driver.module_loaded = False
    host.kernel_modules = [m for m in host.kernel_modules if not m.startswith("nvidia")]
    host.journal = [line for line in host.journal
                    if not (line.ident == "kernel" and line.text.startswith(DRIVER_PREFIXES))]


@fault("driver.device_nodes_missing", "SYSTEM_SOFTWARE.DRIVER.DEVICE_NODES_MISSING",
       Param("nodes", str, "all", choices=("all", "uvm")))
def device_nodes_missing(host: HostState, p: dict) -> None:
    """Module loaded but /dev/nvidia* (or only /dev/nvidia-uvm) was never created."""
    if p["nodes"] == "all":
        host.driver.device_nodes = False
    host.driver.uvm_device_nodes = False


@fault("driver.persistence_off", "SYSTEM_SOFTWARE.DRIVER.PERSISTENCE_MODE_DISABLED")
def persistence_off(host: HostState, p: dict) -> None:
    """nvidia-persistenced stopped and persistence mode off: the driver tears GPUs down between jobs."""
    host.driver.persistenced_active = False
    host.services["nvidia-persistenced"] = "inactive"
    for gpu in host.gpus:
        gpu.persistence_mode = False


@fault("driver.uvm_corrupt", "SYSTEM_SOFTWARE.DRIVER.UVM_MODULE_STATE_CORRUPT")
def uvm_corrupt(host: HostState, p: dict) -> None:
    """nvidia_uvm in a bad state (e.g. after suspend/resume): every CUDA init reports "unknown error"."""
    host.driver.uvm_healthy = False
    for k, gpu in enumerate(host.gpus[:2]):
        host.kernel(f"nvidia-uvm: uvm_gpu.c:1309 init_gpu[pid:{JOB_PID + k}] Failed to init GPU "
                    f"{bdf_sysfs(gpu.bus_id)}: Unknown error", age_s=480.0 - k, priority=3)


@fault("driver.gsp_bug", "SYSTEM_SOFTWARE.DRIVER.GSP_FIRMWARE_BUG",
       Param("version", str, "525.85.12", help="driver with the GSP RPC timeout bug"), Param("gpu", int, 4))
def gsp_bug(host: HostState, p: dict) -> None:
    """A driver whose GSP firmware times out RPCs: Xid 119 bursts until the GPU is reset."""
    gpu = _gpu(host, p["gpu"])
    _set_driver_version(host, p["version"])
    times = [1800.0, 1794.0, 1788.0, 1632.0, 1451.0]
    for k, age in enumerate(times):
        fn = ("103 (GSP_RM_ALLOC) (0x2081 0x4)", "10 (FREE) (0xa55a0210 0x0)", "10 (FREE) (0xa55a0090 0x0)",
              "76 (GSP_RM_CONTROL) (0x20801813 0x4c)", "76 (GSP_RM_CONTROL) (0x20803032 0x58c)")[k]
        who = (JOB_PID, "python3.10") if k < 3 else (2210 + k, "nvidia-smi")
        xid(host, gpu, 119, f"Timeout after 6s of waiting for RPC response from GPU{gpu.index} GSP! Expected "
                            f"function {fn}.", age_s=age, pid=who[0], name=who[1])
        if k == 2:
            host.kernel(f"NVRM: Rate limiting GSP RPC error prints for GPU at PCI:{bdf_kernel(gpu.bus_id)} "
                        "(printing 1 of every 30).  The GPU likely needs to be reset.", age_s=age - 6.0)


def _set_driver_version(host: HostState, version: str) -> None:
    """Install another driver release consistently: module, user space, fabric manager, packages, boot log."""
    old = host.driver.kernel_module_version
    host.driver.version = host.driver.kernel_module_version = version
    if host.fabric_manager.version == old:
        host.fabric_manager.version = version
    packages = host.software.packages
    for name in [n for n in packages if n.startswith(("nvidia-driver-", "nvidia-fabricmanager-"))]:
        packages[name] = packages[name].replace(old, version)
    for line in host.journal:
        if line.ident == "kernel" and "NVIDIA" in line.text and old in line.text:
            line.text = line.text.replace(old, version)


# ---- fabric manager, NVLink, PCIe, topology --------------------------------------------------------------
@fault("fabricmanager.down", "SYSTEM_SOFTWARE.FABRIC_MANAGER.NOT_RUNNING_OR_VERSION_MISMATCH",
       Param("reason", str, "not_running", choices=("not_running", "version_mismatch")))
def fabricmanager_down(host: HostState, p: dict) -> None:
    """nvidia-fabricmanager not running (or refusing a driver of another version): NVSwitch fabric untrained."""
    if not host.nvswitch_count:
        raise FaultError(f"fabricmanager.down: {host.profile} has no NVSwitch, so no fabric manager")
    fm = host.fabric_manager
    fm.active = False
    fm.state, fm.status = "In Progress", "N/A"
    host.services["nvidia-fabricmanager"] = "inactive"
    if p["reason"] == "version_mismatch":
        fm.version = "535.129.03" if host.driver.kernel_module_version != "535.129.03" else "535.104.05"
        host.services["nvidia-fabricmanager"] = "failed"
        for name in [n for n in host.software.packages if n.startswith("nvidia-fabricmanager-")]:
            host.software.packages[name] = f"{fm.version}-1"
        host.log("nv-fabricmanager", f"fabric manager NVIDIA GPU driver interface version {fm.version} don't match "
                 f"with driver version {host.driver.kernel_module_version}. Please update with matching NVIDIA "
                 "driver package.", age_s=host.uptime_s - 30.0, priority=3)


@fault("nvlink.link_down", "INTERCONNECT_NETWORKING.NVLINK.LINK_HARDWARE_FAULT", GPU,
       Param("links", list, [6, 7], help="link numbers that went down"))
def nvlink_down(host: HostState, p: dict) -> None:
    """NVLinks of one GPU inactive after a fatal link error (Xid 74): NV18 drops to NV16 in topo."""
    _require_nvlink(host, "nvlink.link_down")
    gpu = _gpu(host, p["gpu"])
    bad = [k for k in p["links"] if not 0 <= k < len(gpu.nvlink)]
    if bad or not p["links"]:
        raise FaultError(f"nvlink.link_down: GPU {gpu.index} has links 0..{len(gpu.nvlink) - 1}; got {p['links']}")
    for k, link in enumerate(p["links"]):
        gpu.nvlink[link] = None
        xid(host, gpu, 74, f"NVLink: fatal error detected on link {link}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
            age_s=1000.0 - k)
    gpu.nvlink_replay_errors += 37


@fault("nvlink.not_enabled", "INTERCONNECT_NETWORKING.NVLINK.NVLINK_NOT_ENABLED")
def nvlink_not_enabled(host: HostState, p: dict) -> None:
    """No NVLink between the GPUs (no bridge / fabric disabled): every link inactive, P2P over PCIe."""
    _require_nvlink(host, "nvlink.not_enabled")
    for gpu in host.gpus:
        gpu.nvlink = [None] * len(gpu.nvlink)


@fault("pcie.link_degraded", "INTERCONNECT_NETWORKING.PCIE.RISER_OR_SLOT_FAULT", GPU, Param("width", int, 8))
def pcie_degraded(host: HostState, p: dict) -> None:
    """Bad riser/slot: the link trained at reduced width, corrected AER errors and replays accumulate."""
    gpu = _gpu(host, p["gpu"])
    if not 1 <= p["width"] < gpu.pcie_width_max:
        raise FaultError(f"pcie.link_degraded: width must be below x{gpu.pcie_width_max}, got {p['width']}")
    gpu.pcie_width_current = p["width"]
    gpu.pcie_replays += 4200
    gpu.pcie_replay_rate = 57.0
    gpu.pcie_aer_errors += 3
    dev, port = bdf_sysfs(gpu.bus_id), gpu.pcie_switch.lower()
    for k in range(3):
        age = 2400.0 - 600.0 * k
        for m, text in enumerate([f"pcieport {port}: AER: Corrected error received: {dev}",
                                  f"nvidia {dev}: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
                                  "(Receiver ID)",
                                  f"nvidia {dev}:   device [10de:{gpu.pci_device_id}] error "
                                  "status/mask=00000001/0000e000",
                                  f"nvidia {dev}:    [ 0] RxErr                  (First)"]):
            host.kernel(text, age_s=age - 0.001 * m)


@fault("topology.misdetected", "INTERCONNECT_NETWORKING.TOPOLOGY.PCI_TOPOLOGY_MISDETECTED")
def topology_misdetected(host: HostState, p: dict) -> None:
    """The platform reports no PCIe/NUMA locality (broken ACPI tables / VM topology): every GPU-NIC pair SYS."""
    host.topology_ok = False


# ---- the job's use of the GPUs ----------------------------------------------------------------------------
def _rank(gpu: Gpu, rank: int, used_mib: int) -> None:
    gpu.processes.append(GpuProcess(pid=JOB_PID + rank, name=JOB_PROCESS, used_mib=used_mib))
    _load(gpu)


def _usable_mib(gpu: Gpu) -> int:
    return gpu.memory_total_mib - 551


@fault("user.batch_oom", "USER_APPLICATION.CONFIG.BATCH_SIZE_OOM")
def batch_oom(host: HostState, p: dict) -> None:
    """The batch is too large: each rank's process holds all the memory of its GPU (then OOMs)."""
    for rank, gpu in enumerate(host.gpus):
        _rank(gpu, rank, _usable_mib(gpu) - 118)


@fault("user.device_assignment", "USER_APPLICATION.CODE.DEVICE_ASSIGNMENT_ERROR")
def device_assignment(host: HostState, p: dict) -> None:
    """Ranks never call set_device(local_rank): every process runs on GPU 0, the other GPUs idle."""
    gpu0 = host.gpus[0]
    share = _usable_mib(gpu0) // (len(host.gpus) + 1)
    for rank in range(len(host.gpus)):
        _rank(gpu0, rank, share)


@fault("user.checkpoint_gpu0", "USER_APPLICATION.CODE.CHECKPOINT_LOADED_TO_GPU0")
def checkpoint_gpu0(host: HostState, p: dict) -> None:
    """torch.load without map_location: every rank also materialises the checkpoint on GPU 0."""
    gpu0 = host.gpus[0]
    extra = min(2970, _usable_mib(gpu0) // 25)
    for rank, gpu in enumerate(host.gpus):
        _rank(gpu, rank, int(_usable_mib(gpu) * 0.6))
        if rank:
            gpu0.processes.append(GpuProcess(pid=JOB_PID + rank, name=JOB_PROCESS, used_mib=extra))


@fault("user.mig_misuse", "USER_APPLICATION.CONFIG.MIG_MULTI_INSTANCE_MISUSE", Param("gpu", int, 0),
       Param("instances", int, 2))
def mig_misuse(host: HostState, p: dict) -> None:
    """MIG is on and CUDA_VISIBLE_DEVICES names several MIG instances: CUDA enumerates only the first."""
    gpu = _gpu(host, p["gpu"])
    if not hardware.part(gpu.pci_device_id).mig:
        raise FaultError(f"user.mig_misuse: {host.profile} ({gpu.name}) has no MIG")
    if not 2 <= p["instances"] <= 7:
        raise FaultError(f"user.mig_misuse: instances must be 2..7, got {p['instances']}")
    gpu.mig_mode = True
    slices = 7 // p["instances"]
    gpu.mig_profile = f"{slices}g.{gpu.memory_total_mib * slices // 8 // 1024}gb"
    gpu.mig_instances = ["MIG-" + _uuid(gpu.uuid, k) for k in range(p["instances"])]
    host.env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu.mig_instances)


def _uuid(seed: str, k: int) -> str:
    h = hashlib.sha256(f"{seed}/{k}".encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@fault("user.illegal_memory_access", "USER_APPLICATION.CODE.ILLEGAL_MEMORY_ACCESS", GPU,
       Param("xid", int, 31, help="31 (MMU fault) or 13 (SM exception)"))
def illegal_memory_access(host: HostState, p: dict) -> None:
    """A kernel of the job read out of bounds: Xid 31 (MMU fault) or 13 for the job's pid, then channel reset."""
    gpu = _gpu(host, p["gpu"])
    pid = JOB_PID + gpu.index
    if p["xid"] == 31:
        xid(host, gpu, 31, "Ch 0000000c, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ "
                           "0x7f2a_8c000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ", age_s=700.0, pid=pid,
            name="python3.10")
    elif p["xid"] == 13:
        for k, text in enumerate(["Graphics SM Warp Exception on (GPC 3, TPC 2, SM 1): Out Of Range Address",
                                  "Graphics SM Global Exception on (GPC 3, TPC 2, SM 1): Multiple Warp Errors",
                                  "Graphics Exception: ESR 0x51e730=0x102000e 0x51e734=0x24 0x51e728=0xf81eb60 "
                                  "0x51e72c=0x1174"]):
            xid(host, gpu, 13, text, age_s=700.0 - 0.001 * k, pid=pid, name="python3.10")
    else:
        raise FaultError(f"user.illegal_memory_access: xid must be 13 or 31, got {p['xid']}")
    xid(host, gpu, 43, "Ch 00000008", age_s=699.9, pid=pid, name="python3.10")


# ---- noise ------------------------------------------------------------------------------------------------
@noise("noise.old_xid13")
def old_xid13(host: HostState, p: dict) -> None:
    """An application's Xid 13 three days ago: still in dmesg, outside any incident window."""
    gpu = host.gpus[1 % len(host.gpus)]
    xid(host, gpu, 13, "Graphics SM Warp Exception on (GPC 0, TPC 4, SM 1): Out Of Range Address",
        age_s=3 * 86400.0, pid=1193847, name="python3.10")


@noise("noise.correctable_ecc")
def correctable_ecc(host: HostState, p: dict) -> None:
    """A few corrected single-bit errors, well below any threshold."""
    for gpu in host.gpus[2::3]:
        gpu.ecc_volatile_dram_corrected += 2
        gpu.ecc_aggregate_dram_corrected += 14
        gpu.ecc_aggregate_sram_corrected += 1


@noise("noise.idle_clocks")
def idle_clocks(host: HostState, p: dict) -> None:
    """Idle GPUs clock down: low SM clock with the Idle event reason, low power."""
    for gpu in host.gpus:
        gpu.utilization_pct = 0
        gpu.sm_clock_mhz = 345
        gpu.clocks_event_reasons = 0x1
        gpu.power_draw_w = round(gpu.power_limit_w * 0.1, 2)
