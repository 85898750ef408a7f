"""Line formats for the log simulator, taken from the sources cited in shared/research/logs.md §3 (Megatron-LM
training.py/checkpointing.py, DeepSpeed logging.py/engine.py/timer.py, NCCL debug.cc/net_ib, PyTorch
ProcessGroupNCCL.cpp and torch.distributed.elastic, NVIDIA kernel driver). Values are random; texts are real."""

from __future__ import annotations

import datetime as dt
import random

T0 = dt.datetime(2025, 3, 14, 9, 0, 0)


def pyts(t: float) -> str:  # python logging asctime, as DeepSpeed's logger prints it
    d = T0 + dt.timedelta(seconds=t)
    return d.strftime("%Y-%m-%d %H:%M:%S,") + f"{d.microsecond // 1000:03d}"


def isots(t: float) -> str:
    return (T0 + dt.timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f")


def glog(level: str, t: float, where: str) -> str:  # c10 / glog prefix: [E0314 10:22:41.123456789 file.cpp:632]
    d = T0 + dt.timedelta(seconds=t)
    return f"[{level}{d.strftime('%m%d %H:%M:%S')}.{d.microsecond:06d}000 {where}]"


def nccl(host: str, pid: int, lr: int) -> str:
    return f"{host}:{pid}:{pid + 177} [{lr}]"


def ip_of(node_index: int) -> str:
    return f"10.{node_index // 250}.{node_index % 250}.12"


def init_lines(rnd: random.Random, fw: str, rank: int, nranks: int, host: str, node_i: int, lr: int,
               pid: int) -> list[str]:
    p = nccl(host, pid, lr)
    out = []
    if fw == "deepspeed":
        out += ["[{ts}] [INFO] [real_accelerator.py:219:get_accelerator] Setting ds_accelerator to cuda (auto detect)",
                "[{ts}] [INFO] [comm.py:856:init_distributed] Initializing TorchBackend in DeepSpeed with backend nccl"]
    if rank == 0:
        out += ["> initializing torch distributed ...", "NCCL version 2.21.5+cuda12.4"]
    out += [f"{p} NCCL INFO Bootstrap : Using eth0:{ip_of(node_i)}<0>",
            f"{p} NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB [RO]; "
            f"OOB eth0:{ip_of(node_i)}<0>",
            f"{p} NCCL INFO Using network IB",
            f"{p} NCCL INFO comm 0x{rnd.getrandbits(40):x} rank {rank} nranks {nranks} cudaDev {lr} nvmlDev {lr} "
            f"busId {rnd.choice(['18000', '2a000', '3a000', '5d000', '9a000', 'ab000'])} "
            f"commId 0x{rnd.getrandbits(60):x} - Init START"]
    for ch in range(2):
        peer = (rank + 8) % nranks
        out.append(f"{p} NCCL INFO Channel {ch:02d}/0 : {rank}[{lr}] -> {peer}[{peer % 8}] [send] via NET/IB/{lr % 4}"
                   "/GDRDMA")
    out += [f"{p} NCCL INFO Connected all rings",
            f"{p} NCCL INFO comm 0x{rnd.getrandbits(40):x} rank {rank} nranks {nranks} cudaDev {lr} nvmlDev {lr} "
            f"busId 18000 commId 0x{rnd.getrandbits(60):x} - Init COMPLETE"]
    if rank == 0 and fw == "megatron":
        out += ["> setting random seeds to 1234 ...",
                f"time to initialize megatron (seconds): {rnd.uniform(20, 90):.3f}",
                "[after megatron is initialized] datetime: {iso} "]
    return out


def loading_lines(rnd: random.Random, fw: str, rank: int) -> list[str]:
    out = []
    if fw == "megatron":
        if rank == 0:
            out += ["building GPT model ..."]
        if rank < 8:
            out.append(f" > number of parameters on (tensor, pipeline) model parallel rank ({rank % 4}, {rank // 4}):"
                       f" {rnd.randint(800_000_000, 900_000_000)}")
        if rank == 0:
            out += [" loading distributed checkpoint from /ckpt/run42 at iteration 4000",
                    "  successfully loaded checkpoint from /ckpt/run42 [ t 1/4, p 1/2 ] at iteration 4000",
                    "> building train, validation, and test datasets ...",
                    "[after dataloaders are built] datetime: {iso} ", "done with setup ...", "training ...",
                    "[before the start of training step] datetime: {iso} "]
    elif rank == 0:
        out += ["[{ts}] [INFO] [logging.py:128:log_dist] [Rank 0] DeepSpeed info: version=0.16.4, git-hash=unknown, "
                "git-branch=unknown",
                "[{ts}] [INFO] [logging.py:128:log_dist] [Rank 0] DeepSpeed Final Optimizer = FusedAdam",
                "[{ts}] [INFO] [logging.py:128:log_dist] [Rank 0] [Torch] Begin Load checkpoint from "
                "/out/global_step4000/mp_rank_00_model_states.pt..."]
    return out


def iteration_lines(rnd: random.Random, fw: str, rank: int, nranks: int, it: int, total: int,
                    ms: float) -> list[str]:
    if fw == "megatron":
        out = [f" [{{iso}}] iteration {it:8d}/{total:8d} | consumed samples: {it * 1024:12d} | elapsed time per "
               f"iteration (ms): {ms:.1f} | learning rate: {3e-4 * rnd.uniform(0.9, 1):.6E} | global batch size:  1024 "
               f"| lm loss: {rnd.uniform(1.8, 2.4):.6E} | loss scale: 1.0 | grad norm: {rnd.uniform(0.2, 0.5):.3f} "
               "| number of skipped iterations:   0 | number of nan iterations:   0 |"]
        if rank == nranks - 1:
            out += ["(min, max) time across ranks (ms):",
                    f"    forward-backward ...............................: ({ms * 0.96:.2f}, {ms * 0.97:.2f})",
                    f"    optimizer ......................................: ({ms * 0.01:.2f}, {ms * 0.012:.2f})"]
        return out
    return [f"[{{ts}}] [INFO] [logging.py:128:log_dist] [Rank {rank}] step={it}, skipped=0, lr=[{3e-5:.4e}], "
            "mom=[(0.9, 0.95)]",
            f"[{{ts}}] [INFO] [timer.py:264:stop] epoch=0/micro_step={it * 8}/global_step={it}, "
            f"RunningAvgSamplesPerSec={rnd.uniform(100, 110):.2f}, CurrSamplesPerSec={rnd.uniform(100, 110):.2f}, "
            "MemAllocated=41.2GB, MaxMemAllocated=63.9GB"]


def checkpoint_lines(fw: str, it: int) -> list[str]:
    if fw == "megatron":
        return [f"[{{iso}}] saving checkpoint at iteration {it:7d} to /ckpt/run42 in torch_dist format",
                f"  [{{iso}}] successfully saved checkpoint from iteration {it:7d} to /ckpt/run42 [ t 1/4, p 1/2 ]"]
    return [f"[{{ts}}] [INFO] [logging.py:128:log_dist] [Rank 0] [Torch] Checkpoint global_step{it} is about to be "
            "saved!",
            f"[{{ts}}] [INFO] [logging.py:128:log_dist] [Rank 0] Saving model checkpoint: "
            f"/out/global_step{it}/mp_rank_00_model_states.pt"]


def teardown_lines(fw: str, it: int, pid: int) -> list[str]:
    if fw == "megatron":
        return ["[after training is done] datetime: {iso} ", f"[exiting program at iteration {it}] datetime: {{iso}} "]
    return [f"[{{ts}}] [INFO] [launch.py:351:main] Process {pid} exits successfully."]


# Benign errors seen in successful jobs as well (L4 §4.1: error level is not failure-indicating).
NOISE_INIT = [
    "[W socket.cpp:663] [c10d] The client socket has failed to connect to [gpu-node-000]:29500 (errno: 99 - Cannot "
    "assign requested address).",
    "[E socket.cpp:957] [c10d] The client socket has timed out after 60s while trying to connect to (gpu-node-000, "
    "29500).",
    "ERROR: Could not build wheels for flash-attn, which is required to install pyproject.toml-based projects",
    "/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py:558: UserWarning: This DataLoader will "
    "create 16 worker processes in total. Our suggested max number of worker in current system is 12.",
]
NOISE_ITER = [
    "[{ts}] [WARNING] [stage3.py:2069:step] 3 pytorch allocator cache flushes since last step. this happens when there "
    "is high memory pressure and is detrimental to performance.",
    "[{ts}] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank {rank} Skipping step. Attempted loss "
    "scale: 65536, reducing to 32768",
    "{p} NCCL WARN NET/IB : mlx5_2:1 Got async event : GID table change",
]
