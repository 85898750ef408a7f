"""System-software, framework, user-stack and platform faults (and their noise) for simulated hosts.

Each fault changes what the real tools would show: versions (driver, CUDA, NCCL, frameworks, container
toolkit), OS settings, container state, the job's processes and stacks, kernel/journal lines and the
BMC event log. Versions that must be "known-bad" are taken from verification_scripts/known_bad.yaml.
"""

from __future__ import annotations

import re
import time

from agent.checks.versions import vkey
from agent.sim.faults.registry import FaultError, Param, fault, noise
from agent.sim.state import GpuProcess, HostState, Process, SelEvent, StackFrame, Thread
from agent.sim.tools._nvml import bdf_kernel
from agent.sim.tools._versions import TORCH_FOR_NCCL, driver_max_cuda, known_bad_version, min_driver_for

SW = "SYSTEM_SOFTWARE"
PY = "/usr/bin/python3"


def _known_bad(fid: str, kind: str, requested: str | None) -> str:
    try:
        return known_bad_version(kind, requested)
    except ValueError as exc:
        raise FaultError(f"{fid}: {exc}") from None


def _set_driver(host: HostState, version: str) -> None:
    """Another driver release, consistently: module, user space, fabric manager, CUDA level, boot log."""
    old = host.driver.kernel_module_version
    host.driver.version = host.driver.kernel_module_version = version
    host.driver.cuda_version = driver_max_cuda(version)
    if host.fabric_manager.version == old:
        host.fabric_manager.version = version
    for line in host.journal:
        if line.ident == "kernel" and old in line.text:
            line.text = line.text.replace(old, version)


def _frames(spec: str) -> list[StackFrame]:
    """'func (file:line)' lines, innermost first, as py-spy prints them."""
    out = []
    for line in filter(None, (s.strip() for s in spec.strip().splitlines())):
        match = re.match(r"^(.+) \((.+?):(\d+)\)$", line)
        if not match:
            raise ValueError(f"bad frame spec {line!r}")
        out.append(StackFrame(match.group(1), match.group(2), int(match.group(3))))
    return out


def _proc(host: HostState, pid: int, cmdline: str, frames: str, idle: bool, rank: int | None = None,
          ppid: int = 1, threads: list[Thread] | None = None, gpu: int | None = None) -> Process:
    env = {} if rank is None else {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(len(host.gpus))}
    proc = Process(pid=pid, cmdline=cmdline, rank=rank, ppid=ppid, env=env,
                   threads=[Thread(tid=pid, name="MainThread", frames=_frames(frames), idle=idle), *(threads or [])])
    host.processes.append(proc)
    if gpu is not None and gpu < len(host.gpus):  # a live (hung) rank keeps its GPU memory
        host.gpus[gpu].processes.append(GpuProcess(pid=pid, name=PY, used_mib=31214))
    return proc


# ---- driver / CUDA ---------------------------------------------------------------------------------------
@fault("driver.cuda_too_old", f"{SW}.DRIVER.CUDA_DRIVER_MISMATCH", Param("driver", str, "470.223.02"),
       Param("cuda", str, "12.1", help="CUDA runtime torch was built with"))
def cuda_too_old(host: HostState, p: dict) -> None:
    """The driver is older than the CUDA runtime of the job's torch needs."""
    need = min_driver_for(p["cuda"])
    if not vkey(p["driver"]) or need is None or vkey(p["driver"]) >= vkey(need):
        raise FaultError(f"driver.cuda_too_old: driver {p['driver']} already supports CUDA {p['cuda']} "
                         f"(needs >= {need}); pick an older driver")
    _set_driver(host, p["driver"])
    host.software.torch_cuda = host.software.cuda_toolkit = p["cuda"]


