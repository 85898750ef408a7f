"""Multi-rank training-job log simulator with injected faults and ground truth (for the L4 evaluation and tests).

A job is `ranks` processes on `ranks / gpus_per_node` nodes running Megatron-LM or DeepSpeed; logs are written
per rank (`<node>/rank<k>.log`) or per node (`<node>.log`, torchrun `[defaultN]:` prefixes, ranks interleaved by
time), some gzipped. Faults: a faulty GPU (Xid 79 / ECC / unknown CUDA error) whose ring neighbours report IB
completion errors before the faulty rank's own asynchronous CUDA error surfaces; an IB link flap in one iteration;
a hung node (silent; every other rank's watchdog times out); a user error at start-up. Benign errors (socket
retries, wheel build errors, allocator warnings) appear in failed and successful jobs alike.
"""

from __future__ import annotations

import gzip
import random
from dataclasses import dataclass, field
from pathlib import Path

from agent.l4 import simlines as sl

FAULTS = ("gpu", "link_flap", "hang", "user_init")


@dataclass
class JobSpec:
    ranks: int = 16
    framework: str = "megatron"  # megatron | deepspeed
    layout: str = "per_rank"  # per_rank | per_node
    iterations: int = 40
    fault: str | None = None  # None (successful job) or one of FAULTS
    seed: int = 0
    gpus_per_node: int = 8
    gzip_fraction: float = 0.0
    noise_probability: float = 0.7  # each benign-noise kind appears in a job with this probability
    checkpoint_every: int = 25


@dataclass
class GroundTruth:
    fault: str | None
    faulty_nodes: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)  # one example line per injected failure-indicating event kind
    stage: str = ""
    iterations: list[int] = field(default_factory=list)
    lines: int = 0


