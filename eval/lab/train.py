"""The fault lab's training program: a small DDP model trained with gloo on CPU, started by a real launcher.

It is an ordinary user script (progress prints, a NaN guard, data shards, node-local checkpoints); what it prints is
what the job logs. A fault is planted through LAB_FAULT (set on the faulty node only) as a user or an environment
would cause it: a bug that raises, an os._exit, a rank that stops calling collectives, a memory leak under a memory
limit, a corrupt shard. The moment of the fault is written to LAB_MARK (a side file, never the log) for the truth.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

STEPS_PER_SHARD = 10


def _mark(what: str) -> None:
    """Records when the planted fault fires, for the truth file only."""
    mark = os.environ.get("LAB_MARK")
    if mark:
        with open(mark, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"time": time.time(), "what": what, "rank": os.environ.get("RANK")}) + "\n")


def _status_kb(field: str) -> int:
    return int(next(ln.split()[1] for ln in Path("/proc/self/status").read_text().splitlines()
                    if ln.startswith(field)))


def _memory_cgroup(limit_mb: int) -> None:
    """Moves this process into its node's memory cgroup (prepared by the lab) with a limit above its present size:
    the leak below then meets the kernel's OOM killer, as on a node whose container has a memory limit."""
    group = Path(os.environ["LAB_MEMCG"])
    rss_kb = _status_kb("VmRSS:")
    (group / "memory.limit_in_bytes").write_text(str(rss_kb * 1024 + limit_mb * 2**20))
    (group / "cgroup.procs").write_text(str(os.getpid()))