@fault("driver.known_bug", f"{SW}.DRIVER.DRIVER_BUG", Param("version", str, "560.35.03"))
def driver_known_bug(host: HostState, p: dict) -> None:
    """A driver release the knowledge base lists as buggy (known_bad.yaml `driver`)."""
    version = _known_bad("driver.known_bug", "driver", p["version"])
    _set_driver(host, version)
    sw = host.software
    if vkey(version) < vkey(min_driver_for(sw.torch_cuda) or "0"):
        # keep the job's CUDA within what this driver runs, so the bug is the only problem
        sw.torch_cuda = sw.cuda_toolkit = driver_max_cuda(version)


@fault("cuda.arch_unsupported", f"{SW}.CUDA.TOOLKIT_TOO_OLD_FOR_GPU_ARCH",
       Param("arch", str, None, help="the GPU architecture the torch build lacks (sm_XY); default: the GPU's"))
def arch_unsupported(host: HostState, p: dict) -> None:
    """torch was built without kernels for the GPU's architecture (and no PTX to JIT from)."""
    gpu_sm = int(host.gpus[0].compute_capability.replace(".", ""))
    arch = p["arch"] or f"sm_{gpu_sm}"
    match = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3})", arch)
    if not match:
        raise FaultError(f"cuda.arch_unsupported: arch {arch!r} is not of the form sm_86")
    cutoff = min(int(match.group(1)), gpu_sm)
    # a build that predates the GPU: nothing of its major generation or newer, no PTX at or below it
    keep = [a for a in host.software.torch_arch_list
            if int(a.split("_")[1]) < cutoff and int(a.split("_")[1]) // 10 < gpu_sm // 10]
    host.software.torch_arch_list = keep


@fault("cuda.host_vm_mismatch", f"{SW}.CUDA.HOST_VM_VERSION_MISMATCH")
def host_vm_mismatch(host: HostState, p: dict) -> None:
    """The container brings a newer CUDA with its forward-compat libcuda that does not match the VM's driver."""
    host.container.inside = True
    compat = "550.54.15" if vkey(host.driver.version)[:1] != (550,) else "555.42.06"
    sw = host.software
    sw.container_cuda_driver = compat
    sw.cuda_toolkit = sw.torch_cuda = driver_max_cuda(compat)
    host.env["CUDA_VERSION"] = driver_max_cuda(compat) + ".1"
    host.env["LD_LIBRARY_PATH"] = ":".join(filter(None, ["/usr/local/cuda/compat", "/usr/local/nvidia/lib64",
                                                         host.env.get("LD_LIBRARY_PATH")]))
    gpu = host.gpus[0]
    host.kernel(f"NVRM: Xid (PCI:{bdf_kernel(gpu.bus_id)}): 119, pid=48213, name=python3, Timeout after 6s of waiting "
                f"for RPC response from GPU{gpu.index} GSP! Expected function 76 (GSP_RM_CONTROL) (0x20801348 0x4).",
                age_s=700.0, priority=3)


# ---- container toolkit --------------------------------------------------------------------------------
@fault("container.cgroup_access_lost", f"{SW}.CONTAINER_TOOLKIT.CGROUP_DEVICE_ACCESS_LOST")
def cgroup_access_lost(host: HostState, p: dict) -> None:
    """Inside a running container the devices cgroup lost the NVIDIA rules (host `systemctl daemon-reload`)."""
    host.container.inside = True
    host.container.devices_cgroup_ok = False


@fault("container.runtime_not_configured", f"{SW}.CONTAINER_TOOLKIT.RUNTIME_NOT_CONFIGURED")
def runtime_not_configured(host: HostState, p: dict) -> None:
    """Docker on the host has no nvidia runtime; `docker run --gpus` is refused."""
    host.container.nvidia_runtime = False
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime(time.time() - 600))
    host.log("dockerd", f'time="{stamp}" level=error msg="Handler for POST /v1.43/containers/3f9c2b7d1e0a/start '
                        'returned error: could not select device driver \\"\\" with capabilities: [[gpu]]"', age_s=600)


@fault("container.toolkit_regression", f"{SW}.CONTAINER_TOOLKIT.VERSION_REGRESSION", Param("version", str, "1.17.7"))
def toolkit_regression(host: HostState, p: dict) -> None:
    """The NVIDIA Container Toolkit was upgraded to a release with a known regression."""
    host.software.container_toolkit = _known_bad("container.toolkit_regression", "container_toolkit", p["version"])


