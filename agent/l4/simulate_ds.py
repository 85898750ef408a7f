"""A second, independent log generator for judging L4: DeepSpeed + PyTorch Lightning multi-node jobs.

Written apart from `simulate.py` on purpose (other formats, other roles, other faults), so that a localizer tuned to
one generator is caught out by the other. One file per node (`<host>.log`), every line carrying pdsh's `<host>: `
prefix as DeepSpeed's multi-node runner relays it; or, with `combined`, the one output the user's terminal shows
(all nodes' lines in time order, the runner's own lines without a prefix). Roles, as the frameworks print them:

* the launcher host (node 0) alone prints `deepspeed.launcher.runner` / `[runner.py]` lines, at start and at exit;
* every node's `[launch.py]` prints the world info at start and kills its subprocesses at a failure;
* rank 0 alone prints the Lightning progress bar lines, the DeepSpeed engine's `step=` lines, the model summary and
  the checkpoint callback lines, thousands of them in a long healthy run;
* every rank prints NCCL INFO init lines and a few benign warnings.

Faults, one node each: a bad GPU whose rank dies and whose peers then time out (`gpu`), an NCCL timeout from one
node's NIC (`nic`), a data-loader worker crash on one rank (`dataloader`), CUDA OOM on one rank (`oom`); at init,
mid-training or near the end of the run. `GroundTruth` names the node, the stage and the injected event lines.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from pathlib import Path

DS_FAULTS = ("gpu", "nic", "dataloader", "oom")
WHEN = ("init", "mid", "end")
T0 = dt.datetime(2024, 5, 2, 21, 14, 3)


@dataclass
class DsSpec:
    nodes: int = 8
    fault: str | None = None
    when: str = "mid"  # init | mid | end
    steps: int = 2000  # optimizer steps of the healthy part (mid/end faults stop inside them)
    progress_every: int = 5  # a progress-bar line every this many steps (tqdm refresh written to a file)
    seed: int = 0
    gpus_per_node: int = 8
    combined: bool = False  # one `deepspeed.out` as the user's terminal shows it, instead of a file per node


@dataclass
class DsTruth:
    fault: str | None
    faulty_node: str = ""
    stage: str = ""
    events: list[str] = field(default_factory=list)
    lines: int = 0


def _ts(t: float) -> str:
    d = T0 + dt.timedelta(seconds=t)
    return d.strftime("%Y-%m-%d %H:%M:%S,") + f"{d.microsecond // 1000:03d}"


def _glog(t: float) -> str:
    d = T0 + dt.timedelta(seconds=t)
    return f"[E{d.strftime('%m%d %H:%M:%S')}.{d.microsecond:06d}"


class _Gen:
    def __init__(self, spec: DsSpec):
        self.spec, self.rnd = spec, random.Random(spec.seed)
        self.hosts = [f"{self.rnd.choice(['dgx', 'hpc-gpu', 'a100x'])}{(spec.seed * 13 + i) % 500:03d}"
                      for i in range(spec.nodes)]
        # hosts of one job share a prefix, as on one cluster
        prefix = self.hosts[0].rstrip("0123456789")
        self.hosts = [f"{prefix}{(spec.seed * 13 + i) % 500:03d}" for i in range(spec.nodes)]
        self.g = spec.gpus_per_node
        self.world = spec.nodes * self.g
        self.pids = [self.rnd.randint(2000, 900_000) for _ in range(self.world)]
        self.ips = [f"172.{16 + i // 200}.{i % 200}.{self.rnd.randint(2, 250)}" for i in range(spec.nodes)]
        self.out: list[list[tuple[float, str]]] = [[] for _ in range(spec.nodes)]
        self.truth = DsTruth(spec.fault)

    def put(self, node: int, t: float, text: str, truth: bool = False, launcher: bool = False) -> None:
        """`launcher`: a line of the runner itself (it runs where the user typed `deepspeed`, node 0), which pdsh
        does not relay, so a combined output shows it without a host prefix."""
        line = text if launcher and self.spec.combined else f"{self.hosts[node]}: {text}"
        self.out[node].append((t, line))
        if truth and line not in self.truth.events:
            self.truth.events.append(line)

    def nccl(self, rank: int) -> str:
        n, lr = divmod(rank, self.g)
        return f"{self.hosts[n]}:{self.pids[rank]}:{self.pids[rank] + 211} [{lr}]"

    # --- healthy phases -------------------------------------------------------------------------------------------
    def launch(self) -> None:
        r, s = self.rnd, self.spec
        names = ",".join(self.hosts)
        self.put(0, 0.0, f"[{_ts(0)}] [INFO] [runner.py:463:main] Using IP address of {self.ips[0]} for node "
                         f"{self.hosts[0]}", launcher=True)
        self.put(0, 0.1, f"[{_ts(0.1)}] [INFO] [multinode_runner.py:80:get_cmd] Running on the following workers: "
                         f"{names}", launcher=True)
        self.put(0, 0.2, f"[{_ts(0.2)}] [INFO] [runner.py:568:main] cmd = pdsh -S -f 1024 -w {names} export "
                         "NCCL_IB_HCA=mlx5; cd /workspace/train; /usr/bin/python -u -m deepspeed.launcher.launch "
                         "--world_info=eyJ... --node_rank=%n --master_addr=" + self.ips[0] + " --master_port=29500 "
                         "train.py --config cfg/gpt-1.3b.yaml", launcher=True)
        for n in range(s.nodes):
            t = 2 + r.random()
            self.put(n, t, f"[{_ts(t)}] [INFO] [launch.py:139:main] 0 NCCL_IB_HCA=mlx5")
            self.put(n, t, f"[{_ts(t)}] [INFO] [launch.py:146:main] WORLD INFO DICT: {{'{self.hosts[0]}': "
                           f"[0, 1, 2, 3, 4, 5, 6, 7], ...}}")
            self.put(n, t, f"[{_ts(t)}] [INFO] [launch.py:152:main] nnodes={s.nodes}, num_local_procs={self.g}, "
                           f"node_rank={n}")
            self.put(n, t, f"[{_ts(t)}] [INFO] [launch.py:164:main] dist_world_size={self.world}")
            self.put(n, t, f"[{_ts(t)}] [INFO] [launch.py:166:main] Setting CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7")

    def init_rank(self, rank: int, t: float, upto: int = 99) -> None:
        n, lr = divmod(rank, self.g)
        r = self.rnd
        lines = [f"[{_ts(t)}] [INFO] [real_accelerator.py:203:get_accelerator] Setting ds_accelerator to cuda "
                 "(auto detect)",
                 f"[{_ts(t)}] [INFO] [comm.py:637:init_distributed] cdb=None",
                 f"Initializing distributed: GLOBAL_RANK: {rank}, MEMBER: {rank + 1}/{self.world}"]
        if rank == 0:
            lines += [f"[{_ts(t)}] [INFO] [comm.py:668:init_distributed] Initializing TorchBackend in DeepSpeed with "
                      "backend nccl", "-" * 100, "distributed_backend=nccl",
                      f"All distributed processes registered. Starting with {self.world} processes", "-" * 100,
                      f"{self.nccl(rank)} NCCL INFO cudaDriverVersion 12020", "NCCL version 2.18.5+cuda12.2"]
        p = self.nccl(rank)
        lines += [f"{p} NCCL INFO Bootstrap : Using ib0:{self.ips[n]}<0>",
                  f"{p} NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; "
                  f"OOB ib0:{self.ips[n]}<0>",
                  f"{p} NCCL INFO Using network IB",
                  f"{p} NCCL INFO comm 0x{r.getrandbits(44):x} rank {rank} nranks {self.world} cudaDev {lr} busId "
                  f"{r.choice(['7000', '0f000', '47000', '4e000', '87000', '90000', 'b7000', 'bd000'])} - Init START",
                  f"{p} NCCL INFO Channel 00/0 : {rank}[{lr}] -> {(rank + 1) % self.world}[{(lr + 1) % self.g}] "
                  f"via P2P/IPC/read",
                  f"{p} NCCL INFO Connected all rings", f"{p} NCCL INFO Connected all trees",
                  f"{p} NCCL INFO comm 0x{r.getrandbits(44):x} rank {rank} nranks {self.world} cudaDev {lr} busId "
                  f"{r.choice(['7000', '0f000', '47000'])} - Init COMPLETE",
                  f"LOCAL_RANK: {lr} - CUDA_VISIBLE_DEVICES: [0,1,2,3,4,5,6,7]"]
        for i, line in enumerate(lines[:upto]):
            self.put(n, t + i * 0.01, line)

    def loading(self, t: float) -> None:
        lines = [f"[{_ts(t)}] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.12.6, "
                 "git-hash=unknown, git-branch=unknown",
                 f"[{_ts(t)}] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed Flops Profiler Enabled: False",
                 f"[{_ts(t)}] [INFO] [logging.py:96:log_dist] [Rank 0] Using client Optimizer as basic optimizer",
                 f"[{_ts(t)}] [INFO] [stage_1_and_2.py:143:__init__] Reduce bucket size 500000000",
                 f"[{_ts(t)}] [INFO] [config.py:988:print] DeepSpeedEngine configuration:",
                 f"[{_ts(t)}] [INFO] [config.py:992:print]   zero_optimization_stage ...... 2",
                 "  | Name  | Type      | Params", "-" * 36, "0 | model | GPT2Model | 1.3 B", "-" * 36,
                 "1.3 B     Trainable params", "0         Non-trainable params", "1.3 B     Total params"]
        for i, line in enumerate(lines):
            self.put(0, t + i * 0.01, line)
        for rank in range(self.world):  # every rank warns once about its data loader (benign)
            n = rank // self.g
            self.put(n, t + 1 + self.rnd.random(), "/opt/conda/lib/python3.10/site-packages/lightning/pytorch/trainer/"
                     "connectors/data_connector.py:441: PossibleUserWarning: The 'train_dataloader' does not have many "
                     "workers which may be a bottleneck.")

    def training(self, t0: float, stop_step: int, sec: float) -> float:
        """Rank 0's progress lines up to `stop_step`; returns the time of the last step."""
        s, r = self.spec, self.rnd
        total = s.steps
        epoch_len = max(50, total // 3)
        t = t0
        for step in range(1, stop_step + 1):
            t = t0 + step * sec
            epoch, inner = divmod(step - 1, epoch_len)
            if step % s.progress_every == 0:
                pct = int(100 * (inner + 1) / epoch_len)
                el = int(step * sec)
                self.put(0, t, f"Epoch {epoch}:  {pct:2d}%|{'█' * (pct // 10):<10}| {inner + 1}/{epoch_len} "
                               f"[{el // 60:02d}:{el % 60:02d}<{(total - step) * int(sec) // 60:02d}:00,  "
                               f"{1 / sec:.2f}it/s, loss={r.uniform(1.9, 3.1):.3g}, v_num=7]")
            if step % 100 == 0:
                self.put(0, t, f"[{_ts(t)}] [INFO] [logging.py:96:log_dist] [Rank 0] step={step}, skipped=0, "
                               f"lr=[{r.uniform(1e-4, 3e-4):.6e}], mom=[(0.9, 0.95)]")
                self.put(0, t, f"[{_ts(t)}] [INFO] [timer.py:260:stop] epoch={epoch}/micro_step={step * 4}/"
                               f"global_step={step}, RunningAvgSamplesPerSec={r.uniform(300, 320):.4f}, "
                               f"CurrSamplesPerSec={r.uniform(290, 330):.4f}, MemAllocated=23.1GB, "
                               "MaxMemAllocated=61.7GB")
            if inner + 1 == epoch_len:
                self.put(0, t + 0.1, "Validation DataLoader 0: 100%|██████████| 40/40 [00:12<00:00,  3.21it/s]")
                self.put(0, t + 0.2, f"Epoch {epoch}, global step {step}: 'val_loss' reached {r.uniform(2, 3):.5f} "
                                     f"(best {r.uniform(2, 3):.5f}), saving model to '/ckpt/run7/epoch={epoch}-"
                                     f"step={step}.ckpt' as top 1")
                self.put(0, t + 0.3, f"[{_ts(t)}] [INFO] [logging.py:96:log_dist] [Rank 0] Saving model checkpoint: "
                                     f"/ckpt/run7/epoch={epoch}-step={step}.ckpt/checkpoint/mp_rank_00_model_states.pt")
                self.put(0, t + 5, f"[{_ts(t + 5)}] [INFO] [torch_checkpoint_engine.py:33:commit] [Torch] Checkpoint "
                                   f"epoch={epoch}-step={step}.ckpt is ready now!")
            if step % 500 == 0:  # benign allocator warnings on random ranks, through the run
                rank = r.randrange(self.world)
                self.put(rank // self.g, t + 0.05, f"[{_ts(t)}] [WARNING] [stage_1_and_2.py:1821:step] 2 pytorch "
                                                   "allocator cache flushes since last step. this happens when there "
                                                   "is high memory pressure and is detrimental to performance.")
        return t

    def success_end(self, t: float) -> None:
        self.put(0, t + 1, f"`Trainer.fit` stopped: `max_steps={self.spec.steps}` reached.")
        for rank in range(self.world):
            n = rank // self.g
            self.put(n, t + 2, f"[{_ts(t + 2)}] [INFO] [launch.py:347:main] Process {self.pids[rank]} exits "
                               "successfully.")

    # --- failure aftermath ---------------------------------------------------------------------------------------
    def traceback(self, rank: int, t: float, frames: list[str], error: str) -> None:
        n = rank // self.g
        lines = ["Traceback (most recent call last):",
                 '  File "/workspace/train/train.py", line 212, in <module>', "    main()"]
        for f in frames:
            lines += [f'  File "/opt/conda/lib/python3.10/site-packages/{f}"', "    return fn(*args, **kwargs)"]
        lines.append(error)
        for i, line in enumerate(lines):
            self.put(n, t + i * 1e-4, line, truth=(i == len(lines) - 1))

    def watchdog(self, ranks: list[int], t: float, seq: int, op: str = "ALLREDUCE") -> None:
        for rank in ranks:
            n = rank // self.g
            tt = t + self.rnd.uniform(0, 3)
            self.put(n, tt, f"[rank{rank}]:{_glog(tt)} ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught "
                            f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=1, NumelOut=1, "
                            "Timeout(ms)=1800000) ran for 1800085 milliseconds before timing out.")
            self.put(n, tt, f"[rank{rank}]:{_glog(tt)} ProcessGroupNCCL.cpp:1785] [PG 0 Rank {rank}] Exception "
                            f"(either an error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL "
                            f"work: {seq}, last completed NCCL work: {seq - 1}.")
            self.put(n, tt, f"[rank{rank}]:{_glog(tt)} ProcessGroupNCCL.cpp:630] [Rank {rank}] Some NCCL operations "
                            "have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU "
                            "operations might run on corrupted/incomplete data.")

    def teardown(self, t: float, failed_rank: int) -> None:
        for n in range(self.spec.nodes):
            for lr in range(self.g):
                rank = n * self.g + lr
                self.put(n, t, f"[{_ts(t)}] [INFO] [launch.py:315:sigkill_handler] Killing subprocess "
                               f"{self.pids[rank]}")
            code = 1 if n == failed_rank // self.g else -6
            self.put(n, t + 0.5, f"[{_ts(t + 0.5)}] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', "
                                 f"'train.py', '--local_rank={failed_rank % self.g if code == 1 else 0}'] exits with "
                                 f"return code = {code}")
        self.put(0, t + 1, f"pdsh@{self.hosts[0]}: {self.hosts[failed_rank // self.g]}: ssh exited with exit code 1",
                 launcher=True)
        for n in range(self.spec.nodes):
            if n != failed_rank // self.g:
                self.put(0, t + 1.1 + n * 1e-3, f"pdsh@{self.hosts[0]}: {self.hosts[n]}: ssh exited with exit code "
                                                "250", launcher=True)


def simulate_ds_job(out: str | Path, spec: DsSpec) -> DsTruth:
    """Write one job (one `<host>.log` per node, or one combined `deepspeed.out`) under `out` and return its ground
    truth."""
    g = _Gen(spec)
    r = g.rnd
    g.launch()
    for rank in range(g.world):
        g.init_rank(rank, 10 + r.random() * 5)
    sec = r.uniform(0.8, 3.0)
    if spec.fault is None:
        g.loading(40)
        g.success_end(g.training(60, spec.steps, sec))
        return _finish(g, Path(out))
    faulty = r.randrange(g.world)
    f = faulty // g.g
    g.truth.faulty_node = g.hosts[f]
    if spec.when == "init":
        g.truth.stage = "init"
        t = 20.0
        others = [k for k in range(g.world) if k // g.g != f]
        _fault_lines(g, spec.fault, faulty, t, init=True)
        g.watchdog(others, t + 1800, 1, "BROADCAST")
        g.teardown(t + 1805, faulty)
        return _finish(g, Path(out))
    g.loading(40)
    stop = r.randint(spec.steps // 5, spec.steps * 4 // 5) if spec.when == "mid" else spec.steps - r.randint(1, 20)
    t = g.training(60, stop, sec) + sec * 0.6
    g.truth.stage = "training"
    _fault_lines(g, spec.fault, faulty, t, init=False)
    seq = stop * 12 + r.randrange(10)
    survivors = [k for k in range(g.world) if k != faulty] if spec.fault != "nic" else \
        [k for k in range(g.world) if k // g.g != f]
    g.watchdog(survivors, t + 1800, seq)
    g.teardown(t + 1805, faulty)
    return _finish(g, Path(out))


def _fault_lines(g: _Gen, fault: str, faulty: int, t: float, init: bool) -> None:
    r, f = g.rnd, faulty // g.g
    p = g.nccl(faulty)
    lightning = ["lightning/pytorch/trainer/trainer.py\", line 544, in fit",
                 "lightning/pytorch/trainer/call.py\", line 44, in _call_and_handle_interrupt"]
    if fault == "gpu":
        g.put(f, t, f"{p} NCCL WARN Cuda failure 'uncorrectable ECC error encountered'" if r.random() < 0.5 else
              f"{p} NCCL WARN Cuda failure 'unspecified launch failure'", truth=True)
        g.put(f, t, f"{p} NCCL INFO enqueue.cc:1296 -> 1", truth=True)
        error = ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled cuda "
                 "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.5" if init else
                 "RuntimeError: CUDA error: an illegal memory access was encountered")
        g.traceback(faulty, t + 0.5, [*lightning, 'torch/distributed/distributed_c10d.py", line 2050, in all_reduce'],
                    error)
    elif fault == "nic":
        dev = r.randrange(4)
        for lr in range(g.g):  # every rank on the node loses the HCA it was using
            k = f * g.g + lr
            peer = g.ips[(f + 1) % g.spec.nodes]
            g.put(f, t + r.random(), f"{g.nccl(k)} transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from "
                                     f"peer {peer}<{r.randint(30000, 60000)}> with status=12 opcode=0 len=0 vendor err "
                                     f"129 (Recv) localGid ::ffff:{g.ips[f]} hca mlx5_{dev}", truth=True)
            g.put(f, t + 1 + r.random(), f"{g.nccl(k)} NCCL INFO transport/net.cc:1298 -> 6", truth=True)
        g.put(f, t, f"{g.nccl(f * g.g)} NCCL WARN NET/IB : mlx5_{dev}:1 Got async event : port error", truth=True)
        if not init:
            g.watchdog(list(range(f * g.g, (f + 1) * g.g)), t + 600, 0 if init else 7)
    elif fault == "dataloader":
        pid = r.randint(100000, 999999)
        n = faulty // g.g
        g.put(n, t, "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared "
                    "memory (shm).", truth=True)
        g.traceback(faulty, t + 0.2, [*lightning, 'torch/utils/data/dataloader.py", line 1133, in _try_get_data'],
                    f"RuntimeError: DataLoader worker (pid {pid}) is killed by signal: Bus error. It is possible that "
                    "dataloader's workers are out of shared memory. Please try to raise your shared memory limit.")
    else:  # oom
        g.traceback(faulty, t, [*lightning, 'torch/nn/modules/module.py", line 1518, in _wrapped_call_impl'],
                    f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {r.choice([2, 4, 8])}.00 GiB. GPU "
                    f"{faulty % g.g} has a total capacity of 79.15 GiB of which 1.{r.randint(10, 99)} GiB is free.")


def _finish(g: _Gen, out: Path) -> DsTruth:
    out.mkdir(parents=True, exist_ok=True)
    if g.spec.combined:
        merged = sorted((t, n, k, line) for n, lines in enumerate(g.out) for k, (t, line) in enumerate(lines))
        (out / "deepspeed.out").write_text("\n".join(line for *_, line in merged) + "\n", encoding="utf-8")
        g.truth.lines = len(merged)
        return g.truth
    total = 0
    for n, host in enumerate(g.hosts):
        lines = [line for _, line in sorted(g.out[n], key=lambda x: x[0])]
        (out / f"{host}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
        total += len(lines)
    g.truth.lines = total
    return g.truth
