"""Log lines for simulated training tasks: the L4 simulator's formats (agent/l4/simlines.py, real Megatron,
DeepSpeed, NCCL, PyTorch and NVIDIA driver texts) plus the failure lines each KAIOPS class ends with."""

from __future__ import annotations

import random

from agent.l4 import simlines as sl

TRACEBACK = ["Traceback (most recent call last):",
             '  File "/workspace/Megatron-LM/pretrain_gpt.py", line 236, in <module>']

STARTUP_ERRORS = [
    "FileNotFoundError: [Errno 2] No such file or directory: '/data/corpus_text_document.idx'",
    "AssertionError: num_attention_heads (30) must be a multiple of tensor_model_parallel_size (8)",
    "ModuleNotFoundError: No module named 'flash_attn'",
    "RuntimeError: Error(s) in loading state_dict for GPTModel: size mismatch for embedding.word_embeddings.weight: "
    "copying a param with shape torch.Size([50304, 4096]) from checkpoint, the shape in current model is "
    "torch.Size([32000, 4096]).",
    "RuntimeError: Expected embedding weights to have size [64, 1024], but got [64, 512] instead.",
    "ImportError: cannot import name 'packaging' from 'pkg_resources'",
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
    "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.21.5",
]
RUNTIME_ERRORS = [
    "KeyError: 'input_ids'",
    "RuntimeError: shape '[8, 2048, 32, 128]' is invalid for input of size 33554432",
    "ValueError: Expected input batch_size (16) to match target batch_size (8).",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "ZeroDivisionError: division by zero",
]
HOST_OOM = [
    "RuntimeError: DataLoader worker (pid 48213) is killed by signal: Killed.",
    "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
    "RuntimeError: DataLoader worker (pid(s) 48213) exited unexpectedly",
]
GPU_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of "
           "79.11 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.06 GiB memory "
           "in use.")
ALLOC_FLUSH = sl.NOISE_ITER[0]
NET_WARN = [
    "{p} NCCL WARN NET/IB : mlx5_{dev}:1 Got non-fatal async event: port error(10)",
    "{p} transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer {ip}<{port}> with error 12, opcode 0, "
    "len 0, vendor err 129 (Recv)",
    "{p} NCCL WARN socketProgress: Connection closed by remote peer {host}<{port}>",
    "{p} NCCL INFO transport/net.cc:1134 -> 6",
    "{p} NCCL WARN NET/Socket : Connection timed out",
]
WATCHDOG = [
    "{g632} [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
    "NumelIn=26214400, NumelOut=26214400, Timeout(ms)=600000) ran for 600042 milliseconds before timing out.",
    "{g695} [Rank {rank}] To avoid data inconsistency, we are taking the entire process down.",
]
XID = {
    "xid79": ["NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."],
    "xid48": ["NVRM: Xid (PCI:0000:19:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error "
              "(DBE) has been detected on GPU in the framebuffer at partition 2, subpartition 1.",
              "RuntimeError: CUDA error: uncorrectable ECC error encountered"],
    "xid94": ["NVRM: Xid (PCI:0000:5d:00): 94, pid=48213, name=python3, Contained: SM (0x1). RST: No, D-RST: No"],
    "xid74": ["NVRM: Xid (PCI:0000:9a:00): 74, pid=48213, name=python3, NVLink: fatal error detected on link 4"],
    "xid119": ["NVRM: Xid (PCI:0000:ab:00): 119, pid=48213, name=python3, Timeout after 6s of waiting for RPC "
               "response from GPU1 GSP!"],
}
CUDA_UNKNOWN = ["{p} NCCL WARN Cuda failure 'unknown error'",
                "terminate called after throwing an instance of 'c10::CUDAError'",
                "  what():  CUDA error: unknown error"]
HW_PRECURSOR = ["NVRM: Xid (PCI:0000:19:00): 63, pid=48213, name=python3, Row Remapper: New row marked for remapping, "
                "reset gpu to activate.",
                "NVRM: GPU at PCI:0000:19:00: GPU-0c5e1b5e: Single-bit ECC error count increased (volatile 12)"]
COMPLETED = "[after training is done] datetime: {iso} "


class LineMaker:
    """Formats template lines for one job (its host, pid, framework) at a minute of the 30-minute window."""

    def __init__(self, rnd: random.Random, hosts: list[str], framework: str):
        self.rnd, self.hosts, self.fw = rnd, hosts, framework
        self.pid = rnd.randint(10_000, 4_000_000)
        self.nranks = 8 * len(hosts)

    def fmt(self, text: str, minute: float, rank: int = 0) -> str:
        t = 3600 + minute * 60
        node = rank // 8 % len(self.hosts)
        return text.format(ts=sl.pyts(t), iso=sl.isots(t), rank=rank, p=sl.nccl(self.hosts[node], self.pid, rank % 8),
                           g632=sl.glog("E", t, "ProcessGroupNCCL.cpp:632"),
                           g695=sl.glog("E", t, "ProcessGroupNCCL.cpp:695"), seq=48211 + self.rnd.randrange(3),
                           dev=self.rnd.randrange(4), ip=sl.ip_of(self.rnd.randrange(400)),
                           port=self.rnd.randint(30000, 60000), host=self.rnd.choice(self.hosts))

    def init(self, minute: float) -> list[str]:
        lines = sl.init_lines(self.rnd, self.fw, 0, self.nranks, self.hosts[0], 0, 0, self.pid)
        lines += sl.loading_lines(self.rnd, self.fw, 0)
        keep = sorted(self.rnd.sample(range(len(lines)), min(len(lines), self.rnd.randint(3, 6))))
        return [self.fmt(lines[i], minute) for i in keep]

    def iteration(self, minute: float, it: int, ms: float) -> list[str]:
        lines = sl.iteration_lines(self.rnd, self.fw, 0, self.nranks, it, 100_000, ms)
        return [self.fmt(line, minute) for line in lines[:2]]

    def checkpoint(self, minute: float, it: int) -> list[str]:
        return [self.fmt(line, minute) for line in sl.checkpoint_lines(self.fw, it)]

    def noise(self, minute: float) -> str:
        return self.fmt(self.rnd.choice(sl.NOISE_INIT + sl.NOISE_ITER), minute, self.rnd.randrange(self.nranks))