# ---- OS configuration ----------------------------------------------------------------------------------
@fault("os.memlock_limited", f"{SW}.OS_CONFIG.MEMLOCK_ULIMIT", Param("kb", int, 64))
def memlock_limited(host: HostState, p: dict) -> None:
    """`ulimit -l` is small: RDMA memory registration (ibv_reg_mr) fails."""
    if p["kb"] <= 0:
        raise FaultError(f"os.memlock_limited: kb must be > 0, got {p['kb']}")
    host.memlock_kb = p["kb"]


def _size_bytes(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", str(text), re.I)
    if not match:
        raise FaultError(f"user.shm_small: size {text!r} is not like 64M")
    return int(float(match.group(1)) * 1024 ** " kmgt".index(match.group(2).lower() or " "))


@fault("user.shm_small", "USER_APPLICATION.CONFIG.CONTAINER_SHM_TOO_SMALL", Param("size", str, "64M"))
def shm_small(host: HostState, p: dict) -> None:
    """The job's container runs with Docker's default /dev/shm (no --shm-size / --ipc=host)."""
    size = _size_bytes(p["size"])
    if size >= 1 << 30:
        raise FaultError(f"user.shm_small: {p['size']} is not small (use < 1G)")
    host.container.inside = True
    shm = next(m for m in host.mounts if m.path == "/dev/shm")
    shm.size_bytes, shm.source, shm.options = size, "shm", f"size={size // 1024}k,inode64"


# ---- framework versions --------------------------------------------------------------------------------
@fault("fw.nccl_regression", "FRAMEWORK_LIBRARY.NCCL.VERSION_REGRESSION", Param("version", str, "2.20.5"))
def nccl_regression(host: HostState, p: dict) -> None:
    """torch bundles an NCCL release with a known regression."""
    version = _known_bad("fw.nccl_regression", "nccl", p["version"])
    host.software.nccl = version
    host.software.torch = TORCH_FOR_NCCL.get(version, host.software.torch)


@fault("fw.nccl_version_skew", "FRAMEWORK_LIBRARY.NCCL.VERSION_MISMATCH_ACROSS_NODES",
       Param("nccl", str, "2.14.3"), Param("torch", str, None), scope="scenario", min_hosts=2)
def nccl_version_skew(hosts: list[HostState], p: dict) -> None:
    """The last host of the job runs another torch/NCCL than the others (a stale image)."""
    odd = hosts[-1].software
    if vkey(p["nccl"]) == vkey(hosts[0].software.nccl):
        raise FaultError(f"fw.nccl_version_skew: nccl {p['nccl']} is what the other hosts already run")
    odd.nccl = p["nccl"]
    odd.torch = p["torch"] or TORCH_FOR_NCCL.get(p["nccl"], "2.0.1")
    if vkey(odd.torch) < (2, 1):
        odd.torch_cuda = "11.8"  # torch 2.0 wheels were built for CUDA 11.7/11.8


@fault("fw.torch_nccl_conflict", "FRAMEWORK_LIBRARY.PYTORCH.NCCL_LIBRARY_CONFLICT",
       Param("version", str, "2.17.1", help="the system libnccl on LD_LIBRARY_PATH"))
def torch_nccl_conflict(host: HostState, p: dict) -> None:
    """A system libnccl on LD_LIBRARY_PATH shadows torch's bundled NCCL (older: undefined nccl* symbols)."""
    sw = host.software
    if vkey(p["version"]) == vkey(sw.nccl):
        raise FaultError(f"fw.torch_nccl_conflict: {p['version']} is torch's own NCCL; pick another version")
    sw.system_nccl = p["version"]
    host.env["LD_LIBRARY_PATH"] = ":".join(filter(None, [sw.system_nccl_dir, host.env.get("LD_LIBRARY_PATH")]))


@fault("fw.deepspeed_bug", "FRAMEWORK_LIBRARY.DEEPSPEED.BUG", Param("version", str, "0.13.1",
                                                                    help="a release, or 'master' for a source build"))
def deepspeed_bug(host: HostState, p: dict) -> None:
    """DeepSpeed at a version the knowledge base lists as buggy (a master build reports its dev version)."""
    requested = "0.13.2+fa0c9a7" if p["version"] in ("master", "main") else p["version"]
    host.software.python_packages["deepspeed"] = _known_bad("fw.deepspeed_bug", "deepspeed", requested)


@fault("fw.accelerate_bug", "FRAMEWORK_LIBRARY.ACCELERATE.BUG", Param("version", str, "0.23.0"))
def accelerate_bug(host: HostState, p: dict) -> None:
    """Accelerate at a version the knowledge base lists as buggy."""
    host.software.python_packages["accelerate"] = _known_bad("fw.accelerate_bug", "accelerate", p["version"])


# ---- hangs: the job's processes and their stacks ----------------------------------------------------------
DL_MAIN = """select (selectors.py:416)
wait (multiprocessing/connection.py:931)
_poll (multiprocessing/connection.py:424)
poll (multiprocessing/connection.py:257)
get (multiprocessing/queues.py:113)
_try_get_data (torch/utils/data/dataloader.py:1133)
_get_data (torch/utils/data/dataloader.py:1294)
_next_data (torch/utils/data/dataloader.py:1332)
__next__ (torch/utils/data/dataloader.py:630)
train_one_epoch (train.py:88)
main (train.py:142)
<module> (train.py:150)"""
DL_PIN = """poll (multiprocessing/connection.py:257)
get (multiprocessing/queues.py:113)
do_one_step (torch/utils/data/_utils/pin_memory.py:31)
_pin_memory_loop (torch/utils/data/_utils/pin_memory.py:54)
run (threading.py:953)
_bootstrap_inner (threading.py:1016)
_bootstrap (threading.py:973)"""
DL_WORKER = """acquire (logging/__init__.py:917)
handle (logging/__init__.py:966)
callHandlers (logging/__init__.py:1696)
handle (logging/__init__.py:1634)
_log (logging/__init__.py:1624)
warning (logging/__init__.py:1489)
__getitem__ (dataset.py:57)
<listcomp> (torch/utils/data/_utils/fetch.py:51)
fetch (torch/utils/data/_utils/fetch.py:51)
_worker_loop (torch/utils/data/_utils/worker.py:308)
run (multiprocessing/process.py:108)
_bootstrap (multiprocessing/process.py:314)
_launch (multiprocessing/popen_fork.py:71)
__init__ (multiprocessing/popen_fork.py:19)
_Popen (multiprocessing/context.py:281)
start (multiprocessing/process.py:121)
__init__ (torch/utils/data/dataloader.py:1040)
__iter__ (torch/utils/data/dataloader.py:434)
train_one_epoch (train.py:85)
main (train.py:142)
<module> (train.py:150)"""
TORCHRUN = """_invoke_run (torch/distributed/elastic/agent/server/api.py:835)
run (torch/distributed/elastic/agent/server/api.py:680)
wrapper (torch/distributed/elastic/metrics/api.py:124)
launch_agent (torch/distributed/launcher/api.py:255)
__call__ (torch/distributed/launcher/api.py:132)
run (torch/distributed/run.py:797)
main (torch/distributed/run.py:806)
wrapper (torch/distributed/elastic/multiprocessing/errors/__init__.py:346)
<module> (torchrun:8)"""
DPO_RANK0 = """tokenize_row (trl/trainer/dpo_trainer.py:737)
apply_function_on_filtered_inputs (datasets/arrow_dataset.py:3355)
_map_single (datasets/arrow_dataset.py:3482)
wrapper (datasets/fingerprint.py:481)
map (datasets/arrow_dataset.py:3097)
wrapper (datasets/arrow_dataset.py:593)
__init__ (trl/trainer/dpo_trainer.py:404)
main (train_dpo.py:118)
<module> (train_dpo.py:131)"""
DPO_WAIT = """barrier (torch/distributed/distributed_c10d.py:3696)
wrapper (torch/distributed/c10d_logger.py:72)
main_process_first (transformers/training_args.py:2150)
__enter__ (contextlib.py:135)
main (train_dpo.py:112)
<module> (train_dpo.py:131)"""
SPD_TEARDOWN = """destroy_process_group (torch/distributed/distributed_c10d.py:1781)
cleanup_distributed (spd/utils/distributed_utils.py:74)
main (spd/experiments/lm/lm_decomposition.py:212)
<module> (spd/experiments/lm/lm_decomposition.py:240)"""
SPD_WAIT = """all_reduce (torch/distributed/distributed_c10d.py:2288)
wrapper (torch/distributed/c10d_logger.py:79)
all_reduce (spd/utils/distributed_utils.py:98)
optimize (spd/run_spd.py:160)
main (spd/experiments/lm/lm_decomposition.py:205)
<module> (spd/experiments/lm/lm_decomposition.py:240)"""


@fault("fw.dataloader_deadlock", "FRAMEWORK_LIBRARY.PYTORCH.DATALOADER_DEADLOCK")
def dataloader_deadlock(host: HostState, p: dict) -> None:
    """The main process waits on the DataLoader queue; its forked workers are stuck on an inherited lock."""
    cmd = f"{PY} train.py --config configs/resnet50.yaml"
    pin = Thread(tid=48290, name="Thread-1 (_pin_memory_loop)", frames=_frames(DL_PIN), idle=True)
    _proc(host, 48213, cmd, DL_MAIN, idle=True, threads=[pin], gpu=0)
    for k in range(4):
        _proc(host, 48301 + k, cmd, DL_WORKER, idle=True, ppid=48213)


@fault("user.rank0_only_work", "USER_APPLICATION.CODE.RANK0_ONLY_WORK_TIMEOUT")
def rank0_only_work(host: HostState, p: dict) -> None:
    """Rank 0 tokenizes the dataset alone while the other ranks wait in a barrier until the NCCL timeout."""
    _proc(host, 51200, f"{PY} /usr/local/bin/torchrun --nproc_per_node={len(host.gpus)} train_dpo.py "
                       "--dataset ultrafeedback", TORCHRUN, idle=True)
    for rank in range(len(host.gpus)):
        _proc(host, 51210 + rank, f"{PY} -u train_dpo.py --dataset ultrafeedback", DPO_RANK0 if rank == 0 else DPO_WAIT,
              idle=rank != 0, rank=rank, ppid=51200, gpu=rank)


@fault("user.error_path_hang", "USER_APPLICATION.CODE.ERROR_PATH_TEARDOWN_HANG", Param("rank", int, 3))
def error_path_hang(host: HostState, p: dict) -> None:
    """One rank hit an exception and hangs tearing down its process group; the others wait in all_reduce."""
    if not 0 <= p["rank"] < len(host.gpus):
        raise FaultError(f"user.error_path_hang: rank {p['rank']} is not in 0..{len(host.gpus) - 1}")
    for rank in range(len(host.gpus)):
        _proc(host, 60110 + rank, f"{PY} spd/experiments/lm/lm_decomposition.py configs/llama-3.1-8b.yaml",
              SPD_TEARDOWN if rank == p["rank"] else SPD_WAIT, idle=True, rank=rank, gpu=rank)


# ---- platform, facility, scheduler, storage ------------------------------------------------------------
@fault("host.memory_fault", "OTHER.PLATFORM.HOST_MEMORY_FAULT")
def host_memory_fault(host: HostState, p: dict) -> None:
    """A DIMM returns uncorrectable errors: EDAC UE counts and machine-check lines in the kernel log."""
    host.edac.uncorrectable, host.edac.correctable = 2, 14
    dimm = host.edac.dimm
    for k, age in enumerate((1900.0, 620.0)):
        page = 0x3C8F1E + k
        host.kernel("mce: [Hardware Error]: Machine check events logged", age_s=age + 0.2, priority=2)
        host.kernel(f"EDAC MC0: 1 UE memory read error on {dimm} (channel:1 slot:0 page:0x{page:x} offset:0x0 "
                    "grain:32 -  err_code:0x0000:0x009f  SystemAddress:0x{:x} ProcessorSocketId:0x0 "
                    "MemoryControllerId:0x0 ChannelId:0x1 DimmSlotId:0x0)".format(page << 12), age_s=age, priority=2)
        host.kernel(f"mce: Uncorrected hardware memory error in user-access at {page << 12:x}", age_s=age - 0.1,
                    priority=2)
        host.kernel(f"Memory failure: 0x{page:x}: recovery action for dirty LRU page: Recovered", age_s=age - 0.2,
                    priority=2)


@fault("host.hardware_fault", "OTHER.PLATFORM.HOST_HARDWARE_FAULT")
def host_hardware_fault(host: HostState, p: dict) -> None:
    """The BMC logged critical mainboard events: a CPU internal error and an uncorrectable PCIe bus error."""
    for age, sensor, event in ((5400.0, "Processor CPU1_Status", "IERR"),
                               (5399.0, "Critical Interrupt PCIE_Status", "Bus Uncorrectable error"),
                               (5300.0, "System Firmware Progress POST_Status", "System Firmware Error")):
        host.sel.append(SelEvent(age_s=age, sensor=sensor, event=event))


@fault("host.power_event", "OTHER.PLATFORM.POWER_EVENT")
def host_power_event(host: HostState, p: dict) -> None:
    """The node lost power (both supply feeds) and came back: BMC AC-lost events, a fresh boot."""
    host.uptime_s = 2400.0
    lost = host.uptime_s + 900.0
    for sensor, event in (("Power Unit Pwr_Unit_Status", "AC lost"), ("Power Supply PSU1", "Power Supply AC lost"),
                          ("Power Supply PSU2", "Power Supply AC lost")):
        host.sel.append(SelEvent(age_s=lost, sensor=sensor, event=event))
    host.sel.append(SelEvent(age_s=host.uptime_s + 240.0, sensor="System ACPI Power State ACPI",
                             event="S0/G0: working"))


@fault("facility.thermal_shutdown", "OTHER.FACILITY.THERMAL_SHUTDOWN")
def thermal_shutdown(host: HostState, p: dict) -> None:
    """Room temperature rose; the inlet crossed its critical threshold and the node was shut down."""
    host.uptime_s = 3600.0
    hot = host.uptime_s + 1800.0
    for age, sensor, event in ((hot + 900.0, "Temperature Inlet_Temp", "Upper Non-critical going high"),
                               (hot, "Temperature Inlet_Temp", "Upper Critical going high"),
                               (hot - 60.0, "Temperature Inlet_Temp", "Upper Non-recoverable going high"),
                               (hot - 90.0, "System ACPI Power State ACPI", "S5/G2: soft-off"),
                               (host.uptime_s + 300.0, "System ACPI Power State ACPI", "S0/G0: working")):
        host.sel.append(SelEvent(age_s=age, sensor=sensor, event=event))
    host.log("systemd-logind", "System is powering down.", age_s=hot - 80.0)


@fault("node.not_provisioned", "OTHER.PLATFORM.NODE_NOT_PROVISIONED")
def not_provisioned(host: HostState, p: dict) -> None:
    """The node image has no NVIDIA driver, CUDA or container toolkit at all."""
    drv = host.driver
    drv.installed = drv.module_loaded = drv.device_nodes = drv.uvm_device_nodes = drv.persistenced_active = False
    host.fabric_manager.installed = host.fabric_manager.active = False
    for gpu in host.gpus:
        gpu.driver_bound = False
    host.kernel_modules = [m for m in host.kernel_modules if not m.startswith("nvidia")]
    for unit in ("nvidia-persistenced", "nv-hostengine", "nvidia-fabricmanager"):
        host.services.pop(unit, None)
    sw = host.software
    sw.cuda_toolkit = sw.container_toolkit = None
    host.container.nvidia_runtime = False  # the toolkit's nvidia-ctk is what registers it with docker
    sw.packages.pop("datacenter-gpu-manager", None)
    host.journal = [line for line in host.journal if not (line.ident == "kernel" and "NVRM" in line.text)]


@fault("scheduler.policy_kill", "OTHER.SCHEDULER.JOB_KILLED_BY_POLICY_TOOL")
def policy_kill(host: HostState, p: dict) -> None:
    """A site policy daemon terminated the job; Slurm then cancelled it without a reason of its own."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 418))
    for ident, text, age in (
        ("slurmd", "launch task StepId=127017.batch request from UID:1000 GID:1000 HOST:10.0.0.5 PORT:41822", 900.0),
        ("arbiter2", f"Terminating job 127017 (uid 1000) on {host.hostname}: usage policy violated: GPU idle (0% "
                     "utilization) for 480 s", 420.0),
        ("slurmstepd", f"error: *** JOB 127017 ON {host.hostname} CANCELLED AT {stamp} ***", 418.0),
    ):
        host.log(ident, text, age_s=age)


@fault("storage.files_purged", "OTHER.STORAGE.DATA_FILES_PURGED", Param("path", str, "/scratch/data"))
def files_purged(host: HostState, p: dict) -> None:
    """The scratch purge policy deleted the job's data set (files not accessed for 30 days)."""
    path = p["path"].rstrip("/")
    if not path.startswith("/") or path.count("/") < 2:
        raise FaultError(f"storage.files_purged: path {p['path']!r} must be an absolute data directory")
    gone = sorted(f for f in host.files if f.startswith(path + "/"))
    for name in gone:
        del host.files[name]
    gone = gone or [f"{path}/train2017/{n:012d}.jpg" for n in (315242, 315243, 315244)]
    host.missing_paths.append(path)
    parent = path.rsplit("/", 1)[0]
    if not any(f.startswith(parent + "/") for f in host.files) and not any(m.path == parent for m in host.mounts):
        host.files[f"{parent}/README"] = f"{parent}: shared data; files not accessed for 30 days are purged.\n"
    start = time.time() - 9 * 3600
    log = "".join(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(start + k))} scratch-purge: removed {name} "
                  f"(atime 31d, policy scratch-30d)\n" for k, name in enumerate(gone))
    host.files["/var/log/scratch-purge.log"] = host.files.get("/var/log/scratch-purge.log", "") + log
    host.log("scratch-purge", f"policy scratch-30d (atime > 30 days) on /scratch: {len(gone)} files removed",
             age_s=9 * 3600 - len(gone))