class _Job:
    def __init__(self, spec: JobSpec):
        self.spec = spec
        self.rnd = random.Random(spec.seed)
        gpn = min(spec.gpus_per_node, spec.ranks)
        self.gpn = gpn
        self.nodes = max(1, spec.ranks // gpn)
        self.hosts = [f"gpu-node-{(spec.seed * 7 + i) % 1000:03d}" for i in range(self.nodes)]
        self.pids = [self.rnd.randint(10_000, 4_000_000) for _ in range(spec.ranks)]
        self.logs: list[list[tuple[float, str]]] = [[] for _ in range(spec.ranks)]
        self.kernel: list[list[tuple[float, str]]] = [[] for _ in range(self.nodes)]
        self.truth = GroundTruth(spec.fault)
        self._kinds: dict[str, str] = {}

    def node(self, rank: int) -> int:
        return rank // self.gpn

    def emit(self, rank: int, t: float, text: str, kind: str | None = None) -> None:
        line = self.fmt(rank, t, text)
        self.logs[rank].append((t, line))
        if kind is not None:
            self._kinds.setdefault(kind, line)

    def fmt(self, rank: int, t: float, text: str) -> str:
        lr = rank % self.gpn
        return text.format(ts=sl.pyts(t), iso=sl.isots(t), rank=rank,
                           p=sl.nccl(self.hosts[self.node(rank)], self.pids[rank], lr))

    def kernel_line(self, node: int, t: float, text: str, kind: str) -> None:
        self.kernel[node].append((t, text))
        self._kinds.setdefault(kind, text)


def _normal(job: _Job, last_iteration: int, stop: dict[int, float]) -> float:
    """Init, loading and iterations up to `last_iteration` (ranks in `stop` go silent at that time); returns the
    end time of the last iteration."""
    spec, rnd = job.spec, job.rnd
    for r in range(spec.ranks):
        n = job.node(r)
        for i, line in enumerate(sl.init_lines(rnd, spec.framework, r, spec.ranks, job.hosts[n], n, r % job.gpn,
                                               job.pids[r])):
            job.emit(r, 1 + i * 0.5 + rnd.random(), line)
        for i, line in enumerate(sl.loading_lines(rnd, spec.framework, r)):
            job.emit(r, 60 + i + rnd.random(), line)
    for kind in sl.NOISE_INIT:  # benign start-up errors on a few random ranks
        if rnd.random() < spec.noise_probability:
            for r in rnd.sample(range(spec.ranks), max(1, spec.ranks // 16)):
                job.emit(r, 5 + rnd.random() * 40, kind)
    iter_s = rnd.uniform(2, 10)
    t = 120.0
    for it in range(1, last_iteration + 1):
        t = 120 + it * iter_s
        for r in range(spec.ranks):
            if r in stop and t > stop[r]:
                continue
            for line in sl.iteration_lines(rnd, spec.framework, r, spec.ranks, it, spec.iterations, iter_s * 1000):
                job.emit(r, t + rnd.random() * 0.2, line)
        if it % spec.checkpoint_every == 0:
            for line in sl.checkpoint_lines(spec.framework, it):
                job.emit(0, t + 0.5, line)
    for kind in sl.NOISE_ITER:
        if rnd.random() < spec.noise_probability:
            for _ in range(max(1, spec.ranks // 32)):
                job.emit(rnd.randrange(spec.ranks), 120 + rnd.uniform(0, last_iteration * iter_s), kind)
    return t


def _watchdog(job: _Job, ranks: list[int], t: float) -> None:
    for r in ranks:
        seq = 48211 + job.rnd.randrange(3)
        job.emit(r, t, f"{sl.glog('E', t, 'ProcessGroupNCCL.cpp:632')} [Rank {r}] Watchdog caught collective "
                       f"operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=26214400, "
                       f"NumelOut=26214400, Timeout(ms)=600000) ran for 600042 milliseconds before timing out.",
                 "watchdog")
        job.emit(r, t + 0.01, f"{sl.glog('E', t, 'ProcessGroupNCCL.cpp:681')} [Rank {r}] Some NCCL operations have "
                              "failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU "
                              "operations might run on corrupted/incomplete data.", "watchdog_corrupt")
        job.emit(r, t + 0.02, f"{sl.glog('E', t, 'ProcessGroupNCCL.cpp:695')} [Rank {r}] To avoid data "
                              "inconsistency, we are taking the entire process down.", "watchdog_down")


def _agent_failure(job: _Job, t: float, first_rank: int, exitcode: int) -> None:
    """torchrun's elastic agent on every node, and the ChildFailedError root-cause block on node 0's agent."""
    for n in range(job.nodes):
        r = n * job.gpn
        job.emit(r, t, f"{sl.glog('E', t, 'torch/distributed/elastic/multiprocessing/api.py:984')} failed (exitcode: "
                       f"{exitcode}) local_rank: 0 (pid: {job.pids[r]}) of binary: /usr/bin/python3", "agent_failed")
    host = job.hosts[job.node(first_rank)]
    block = ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
             "Root Cause (first observed failure):", f"  host      : {host}",
             f"  rank      : {first_rank} (local_rank: {first_rank % job.gpn})",
             f"  exitcode  : {exitcode} (pid: {job.pids[first_rank]})"]
    for i, line in enumerate(block):
        job.emit(0, t + 0.1 + i * 0.001, line, f"root_cause_{i}")


def _gpu_fault(job: _Job, k: int) -> None:
    spec, rnd = job.spec, job.rnd
    faulty = rnd.randrange(spec.ranks)
    f = job.node(faulty)
    tf = _normal(job, k, {}) + rnd.uniform(1, 5)
    variant = rnd.choice(["xid79", "ecc", "unknown"])
    if variant != "unknown" and rnd.random() < 0.6:
        text = ("NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus." if variant == "xid79" else
                "NVRM: Xid (PCI:0000:19:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error "
                "(DBE) has been detected on GPU in the framebuffer at partition 2, subpartition 1.")
        job.kernel_line(f, tf, text, "xid")
    # The faulty rank's error surfaces asynchronously, after its peers already saw the link drop.
    te = tf + rnd.uniform(10, 60)
    if variant == "ecc":
        job.emit(faulty, te, "RuntimeError: CUDA error: uncorrectable ECC error encountered", "cuda_ecc")
    else:
        job.emit(faulty, te, "{p} NCCL WARN Cuda failure 'unknown error'", "nccl_cuda_failure")
        job.emit(faulty, te, "terminate called after throwing an instance of 'c10::CUDAError'", "terminate")
        job.emit(faulty, te, "  what():  CUDA error: unknown error", "cuda_unknown")
    job.emit(faulty, te, "Exception raised from query at ../aten/src/ATen/cuda/CUDAEvent.h:95 (most recent call "
                         "first):", "exception_raised")
    for nb in {(f - 1) % job.nodes, (f + 1) % job.nodes} - {f}:
        for lr in range(job.gpn):
            r = nb * job.gpn + lr
            t = tf + rnd.uniform(0.5, 4)
            job.emit(r, t, "{p} transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer "
                           f"{sl.ip_of(f)}<{rnd.randint(30000, 60000)}> with error 12, opcode 0, len 0, vendor err 129 "
                           "(Recv)", "ib_completion")
            job.emit(r, t, "{p} NCCL INFO transport/net.cc:1134 -> 6", "nccl_trail_net")
            job.emit(r, t, "{p} NCCL INFO proxy.cc:858 -> 6 [Proxy Thread]", "nccl_trail_proxy")
            if rnd.random() < 0.5:
                job.emit(r, t + 1, "{p} NCCL WARN socketProgress: Connection closed by remote peer "
                                   f"{job.hosts[f]}<{rnd.randint(30000, 60000)}>", "socket_closed")
    _watchdog(job, [r for r in range(spec.ranks) if r != faulty], tf + 600)
    _agent_failure(job, tf + 605, faulty, -6)
    job.truth.faulty_nodes = [job.hosts[f]]
    job.truth.stage = "training"


def _link_flap(job: _Job, k: int) -> None:
    spec, rnd = job.spec, job.rnd
    f = rnd.randrange(job.nodes)
    end = _normal(job, spec.iterations, {})
    iter_s = (end - 120) / spec.iterations
    t = 120 + (k - 1) * iter_s + iter_s * 0.5  # inside iteration k, before its marker line
    dev = rnd.randrange(4)
    job.kernel_line(f, t, f"mlx5_core 0000:{0x5e + dev:02x}:00.0 ibp{94 + dev}s0: Link down", "link_down")
    job.kernel_line(f, t + 0.3, f"mlx5_core 0000:{0x5e + dev:02x}:00.0 ibp{94 + dev}s0: Link up", "link_up")
    for lr in range(job.gpn):
        if lr % 4 == dev:
            job.emit(f * job.gpn + lr, t + 0.1, f"{{p}} NCCL WARN NET/IB : mlx5_{dev}:1 Got non-fatal async event: "
                                                "port error(10)", "port_error")
    for r in range(spec.ranks):
        job.emit(r, end + 5, sl.teardown_lines(spec.framework, spec.iterations, job.pids[r])[0])
    job.truth.faulty_nodes = [job.hosts[f]]
    job.truth.iterations = [k]
    job.truth.stage = "training"


def _hang(job: _Job, k: int) -> None:
    spec, rnd = job.spec, job.rnd
    f = rnd.randrange(job.nodes)
    silent = {r: 0.0 for r in range(f * job.gpn, (f + 1) * job.gpn)}
    end = _normal(job, k, {})
    for r in silent:  # the hung node stops before its iteration k line
        job.logs[r] = [(t, line) for t, line in job.logs[r] if t < end - 0.5]
    _watchdog(job, [r for r in range(spec.ranks) if r not in silent], end + 600)
    first = next(r for r in range(spec.ranks) if r not in silent) if len(silent) < spec.ranks else 0
    _agent_failure(job, end + 605, first, -6)
    job.truth.faulty_nodes = [job.hosts[f]]
    job.truth.stage = "training"


USER_ERRORS = [
    ("FileNotFoundError: [Errno 2] No such file or directory: '/data/corpus_text_document.idx'", "loading"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of "
     "79.11 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.06 GiB memory in use.",
     "loading"),
    ("AssertionError: num_attention_heads (30) must be a multiple of tensor_model_parallel_size (8)", "init"),
]


# Loading line k is logged at 60 + k + U(0, 1); Megatron's line 4 is "> building train, validation, and test
# datasets ...", line 5 "[after dataloaders are built]".
LOADING_ERROR_AT = 65.0


def _user_init(job: _Job) -> None:
    spec, rnd = job.spec, job.rnd
    error, stage = rnd.choice(USER_ERRORS)
    _normal(job, 0, {})
    # Nothing the job would log after the error: the assertion fires before the model is built (no loading lines);
    # a loading error stops the job while it builds its datasets, so rank 0 never logs "training ..." (it used to,
    # which made the logs say training while the truth said loading).
    cut = 60.0 if stage == "init" else LOADING_ERROR_AT
    job.logs = [[(t, line) for t, line in lines if t < cut] for lines in job.logs]
    t = 62.0 if stage == "init" else 90.0
    for r in range(spec.ranks):
        job.emit(r, t, "Traceback (most recent call last):", "traceback")
        job.emit(r, t, '  File "/workspace/Megatron-LM/pretrain_gpt.py", line 236, in <module>', "tb_frame")
        job.emit(r, t, "    pretrain(train_valid_test_datasets_provider,", "tb_code")
        job.emit(r, t + 0.01, error, "user_error")
    _agent_failure(job, t + 5, 0, 1)
    job.truth.stage = stage


def simulate_job(out: str | Path, spec: JobSpec) -> GroundTruth:
    """Write the job's logs under `out` and return its ground truth."""
    job = _Job(spec)
    k = job.rnd.randint(max(2, spec.iterations // 3), max(3, spec.iterations - 2))
    if spec.fault is None:
        end = _normal(job, spec.iterations, {})
        for r in range(spec.ranks):
            for line in sl.teardown_lines(spec.framework, spec.iterations, job.pids[r])[: 2 if r == 0 else 1]:
                job.emit(r, end + 5, line)
    else:
        {"gpu": _gpu_fault, "link_flap": _link_flap, "hang": _hang}.get(spec.fault, lambda j, _: _user_init(j))(job, k)
    job.truth.events = list(job._kinds.values())
    job.truth.lines = _write(job, Path(out))
    return job.truth


def _write(job: _Job, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    total = 0
    files: dict[Path, list[str]] = {}
    for n, host in enumerate(job.hosts):
        ranks = range(n * job.gpn, (n + 1) * job.gpn)
        if job.spec.layout == "per_node":
            merged = sorted([(t, f"[default{r % job.gpn}]:{line}") for r in ranks for t, line in job.logs[r]]
                            + job.kernel[n])
            files[out / f"{host}.log"] = [line for _, line in merged]
        else:
            for r in ranks:
                extra = job.kernel[n] if r % job.gpn == 0 else []
                files[out / host / f"rank{r}.log"] = [line for _, line in sorted(job.logs[r] + extra)]
    for path, lines in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        data = ("\n".join(lines) + "\n").encode()
        total += len(lines)
        if job.rnd.random() < job.spec.gzip_fraction:
            path.with_name(path.name + ".gz").write_bytes(gzip.compress(data, 1))
        else:
            path.write_bytes(data)
    return total
