"""The incident taxonomy: TAXONOMY.md leaves, schema and rule validation, manifest consistency, API, CLI."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.checks.manifest import CheckSpec, Manifest, load_manifest
from agent.cli.taxonomy_cmd import app
from agent.reasoning.symptoms import SYMPTOMS
from agent.taxonomy import (
    SEVERITIES,
    TAXONOMY_PATH,
    NodeSpec,
    Taxonomy,
    TaxonomyError,
    load_taxonomy,
    validate_data,
)

SCHEMA_PATH = TAXONOMY_PATH.with_name("schema.json")

# The contract's leaves (benchmark labels), spelled exactly, with their parents.
CONTRACT_LEAVES = [
    "GPU.MEMORY.UNCORRECTABLE_ECC",
    "GPU.MEMORY.ROW_REMAP_PENDING",
    "GPU.MEMORY.ROW_REMAP_FAILURE",
    "GPU.MEMORY.CONTAINED_ECC_ERROR",
    "GPU.MEMORY.INFOROM_CORRUPTION",
    "GPU.AVAILABILITY.FALLEN_OFF_BUS",
    "GPU.AVAILABILITY.MISSING_GPU",
    "GPU.HARDWARE.FAULTY_GPU",
    "GPU.PERFORMANCE.SLOW_GPU_STRAGGLER",
    "GPU.POWER.PSU_INSUFFICIENT",
    "GPU.THERMAL.OVERHEATING_THROTTLE",
    "SYSTEM_SOFTWARE.DRIVER.CUDA_DRIVER_MISMATCH",
    "SYSTEM_SOFTWARE.DRIVER.LIBRARY_VERSION_MISMATCH",
    "SYSTEM_SOFTWARE.DRIVER.KERNEL_MODULE_NOT_LOADED",
    "SYSTEM_SOFTWARE.DRIVER.DEVICE_NODES_MISSING",
    "SYSTEM_SOFTWARE.DRIVER.DRIVER_BUG",
    "SYSTEM_SOFTWARE.DRIVER.GSP_FIRMWARE_BUG",
    "SYSTEM_SOFTWARE.DRIVER.PERSISTENCE_MODE_DISABLED",
    "SYSTEM_SOFTWARE.DRIVER.UVM_MODULE_STATE_CORRUPT",
    "SYSTEM_SOFTWARE.FABRIC_MANAGER.NOT_RUNNING_OR_VERSION_MISMATCH",
    "SYSTEM_SOFTWARE.CONTAINER_TOOLKIT.CGROUP_DEVICE_ACCESS_LOST",
    "SYSTEM_SOFTWARE.CONTAINER_TOOLKIT.RUNTIME_NOT_CONFIGURED",
    "SYSTEM_SOFTWARE.CONTAINER_TOOLKIT.VERSION_REGRESSION",
    "SYSTEM_SOFTWARE.CUDA.TOOLKIT_TOO_OLD_FOR_GPU_ARCH",
    "SYSTEM_SOFTWARE.CUDA.HOST_VM_VERSION_MISMATCH",
    "SYSTEM_SOFTWARE.OS_CONFIG.MEMLOCK_ULIMIT",
    "SYSTEM_SOFTWARE.NETWORK_STACK.OFED_HPCX_VERSION_MISMATCH",
    "INTERCONNECT_NETWORKING.SOCKET.IFNAME_MISCONFIG",
    "INTERCONNECT_NETWORKING.NCCL.IB_HCA_MISCONFIG",
    "INTERCONNECT_NETWORKING.NCCL.NET_PLUGIN_NOT_LOADED",
    "INTERCONNECT_NETWORKING.GDR.GPUDIRECT_RDMA_DISABLED",
    "INTERCONNECT_NETWORKING.IB.PORT_DOWN",
    "INTERCONNECT_NETWORKING.IB.USERSPACE_VERBS_MISSING",
    "INTERCONNECT_NETWORKING.ROCE.GID_INDEX_MISCONFIG",
    "INTERCONNECT_NETWORKING.ROCE.MTU_MISMATCH",
    "INTERCONNECT_NETWORKING.NVLINK.LINK_HARDWARE_FAULT",
    "INTERCONNECT_NETWORKING.NVLINK.NVLINK_NOT_ENABLED",
    "INTERCONNECT_NETWORKING.PCIE.ACS_P2P_HANG",
    "INTERCONNECT_NETWORKING.PCIE.RISER_OR_SLOT_FAULT",
    "INTERCONNECT_NETWORKING.TOPOLOGY.PCI_TOPOLOGY_MISDETECTED",
    "FRAMEWORK_LIBRARY.NCCL.VERSION_REGRESSION",
    "FRAMEWORK_LIBRARY.NCCL.VERSION_MISMATCH_ACROSS_NODES",
    "FRAMEWORK_LIBRARY.PYTORCH.NCCL_LIBRARY_CONFLICT",
    "FRAMEWORK_LIBRARY.PYTORCH.DATALOADER_DEADLOCK",
    "FRAMEWORK_LIBRARY.DEEPSPEED.BUG",
    "FRAMEWORK_LIBRARY.ACCELERATE.BUG",
    "USER_APPLICATION.CODE.DEVICE_ASSIGNMENT_ERROR",
    "USER_APPLICATION.CODE.RANK0_ONLY_WORK_TIMEOUT",
    "USER_APPLICATION.CODE.CHECKPOINT_LOADED_TO_GPU0",
    "USER_APPLICATION.CODE.ERROR_PATH_TEARDOWN_HANG",
    "USER_APPLICATION.CODE.ILLEGAL_MEMORY_ACCESS",
    "USER_APPLICATION.CONFIG.CONTAINER_SHM_TOO_SMALL",
    "USER_APPLICATION.CONFIG.MIG_MULTI_INSTANCE_MISUSE",
    "USER_APPLICATION.CONFIG.BATCH_SIZE_OOM",
    "OTHER.PLATFORM.HOST_HARDWARE_FAULT",
    "OTHER.PLATFORM.HOST_MEMORY_FAULT",
    "OTHER.PLATFORM.NODE_NOT_PROVISIONED",
    "OTHER.PLATFORM.POWER_EVENT",
    "OTHER.FACILITY.THERMAL_SHUTDOWN",
    "OTHER.SCHEDULER.JOB_KILLED_BY_POLICY_TOOL",
    "OTHER.STORAGE.DATA_FILES_PURGED",
]

# One real-format line per leaf (written from the public NVIDIA/NCCL/PyTorch/kernel/Slurm/IPMI formats);
# the named leaf must carry a signature that matches it.
SIGNATURE_SAMPLES = [
    ("NVRM: Xid (PCI:0000:19:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit "
     'error (DBE) has been detected on GPU in the framebuffer at physAddr 0x12bac1c3e0',
     'GPU.MEMORY.UNCORRECTABLE_ECC'),
    ('NVRM: Xid (PCI:0000:3b:00): 63, pid=1234, name=python, Row Remapper: New row '
     '(0x0000000000012345) marked for remapping, reset gpu to activate.',
     'GPU.MEMORY.ROW_REMAP_PENDING'),
    ('NVRM: Xid (PCI:0000:3b:00): 64, pid=1234, name=python, Row Remapper Error',
     'GPU.MEMORY.ROW_REMAP_FAILURE'),
    ('NVRM: Xid (PCI:0000:9b:00): 94, pid=5555, name=python, Contained: SM (0x1). RST: No, D-RST: No',
     'GPU.MEMORY.CONTAINED_ECC_ERROR'),
    ('WARNING: infoROM is corrupted at gpu 0000:41:00.0',
     'GPU.MEMORY.INFOROM_CORRUPTION'),
    ('Jul 27 16:39:09 host kernel: NVRM: Xid (PCI:0000:1a:00): 79, pid=1370, GPU has fallen off the '
     'bus.',
     'GPU.AVAILABILITY.FALLEN_OFF_BUS'),
    ('Unable to determine the device handle for GPU0000:9B:00.0: Unknown Error',
     'GPU.AVAILABILITY.FALLEN_OFF_BUS'),
    ('NVRM: GPU 0000:2b:00.0: RmInitAdapter failed! (0x26:0xffff:1601)',
     'GPU.AVAILABILITY.MISSING_GPU'),
    ('NVRM: Xid (PCI:0000:b3:00): 62, pid=2210, name=python, 0000cbf5 0000b1d0 00000000 00000000',
     'GPU.HARDWARE.FAULTY_GPU'),
    ('    HW Power Brake Slowdown           : Active',
     'GPU.POWER.PSU_INSUFFICIENT'),
    ('    HW Thermal Slowdown               : Active',
     'GPU.THERMAL.OVERHEATING_THROTTLE'),
    ('RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version',
     'SYSTEM_SOFTWARE.DRIVER.CUDA_DRIVER_MISMATCH'),
    ('Failed to initialize NVML: Driver/library version mismatch',
     'SYSTEM_SOFTWARE.DRIVER.LIBRARY_VERSION_MISMATCH'),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
     'latest NVIDIA driver is installed and running.',
     'SYSTEM_SOFTWARE.DRIVER.KERNEL_MODULE_NOT_LOADED'),
    ('cannot open /dev/nvidia-uvm: No such file or directory',
     'SYSTEM_SOFTWARE.DRIVER.DEVICE_NODES_MISSING'),
    ('[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, '
     'Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) '
     '(0x2081 0x4).',
     'SYSTEM_SOFTWARE.DRIVER.GSP_FIRMWARE_BUG'),
    ('Persistence Mode                          : Disabled',
     'SYSTEM_SOFTWARE.DRIVER.PERSISTENCE_MODE_DISABLED'),
    # nvidia-docker #644/#723/#1133, nvidia-container-toolkit #202: the driver initialises too slowly without it
    ('nvidia-container-cli: initialization error: driver rpc error: timed out: unknown.',
     'SYSTEM_SOFTWARE.DRIVER.PERSISTENCE_MODE_DISABLED'),
    # nvidia-smi exits with the NVML return code (GPU operator troubleshooting: "nvidia-smi return code 14")
    ('level=info msg="nvidia-smi failed: No pre-installed driver detected on the host: exit status 14"',
     'GPU.MEMORY.INFOROM_CORRUPTION'),
    ('nvidia-smi exited with return code 15', 'GPU.AVAILABILITY.FALLEN_OFF_BUS'),
    ('driver-validation: running nvidia-smi: exit status 9', 'SYSTEM_SOFTWARE.DRIVER.KERNEL_MODULE_NOT_LOADED'),
    ('RuntimeError: CUDA error: unknown error',
     'SYSTEM_SOFTWARE.DRIVER.UVM_MODULE_STATE_CORRUPT'),
    # CUDA broken after a suspend until nvidia_uvm is reloaded: pop-os/default-settings #64, ollama #2934/#5464,
    # tensorflow #5777, ultralytics #7716 (the fix in each: rmmod nvidia_uvm && modprobe nvidia_uvm)
    ('After resuming from suspension, GPU functionality inside the container stops working',
     'SYSTEM_SOFTWARE.DRIVER.UVM_MODULE_STATE_CORRUPT'),
    ('the GPU becomes unavailable after the laptop wakes up',
     'SYSTEM_SOFTWARE.DRIVER.UVM_MODULE_STATE_CORRUPT'),
    ('RuntimeError: CUDA error: system not yet initialized',
     'SYSTEM_SOFTWARE.FABRIC_MANAGER.NOT_RUNNING_OR_VERSION_MISMATCH'),
    ('Failed to initialize NVML: Unknown Error',
     'SYSTEM_SOFTWARE.CONTAINER_TOOLKIT.CGROUP_DEVICE_ACCESS_LOST'),
    ('docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].',
     'SYSTEM_SOFTWARE.CONTAINER_TOOLKIT.RUNTIME_NOT_CONFIGURED'),
    ('nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open '
     'shared object file',
     'SYSTEM_SOFTWARE.CONTAINER_TOOLKIT.VERSION_REGRESSION'),
    ('RuntimeError: CUDA error: no kernel image is available for execution on the device',
     'SYSTEM_SOFTWARE.CUDA.TOOLKIT_TOO_OLD_FOR_GPU_ARCH'),
    ('NVIDIA H100 80GB HBM3 with CUDA capability sm_90 is not compatible with the current PyTorch '
     'installation.',
     'SYSTEM_SOFTWARE.CUDA.TOOLKIT_TOO_OLD_FOR_GPU_ARCH'),
    ('RuntimeError: CUDA error: invalid device ordinal',
     'SYSTEM_SOFTWARE.CUDA.HOST_VM_VERSION_MISMATCH'),
    ('misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory',
     'SYSTEM_SOFTWARE.OS_CONFIG.MEMLOCK_ULIMIT'),
    ('[1695000000.123] [node1:1234:0] ucp_context.c:1234 UCX  ERROR  failed to open device mlx5_0',
     'SYSTEM_SOFTWARE.NETWORK_STACK.OFED_HPCX_VERSION_MISMATCH'),
    ('node1:1234:1234 [0] NCCL INFO Bootstrap : no socket interface found',
     'INTERCONNECT_NETWORKING.SOCKET.IFNAME_MISCONFIG'),
    ('node1:1234:1300 [0] NCCL WARN NET/IB : Unable to open device mlx5_1',
     'INTERCONNECT_NETWORKING.NCCL.IB_HCA_MISCONFIG'),
    ('NCCL INFO NET/Plugin: Could not find: libnccl-net-ofi.so.',
     'INTERCONNECT_NETWORKING.NCCL.NET_PLUGIN_NOT_LOADED'),
    ("NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)",
     'INTERCONNECT_NETWORKING.GDR.GPUDIRECT_RDMA_DISABLED'),
    ('        State: Down',
     'INTERCONNECT_NETWORKING.IB.PORT_DOWN'),
    ('Jul 27 16:39:09 host kernel: mlx5_core 0000:0c:00.0 ib0: lost carrier',
     'INTERCONNECT_NETWORKING.IB.LINK_FLAPPING'),
    ('ibv_devinfo: No IB devices found',
     'INTERCONNECT_NETWORKING.IB.USERSPACE_VERBS_MISSING'),
    ('NCCL WARN NET/IB : ncclIbRtrQp: Call to ibv_modify_qp failed with error Connection timed out',
     'INTERCONNECT_NETWORKING.ROCE.GID_INDEX_MISCONFIG'),
    ('\t\t\tactive_mtu:\t\t1024 (3)',
     'INTERCONNECT_NETWORKING.ROCE.MTU_MISMATCH'),
    ('NVRM: Xid (PCI:0000:18:00): 74, pid=12, name=python, NVLink: fatal error detected on link 3(0x0, '
     '0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)',
     'INTERCONNECT_NETWORKING.NVLINK.LINK_HARDWARE_FAULT'),
    ('GPU 3: NVML: Unable to retrieve NVLink information as all links are inactive',
     'INTERCONNECT_NETWORKING.NVLINK.NVLINK_NOT_ENABLED'),
    ('\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-',
     'INTERCONNECT_NETWORKING.PCIE.ACS_P2P_HANG'),
    ('\t\tLnkSta:\tSpeed 16GT/s, Width x8 (downgraded)',
     'INTERCONNECT_NETWORKING.PCIE.RISER_OR_SLOT_FAULT'),
    ('NCCL WARN Topology detection: network path /sys/devices/virtual/net/eth0 is not a PCI device '
     '(vendor=0000). Attaching to first CPU',
     'INTERCONNECT_NETWORKING.TOPOLOGY.PCI_TOPOLOGY_MISDETECTED'),
    ('NCCL WARN ... internal error - please report this issue to the NCCL developers',
     'FRAMEWORK_LIBRARY.NCCL.VERSION_REGRESSION'),
    ('torch.distributed.DistBackendError: NCCL error: ncclInvalidUsage',
     'FRAMEWORK_LIBRARY.NCCL.VERSION_MISMATCH_ACROSS_NODES'),
    ('ImportError: /usr/lib/python3/dist-packages/torch/lib/libtorch_cuda.so: undefined symbol: '
     'ncclCommRegister',
     'FRAMEWORK_LIBRARY.PYTORCH.NCCL_LIBRARY_CONFLICT'),
    ('RuntimeError: DataLoader worker (pid(s) 12345) exited unexpectedly',
     'FRAMEWORK_LIBRARY.PYTORCH.DATALOADER_DEADLOCK'),
    ('  File "/usr/lib/python3/dist-packages/deepspeed/runtime/zero/stage3.py", line 1234, in step',
     'FRAMEWORK_LIBRARY.DEEPSPEED.BUG'),
    ('  File "/usr/lib/python3/dist-packages/accelerate/accelerator.py", line 2000, in backward',
     'FRAMEWORK_LIBRARY.ACCELERATE.BUG'),
    ('NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000',
     'USER_APPLICATION.CODE.DEVICE_ASSIGNMENT_ERROR'),
    ('[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2043, OpType=ALLREDUCE, '
     'NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800081 milliseconds before timing out.',
     'USER_APPLICATION.CODE.RANK0_ONLY_WORK_TIMEOUT'),
    ('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total '
     'capacity of 79.15 GiB of which 1.2 GiB is free.',
     'USER_APPLICATION.CODE.CHECKPOINT_LOADED_TO_GPU0'),
    ('torch.distributed.elastic.multiprocessing.errors.ChildFailedError:',
     'USER_APPLICATION.CODE.ERROR_PATH_TEARDOWN_HANG'),
    ('RuntimeError: CUDA error: an illegal memory access was encountered',
     'USER_APPLICATION.CODE.ILLEGAL_MEMORY_ACCESS'),
    ('NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python, Graphics SM Warp Exception on (GPC 0, TPC '
     '1, SM 0): Out Of Range Address',
     'USER_APPLICATION.CODE.ILLEGAL_MEMORY_ACCESS'),
    ('RuntimeError: DataLoader worker (pid 4321) is killed by signal: Bus error. It is possible that '
     "dataloader's workers are out of shared memory.",
     'USER_APPLICATION.CONFIG.CONTAINER_SHM_TOO_SMALL'),
    ('export '
     'CUDA_VISIBLE_DEVICES=MIG-1b2c3d4e-aaaa-bbbb-cccc-000000000001,MIG-1b2c3d4e-aaaa-bbbb-cccc-000000000002',
     'USER_APPLICATION.CONFIG.MIG_MULTI_INSTANCE_MISUSE'),
    ('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 3 has a total '
     'capacity of 79.15 GiB',
     'USER_APPLICATION.CONFIG.BATCH_SIZE_OOM'),
    ('mce: [Hardware Error]: CPU 12: Machine Check Exception: 5 Bank 4: be00000000800400',
     'OTHER.PLATFORM.HOST_HARDWARE_FAULT'),
    ('EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0',
     'OTHER.PLATFORM.HOST_MEMORY_FAULT'),
    ('bash: nvidia-smi: command not found',
     'OTHER.PLATFORM.NODE_NOT_PROVISIONED'),
    ('  12 | 01/02/2025 | 03:04:05 | Power Supply #0x51 | Power Supply AC lost | Asserted',
     'OTHER.PLATFORM.POWER_EVENT'),
    ('  13 | 01/02/2025 | 03:04:05 | Temperature #0x30 | Upper Critical going high | Asserted',
     'OTHER.FACILITY.THERMAL_SHUTDOWN'),
    ('slurmstepd: error: *** JOB 123456 ON gpu-017 CANCELLED AT 2025-01-02T03:04:05 DUE TO TIME LIMIT '
     '***',
     'OTHER.SCHEDULER.JOB_KILLED_BY_POLICY_TOOL'),
    ("FileNotFoundError: [Errno 2] No such file or directory: '/scratch/data/shard-00012.parquet'",
     'OTHER.STORAGE.DATA_FILES_PURGED'),
    ('RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory',
     'OTHER.STORAGE.CHECKPOINT_CORRUPTED'),
    ('kernel BUG at /var/lib/dkms/nvidia/535.54.03/source/nvidia-uvm/uvm_va_block.c:1234!',
     'SYSTEM_SOFTWARE.DRIVER.DRIVER_BUG'),
    ('GPU 5 is consistently slower than the other GPUs on the node (straggler)',
     'GPU.PERFORMANCE.SLOW_GPU_STRAGGLER'),
    ('[rank1]: IndexError: list index out of range',
     'USER_APPLICATION.CODE.SCRIPT_ERROR'),
    ('[rank5]: FloatingPointError: loss is nan at step 10; stopping before the update',
     'USER_APPLICATION.CODE.NON_FINITE_LOSS'),
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
     'tried to allocate 67108864 bytes. Error code 12 (Cannot allocate memory)',
     'USER_APPLICATION.CODE.HOST_MEMORY_EXHAUSTED'),
    ('RuntimeError: [3]: params[0] in this process with sizes [256, 32] appears not to match sizes of the same '
     'param in process 0.',
     'USER_APPLICATION.CODE.CODE_VERSION_SKEW'),
    ('torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. '
     'port: 29400, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use',
     'USER_APPLICATION.CONFIG.RENDEZVOUS_PORT_IN_USE'),
    ('RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 10000ms for '
     'recv operation to complete',
     'INTERCONNECT_NETWORKING.SOCKET.PEER_UNREACHABLE'),
    ('RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer '
     '[10.0.0.12]:40667',
     'OTHER.PLATFORM.NODE_LOST'),
    ("OSError: [Errno 28] No space left on device: '/ckpt/step_1200/model.pt'",
     'OTHER.STORAGE.DISK_FULL'),
]

# Lines a healthy host prints: no leaf signature may fire on them.
BENIGN_LINES = [
    "nvidia-smi returned 14 GPUs in 15 s; exit status 0",
    "INFO resuming from checkpoint /ckpt/step_1200 after the node was drained",
    # torch's store tries IPv6 first and then listens on IPv4: this warning is no failure
    '[W1127 15:01:16.994908806 socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 '
    '- Address already in use).',
    'mlx5_core 0000:0c:00.0: mlx5_pcie_event:301:(pid 0): Detected insufficient power on the PCIe slot (27W).',
    'node1:1234:1300 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>',
    'node1:1234:1300 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC',
    'nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing',
    '        Pending                           : No',
    '        Remapping Failure Occurred        : No',
    '    HW Power Brake Slowdown           : Not Active',
    '    HW Thermal Slowdown               : Not Active',
    '    Persistence Mode                  : Enabled',
    'NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.161.08  Thu Feb  8 00:00:00 UTC 2024',
    '        State: Active',
    '        Physical state: LinkUp',
    '\t\tLnkSta:\tSpeed 32GT/s, Width x16',
    'node1:1234:1234 [0] NCCL INFO cudaDriverVersion 12020',
    'Epoch 3: loss=1.234 lr=3e-4 step_time=0.52s',
    # how a job was set up is not how it failed: launch commands, container flags and the hardware's description
    'accelerate launch --config_file=configs/fsdp1.yaml --num_machines=2 train.py',
    'docker run --gpus all --ipc host --shm-size 32g --network host vllm/vllm-openai:latest',
    'docker run --gpus all -it --ipc=host nvidia/cuda:12.4.1-devel-ubuntu22.04 /bin/bash',
    '- GPUs: 4x A100-80GB PCIe (SM80, no NVLink, 2 sockets)',
]


@pytest.fixture(scope="module")
def tax() -> Taxonomy:
    return load_taxonomy()


def test_contract_leaves_present_with_exact_parents(tax: Taxonomy) -> None:
    assert len(CONTRACT_LEAVES) == len(set(CONTRACT_LEAVES)) == 61
    for label in CONTRACT_LEAVES:
        node = tax.node(label)
        assert node.is_leaf, f"{label} must be a leaf"
        assert [n.name for n in node.path[1:]] == label.split(".")
        assert node.depth == 3


def test_main_categories(tax: Taxonomy) -> None:
    assert [n.name for n in tax.children("")] == [
        "GPU", "SYSTEM_SOFTWARE", "INTERCONNECT_NETWORKING", "FRAMEWORK_LIBRARY", "USER_APPLICATION", "OTHER"]
    assert all(leaf.depth == 3 for leaf in tax.leaves())
    # extra leaves stay modest: those real jobs show (a checkpoint that cannot be loaded, and the fault lab's
    # user-code, configuration, storage and network faults: issue 34)
    assert len(CONTRACT_LEAVES) <= len(tax.leaves()) <= len(CONTRACT_LEAVES) + 10


def test_shipped_taxonomy_validates(tax: Taxonomy) -> None:
    assert tax.validate() == []
    assert validate_data(json.loads(TAXONOMY_PATH.read_text())) == []


def test_every_node_is_complete(tax: Taxonomy) -> None:
    for label in tax.labels():
        node = tax.node(label)
        assert node.description.strip() and len(node.description) <= 600, label
        assert node.runbook.strip() and len(node.runbook) <= 600, label
        assert node.severity in SEVERITIES, label
        assert node.signatures, f"{label} has no signatures"
        assert tax.checks_for(label, include_descendants=True), f"{label} reaches no check"
        assert node.patterns and all(not p.search("") for p in node.patterns), label


def test_manifest_and_taxonomy_agree(tax: Taxonomy) -> None:
    manifest = load_manifest()
    labels = set(tax.labels())
    for spec in manifest.checks:
        assert spec.nodes, f"check {spec.id} verifies no node"
        assert set(spec.nodes) <= labels, f"{spec.id} names unknown nodes {set(spec.nodes) - labels}"
    for label in labels:
        for spec in manifest.checks:
            assert (spec.id in tax.node(label).checks) == (label in spec.nodes), (spec.id, label)


def test_xids_point_at_the_right_leaves(tax: Taxonomy) -> None:
    expected = {48: "GPU.MEMORY.UNCORRECTABLE_ECC", 63: "GPU.MEMORY.ROW_REMAP_PENDING",
                64: "GPU.MEMORY.ROW_REMAP_FAILURE", 94: "GPU.MEMORY.CONTAINED_ECC_ERROR",
                95: "GPU.MEMORY.CONTAINED_ECC_ERROR", 79: "GPU.AVAILABILITY.FALLEN_OFF_BUS",
                74: "INTERCONNECT_NETWORKING.NVLINK.LINK_HARDWARE_FAULT",
                119: "SYSTEM_SOFTWARE.DRIVER.GSP_FIRMWARE_BUG", 120: "SYSTEM_SOFTWARE.DRIVER.GSP_FIRMWARE_BUG",
                13: "USER_APPLICATION.CODE.ILLEGAL_MEMORY_ACCESS", 31: "USER_APPLICATION.CODE.ILLEGAL_MEMORY_ACCESS"}
    xids = tax.xid_map()
    for xid, label in expected.items():
        assert xids[xid] == [label], xid


@pytest.mark.parametrize(("line", "label"), SIGNATURE_SAMPLES)
def test_signature_samples_match_their_leaf(tax: Taxonomy, line: str, label: str) -> None:
    assert tax.node(label).matching_signatures(line), f"no signature of {label} matches {line!r}"


def test_signature_samples_cover_every_leaf(tax: Taxonomy) -> None:
    assert {label for _, label in SIGNATURE_SAMPLES} == set(tax.labels(leaves_only=True))


def test_benign_lines_match_no_leaf(tax: Taxonomy) -> None:
    for line in BENIGN_LINES:
        hits = {leaf.label: leaf.matching_signatures(line) for leaf in tax.leaves() if leaf.matching_signatures(line)}
        assert not hits, (line, hits)


# ---- schema and rule validation on small trees -------------------------------------------------------------

SMALL_MANIFEST = Manifest(checks=[
    CheckSpec(id="probe_a", script="probe_a.py", description="a", nodes=["A", "A.X", "A.X.LEAF"]),
    CheckSpec(id="probe_b", script="probe_b.py", description="b", nodes=["A.X.OTHER"]),
])


def _node(name: str, checks: list[str], children: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    node: dict[str, Any] = {"name": name, "description": f"{name} things.", "severity": "high",
                            "signatures": [rf"\b{name}\b"], "checks": checks, "runbook": "Do it."}
    if children:
        node["children"] = children
    return node


def small_tree() -> dict[str, Any]:
    leaves = [_node("LEAF", ["probe_a"]) | {"evidence": ["probe_a:bad_.*"]},
              _node("OTHER", ["probe_b"]) | {"evidence": ["probe_b:other"]}]
    return {"name": "ROOT", "description": "test",
            "children": [_node("A", ["probe_a"], [_node("X", ["probe_a"], leaves)])]}


def _leaf(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in data["children"][0]["children"][0]["children"] if c["name"] == name)


def test_small_tree_is_valid() -> None:
    assert validate_data(small_tree(), SMALL_MANIFEST) == []
    tax = Taxonomy.from_dict(small_tree(), SMALL_MANIFEST)
    assert [leaf.label for leaf in tax.leaves()] == ["A.X.LEAF", "A.X.OTHER"]
    data = small_tree()
    _leaf(data, "LEAF")["implies"] = ["A.X.OTHER"]
    assert Taxonomy.from_dict(data, SMALL_MANIFEST).node("A.X.LEAF").implies == ["A.X.OTHER"]


def test_rejects_node_without_description() -> None:
    data = small_tree()
    del _leaf(data, "LEAF")["description"]
    problems = validate_data(data, SMALL_MANIFEST)
    assert any(p.startswith("A.X.LEAF: description") for p in problems), problems
    with pytest.raises(TaxonomyError, match="description"):
        Taxonomy.from_dict(data, SMALL_MANIFEST)
    _leaf(data, "LEAF")["description"] = "   "
    assert any(p.startswith("A.X.LEAF: description") for p in validate_data(data, SMALL_MANIFEST))


def test_rejects_node_without_reachable_check() -> None:
    data = small_tree()
    _leaf(data, "OTHER").update(checks=[], evidence=[])
    manifest = Manifest(checks=[SMALL_MANIFEST.checks[0]])
    assert validate_data(data, manifest) == ["A.X.OTHER: no check reachable (none on the node or any descendant)"]
    with pytest.raises(TaxonomyError, match="no check reachable"):
        Taxonomy.from_dict(data, manifest)


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda d: _leaf(d, "LEAF").update(severity="urgent"), "A.X.LEAF: severity"),
    (lambda d: _leaf(d, "LEAF").update(signatures=["(unclosed"]), "not a valid regex"),
    (lambda d: _leaf(d, "LEAF").update(signatures=[".*"]), "matches the empty string"),
    (lambda d: _leaf(d, "LEAF").update(name="bad name"), "A.X.bad name: name"),
    (lambda d: _leaf(d, "LEAF").update(colour="red"), "A.X.LEAF: colour"),
    (lambda d: _leaf(d, "LEAF").update(evidence=[]), "A.X.LEAF: a leaf needs evidence rules"),
    (lambda d: _leaf(d, "LEAF").update(evidence=["probe_b:x"]), "names a check the leaf does not list"),
    (lambda d: _leaf(d, "LEAF").update(evidence=["probe_a:(x"]), "is not a valid regex"),
    (lambda d: d["children"][0].update(evidence=["probe_a:x"]), "A: evidence rules belong on leaves only"),
    (lambda d: d["children"][0].update(symptoms=["slow"]), "A: symptoms belong on leaves only"),
    (lambda d: _leaf(d, "LEAF").update(symptoms=["sluggish"]), "A.X.LEAF: symptoms"),
    (lambda d: _leaf(d, "LEAF").update(symptoms=["slow", "slow"]), "duplicate entries in symptoms"),
    (lambda d: _leaf(d, "OTHER").update(name="LEAF"), "duplicate child name 'LEAF'"),
    (lambda d: d["children"][0].update(implies=["A.X.LEAF"]), "A: implies belongs on leaves only"),
    (lambda d: d["children"][0].update(between_hosts=True), "A: between_hosts belongs on leaves only"),
    (lambda d: d["children"][0].update(unseen=["probe_a:x"]), "A: unseen rules belong on leaves only"),
    (lambda d: _leaf(d, "LEAF").update(unseen=["probe_b:x_unseen"]), "names a check the leaf does not list"),
    (lambda d: _leaf(d, "LEAF").update(implies=["A.X"]), "A.X.LEAF: implies 'A.X', which is not a leaf"),
    (lambda d: _leaf(d, "LEAF").update(implies=["A.X.LEAF"]), "A.X.LEAF: implies itself"),
    (lambda d: (_leaf(d, "LEAF").update(implies=["A.X.OTHER"]), _leaf(d, "OTHER").update(implies=["A.X.LEAF"])),
     "A.X.LEAF: implies 'A.X.OTHER', which leads back to it"),
    (lambda d: _leaf(d, "LEAF")["checks"].append("no_such_check"), "'no_such_check' is not in the manifest"),
    (lambda d: _leaf(d, "LEAF")["checks"].append("probe_b"), "manifest's nodes for 'probe_b' omit it"),
    (lambda d: _leaf(d, "LEAF").update(checks=["probe_b"]), "manifest says 'probe_a' verifies it"),
    (lambda d: d["children"][0]["children"][0].update(children=[]), "A.X: children"),
    (lambda d: d.update(name="TOP"), "ROOT: name"),
])
def test_rejects_rule_violations(mutate: Any, expected: str) -> None:
    data = small_tree()
    mutate(data)
    problems = validate_data(data, SMALL_MANIFEST)
    assert any(expected in p for p in problems), problems


def test_manifest_naming_unknown_node_is_a_problem() -> None:
    manifest = Manifest(checks=[*SMALL_MANIFEST.checks,
                                CheckSpec(id="probe_c", script="c.py", description="c", nodes=["A.NOPE"])])
    assert "manifest: check 'probe_c' names unknown taxonomy node 'A.NOPE'" in validate_data(small_tree(), manifest)


def test_schema_json_matches_the_enforced_model() -> None:
    schema = json.loads(SCHEMA_PATH.read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    node = schema["$defs"]["node"]
    required = {name for name, field in NodeSpec.model_fields.items() if field.is_required()}
    assert set(node["required"]) == required
    assert set(node["properties"]) == set(NodeSpec.model_fields)
    assert tuple(node["properties"]["severity"]["enum"]) == SEVERITIES
    assert tuple(node["properties"]["symptoms"]["items"]["enum"]) == SYMPTOMS
    assert node["additionalProperties"] is False and schema["additionalProperties"] is False
    assert node["properties"]["children"]["items"] == {"$ref": "#/$defs/node"}


# ---- API -----------------------------------------------------------------------------------------------------

def test_api_lookups(tax: Taxonomy) -> None:
    assert load_taxonomy() is load_taxonomy()
    node = tax.node("GPU.MEMORY.UNCORRECTABLE_ECC")
    assert tax.label(node) == "GPU.MEMORY.UNCORRECTABLE_ECC" and node.severity == "critical"
    assert tax.node("") is tax.root and tax.node("ROOT") is tax.root
    assert [c.name for c in tax.children("GPU.AVAILABILITY")] == ["FALLEN_OFF_BUS", "MISSING_GPU"]
    assert "xid_scan" in tax.checks_for("GPU.MEMORY.UNCORRECTABLE_ECC")
    assert "cuda_exec" not in tax.checks_for("GPU.MEMORY")
    assert "cuda_exec" in tax.checks_for("GPU.MEMORY", include_descendants=True)
    assert len(set(tax.checks_for("GPU", include_descendants=True))) == len(tax.checks_for("GPU", True))
    assert set(tax.node("GPU.MEMORY").signatures) <= set(tax.signatures_for("GPU.MEMORY", include_descendants=True))
    assert tax.to_dict("GPU.THERMAL")["children"][0]["name"] == "OVERHEATING_THROTTLE"


def test_unknown_node_names_close_matches(tax: Taxonomy) -> None:
    with pytest.raises(KeyError, match=r"GPU\.MEMORY\.UNCORRECTABLE_ECC"):
        tax.node("UNCORRECTABLE_ECC")
    with pytest.raises(KeyError, match=r"did you mean: GPU\.MEMORY"):
        tax.node("GPU.MEMROY")


def test_load_rejects_unreadable_file(tmp_path: Path) -> None:
    bad = tmp_path / "taxonomy.json"
    bad.write_text("{not json")
    with pytest.raises(TaxonomyError, match="cannot read taxonomy"):
        load_taxonomy(bad)


# ---- CLI -----------------------------------------------------------------------------------------------------

runner = CliRunner()


def test_cli_show_subtree() -> None:
    result = runner.invoke(app, ["show", "GPU.MEMORY"])
    assert result.exit_code == 0, result.output
    assert "GPU.MEMORY.ROW_REMAP_PENDING" in result.output and "critical" in result.output
    assert "gpu_memory_errors" in result.output
    assert "SYSTEM_SOFTWARE" not in result.output


def test_cli_show_json() -> None:
    result = runner.invoke(app, ["show", "OTHER.STORAGE", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["name"] == "STORAGE" and {c["name"] for c in data["children"]} >= {"DATA_FILES_PURGED"}


def test_cli_show_whole_tree_with_depth() -> None:
    result = runner.invoke(app, ["show", "--depth", "1"])
    assert result.exit_code == 0, result.output
    assert "INTERCONNECT_NETWORKING" in result.output and "GPU.MEMORY" not in result.output


def test_cli_rejects_unknown_node() -> None:
    result = runner.invoke(app, ["show", "GPU.MEMROY"])
    assert result.exit_code == 2
    assert "unknown taxonomy node 'GPU.MEMROY'" in result.output and "GPU.MEMORY" in result.output


def test_cli_validate(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 0, result.output
    assert "taxonomy OK" in result.output
    data = copy.deepcopy(json.loads(TAXONOMY_PATH.read_text()))
    del data["children"][0]["description"]
    bad = tmp_path / "taxonomy.json"
    bad.write_text(json.dumps(data))
    result = runner.invoke(app, ["validate", "--path", str(bad)])
    assert result.exit_code == 1
    assert "GPU: description" in result.output