@fault("pcie.acs_enabled", "INTERCONNECT_NETWORKING.PCIE.ACS_P2P_HANG")
def acs_enabled(host: HostState, p: dict) -> None:
    """PCIe ACS source validation is on at the switches above the GPUs: P2P is redirected to the root complex."""
    if not host.pcie_switches:
        raise FaultError("pcie.acs_enabled: this host has no PCIe switches above its GPUs")
    for switch in host.pcie_switches:
        switch.acs_src_valid = True


# ---- noise ---------------------------------------------------------------------------------------------------
@noise("noise.old_sel_psu")
def old_sel_psu(host: HostState, p: dict) -> None:
    """A supply failure two months ago, long since replaced: an old SEL entry."""
    host.sel.append(SelEvent(age_s=60 * 86400.0, sensor="Power Supply PSU2", event="Failure detected"))
    host.sel.append(SelEvent(age_s=60 * 86400.0 - 3600, sensor="Power Supply PSU2", event="Failure detected",
                             direction="Deasserted"))


@noise("noise.host_correctable_ecc")
def host_correctable_ecc(host: HostState, p: dict) -> None:
    """A few corrected DIMM errors since boot: normal background."""
    host.edac.correctable += 3
    host.kernel(f"EDAC MC0: 1 CE memory read error on {host.edac.dimm} (channel:1 slot:0 page:0x1a2b3 offset:0x0 "
                "grain:32 syndrome:0x0 -  err_code:0x0000:0x009f)", age_s=5 * 3600.0)