def main() -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    # ranks per node: torchrun (and Accelerate) say LOCAL_WORLD_SIZE, the DeepSpeed launcher LOCAL_SIZE
    local_world = max(int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("LOCAL_SIZE") or 1), 1)
    cfg = json.loads(os.environ.get("LAB_CONFIG", "{}"))
    fault = json.loads(os.environ.get("LAB_FAULT", "{}"))
    mine = fault.get("rank") in (None, local_rank) and bool(fault)
    steps, every_rank, style = int(cfg.get("steps", 40)), bool(cfg.get("every_rank")), cfg.get("style", "print")
    if style == "logging":
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("train")

    def say(msg: str, everyone: bool = False) -> None:
        if rank == 0 or everyone:
            if style == "logging":
                log.info(msg)
            else:
                print(f"[rank {rank}] {msg}" if everyone else msg, flush=True)

    torch.manual_seed(1234)
    say(f"initializing process group: world size {world}")
    launcher, timeout = os.environ.get("LAB_LAUNCHER", "torchrun"), timedelta(seconds=float(cfg.get("timeout", 20)))
    # a node that runs an older checkout of the model code (another hidden width): DDP's start-up check catches it
    hidden = 192 if mine and fault["kind"] == "code_skew" else 256
    if mine and fault["kind"] == "code_skew":
        _mark("older model code")
    model = nn.Sequential(nn.Linear(32, hidden), nn.ReLU(), nn.Linear(hidden, 1))
    opt: torch.optim.Optimizer
    if launcher == "accelerate":
        # what an Accelerate user writes: the Accelerator sets up the process group (gloo on CPU) and wraps the model
        from accelerate import Accelerator
        from accelerate.utils import InitProcessGroupKwargs
        accelerator = Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(timeout=timeout)])
        say(f"process group ready on {os.uname().nodename}", everyone=True)
        ddp, opt = accelerator.prepare(model, torch.optim.Adam(model.parameters(), lr=1e-3))
        backward = accelerator.backward
    else:
        if launcher == "deepspeed":
            import deepspeed
            deepspeed.init_distributed(dist_backend="gloo", timeout=timeout)
        else:
            dist.init_process_group("gloo", timeout=timeout)
        say(f"process group ready on {os.uname().nodename}", everyone=True)
        ddp = DistributedDataParallel(model)
        opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)

        def backward(loss: torch.Tensor) -> None:
            loss.backward()
    say(f"model built: {sum(p.numel() for p in model.parameters())} parameters")
    # checkpoints go to the node's own disk (the lab gives each node a directory; a full one is a small tmpfs)
    data_dir, ckpt_dir = Path(cfg["data"]), Path(cfg["ckpt"]) / os.uname().nodename
    if mine and fault["kind"] == "oom_rlimit":
        # an address-space limit as `ulimit -v` on the node sets it: a little above what the process maps now
        mapped = _status_kb("VmSize:")
        resource.setrlimit(resource.RLIMIT_AS, (mapped * 1024 + 256 * 2**20,) * 2)
    if mine and fault["kind"] == "oom_cgroup":
        _memory_cgroup(200)
    shard: np.ndarray | None = None
    leak: list[torch.Tensor] = []
    work_a, work_b = torch.randn(256, 256), torch.randn(256, 256)
    read_mb = int(cfg.get("read_mb", 0))
    if read_mb and local_rank == 0:
        # the node's local data cache (telemetry jobs): written once, then read a slice a step through the page
        # cache; under a memory limit near the working set the cache no longer fits and every read goes to disk
        cache = data_dir / f"cache-{os.uname().nodename}.bin"
        with cache.open("wb") as fh:
            fh.write(os.urandom(read_mb * 2**20))
    if mine and fault["kind"] == "missing_shard":
        # purged before training reaches it: this process's own shard. Which global rank a node runs is known only
        # here (torchrun's rendezvous numbers the nodes in the order they arrive)
        (data_dir / f"shard-{rank:03d}-{(int(fault['step']) - 1) // STEPS_PER_SHARD:02d}.npy").unlink()
        _mark("shard removed")
    say(f"training for {steps} steps")
    began = time.time()
    for step in range(1, steps + 1):
        if (step - 1) % STEPS_PER_SHARD == 0:
            index = (step - 1) // STEPS_PER_SHARD
            path = data_dir / f"shard-{rank:03d}-{index:02d}.npy"
            if mine and fault["kind"] == "missing_shard" and step >= fault["step"]:
                _mark("open missing shard")
            shard = np.load(path)
        assert shard is not None
        row = ((step - 1) % STEPS_PER_SHARD) * 16
        x = torch.from_numpy(shard[row:row + 16, :32]).float()
        y = torch.from_numpy(shard[row:row + 16, 32:33]).float()
        if mine and step == fault.get("step"):
            kind = fault["kind"]
            _mark(kind)
            if kind == "exception":
                lengths = [len(b) for b in np.array_split(np.arange(world * 4), world)]
                x = x[:, : lengths[world + step % 7]]  # an off-by-one in user code: IndexError
            elif kind == "exit":
                os._exit(int(fault.get("code", 3)))
            elif kind == "hang":
                time.sleep(3600)  # stops calling collectives; its peers wait in the next all-reduce
            elif kind == "nan":
                x = x * float("nan")  # the corrupt rows of this node's shard
        if mine and fault.get("kind") in ("oom_rlimit", "oom_cgroup") and step >= fault["step"]:
            leak.append(torch.ones(64, 2**20 // 4))  # keeps every batch's activations: 64 MiB a step
        for _ in range(int(cfg.get("work", 0))):  # the step's other compute (telemetry jobs: ~10 ms of CPU)
            torch.mm(work_a, work_b)
        if read_mb and local_rank == 0:
            with cache.open("rb") as fh:
                fh.seek((step * 4 % read_mb) * 2**20)
                fh.read(4 * 2**20)
        loss = nn.functional.mse_loss(ddp(x), y)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss is {loss.item()} at step {step}; stopping before the update")
        opt.zero_grad()
        backward(loss)
        opt.step()
        if step % int(cfg.get("log_every", 1)) == 0:
            say(f"step {step}/{steps} | loss {loss.item():.4f} | {(time.time() - began) / step:.3f} s/step",
                everyone=every_rank)
        if step % int(cfg.get("ckpt_every", 10**9)) == 0 and local_rank == 0:
            say(f"saving checkpoint at step {step} to {ckpt_dir}", everyone=True)
            if mine and fault["kind"] == "disk_full":
                _mark("checkpoint on a full disk")
            ckpt_dir.mkdir(parents=True, exist_ok=True)
            state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}
            torch.save(state, ckpt_dir / f"step{step:05d}-node{rank // local_world}.pt")
        time.sleep(float(cfg.get("pause", 0.1)))
    dist.barrier()
    say("training done")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
