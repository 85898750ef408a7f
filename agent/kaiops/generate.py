"""Simulated training tasks with KAIOPS' class mix and the precursor shapes of shared/research/anomaly_data.md §5.

A task is the 30 minutes before an event on a job of 1-16 hosts: job-level minute metrics, the job's log lines and
its host list. Marginals come from real slices: AcmeTrace utilisation quantiles (GPU util bimodal, ~98 % median
when training, a quarter of samples idle; FB used median 75 %, p95 93 %; node CPU median 8-20 %, p95 47-55 %; node
memory median 7-15 %, p95 28-38 %) and Alibaba PAI minibatch times (a straggler's iteration time rises 1.3-2.3x over
its peers, transient, with onset and recovery; the job's GPU util and NIC throughput drop by the same factor since
every rank waits in all-reduce). The cluster (hosts, lemon hosts, bad racks) is fixed and shared by every seed, so
train and held-out sets come from the same cluster; the seed draws the tasks.

The hard cases stay hard (decided before any model was trained): half of Hardware faults have no precursor and
only 55 % log an Xid line; Network and Performance both show throughput drops; a GPU-memory leak ending in OOM is
Performance (KAIOPS Table VII) while an immediate OOM is Software; 30 % of Normal jobs log benign errors, 15 %
have a decoy dip, some complete (metrics fall to 0 at the end like a crash); 6 % of anomaly labels are swapped to a
confusable class.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from agent.kaiops import CLASSES, METRICS, STEPS
from agent.kaiops import loglines as ll

MIX = (0.807, 0.103, 0.051, 0.024, 0.015)  # KAIOPS Train-Task-Ops: 8551/1089/537/252/163 of 10,592
CLUSTER_SEED = 20251123
N_HOSTS = 480
RACK = 16
LABEL_NOISE = 0.06
CONFUSABLE = {"Software": ("Performance",), "Performance": ("Network", "Software"),
              "Network": ("Performance", "Hardware"), "Hardware": ("Network",)}


@dataclass(frozen=True)
class Cluster:
    hosts: tuple[str, ...]
    lemons: tuple[int, ...]  # hosts with elevated GPU hardware fault rates (Meta HPCA'25 lemon nodes)
    bad_racks: tuple[int, ...]  # racks behind a flaky switch
    slow: tuple[int, ...]  # hosts prone to throttling (stragglers)


def cluster() -> Cluster:
    rnd = random.Random(CLUSTER_SEED)
    hosts = tuple(f"gpu-node-{i:03d}" for i in range(N_HOSTS))
    picks = rnd.sample(range(N_HOSTS), 22)
    return Cluster(hosts, tuple(sorted(picks[:12])), tuple(sorted(rnd.sample(range(N_HOSTS // RACK), 2))),
                   tuple(sorted(picks[12:])))


def _hosts(rnd: random.Random, c: Cluster, label: str) -> list[int]:
    n = rnd.choices((1, 2, 4, 8, 16), (0.3, 0.25, 0.2, 0.15, 0.1))[0]
    chosen = rnd.sample(range(N_HOSTS), n)
    if label == "Hardware" and rnd.random() < 0.6:
        chosen[rnd.randrange(n)] = rnd.choice(c.lemons)
    elif label == "Network" and rnd.random() < 0.5:
        chosen[rnd.randrange(n)] = rnd.choice(c.bad_racks) * RACK + rnd.randrange(RACK)
    elif label == "Performance" and rnd.random() < 0.35:
        chosen[rnd.randrange(n)] = rnd.choice(c.slow)
    return list(dict.fromkeys(chosen))


def _ar_noise(nrs: np.random.Generator, scale: float) -> np.ndarray:
    e = nrs.normal(0, scale, STEPS)
    out = np.empty(STEPS)
    acc = 0.0
    for i in range(STEPS):
        acc = 0.6 * acc + e[i]
        out[i] = acc
    return out


def _base(nrs: np.random.Generator, n_hosts: int) -> tuple[dict[str, np.ndarray], bool]:
    training = nrs.random() < 0.85  # else an eval/debug job: the idle mode of AcmeTrace's bimodal GPU util
    drift = np.linspace(0, nrs.uniform(-1.5, 1.5), STEPS)  # time-of-day drift of ~1-2 %
    gpu = (nrs.uniform(90, 99.5) if training else nrs.uniform(0, 40)) + drift + _ar_noise(nrs, 1.2)
    fb = np.clip(nrs.normal(75, 10), 30, 95) if training else nrs.uniform(5, 50)
    cpu = float(np.clip(math.exp(nrs.normal(math.log(14), 0.7)), 2, 90))
    mem = float(np.clip(math.exp(nrs.normal(math.log(11), 0.65)), 2, 80))
    net = nrs.uniform(3000, 25000) if n_hosts > 1 else nrs.uniform(20, 400)
    if not training:
        net *= 0.1
    m = {"cpu_util": cpu * (1 + _ar_noise(nrs, 0.04)), "mem_util": mem + _ar_noise(nrs, 0.2),
         "gpu_util": gpu, "gpu_mem_util": fb + _ar_noise(nrs, 0.3),
         "net_rx_mbps": net * (1 + _ar_noise(nrs, 0.05)), "net_tx_mbps": net * (1 + _ar_noise(nrs, 0.05)),
         "disk_read_mbps": nrs.uniform(20, 800) * (1 + _ar_noise(nrs, 0.1)),
         "disk_write_mbps": nrs.uniform(2, 40) * (1 + _ar_noise(nrs, 0.1))}
    return m, training


def _dip(m: dict[str, np.ndarray], at: int, depth: float, width: int = 1, disk: bool = True) -> None:
    s = slice(at, min(STEPS, at + width))
    m["gpu_util"][s] *= 1 - depth
    m["net_rx_mbps"][s] *= 1 - depth
    m["net_tx_mbps"][s] *= 1 - depth
    if disk:
        m["disk_write_mbps"][s] += 500 + 1500 * depth


def _stop(m: dict[str, np.ndarray], at: int) -> None:
    """The job is gone from minute `at`: GPUs idle, memory freed, no traffic."""
    for name, level in (("gpu_util", 0.0), ("gpu_mem_util", 0.5), ("net_rx_mbps", 1.0), ("net_tx_mbps", 1.0),
                        ("disk_read_mbps", 0.5), ("disk_write_mbps", 0.5)):
        m[name][at:] = level
    m["cpu_util"][at:] = np.minimum(m["cpu_util"][at:], 3.0)


def _iterations(lm: ll.LineMaker, rnd: random.Random, minutes: list[int], ms: float) -> list[tuple[float, str]]:
    it0 = rnd.randint(1000, 90_000)
    return [(t + 0.1, line) for t in minutes for line in lm.iteration(t, it0 + t * 10, ms)]


def _normal(rnd, nrs, m, lm, out):
    if rnd.random() < 0.6:
        at = rnd.randrange(STEPS)
        _dip(m, at, rnd.uniform(0.4, 0.8))
        out += [(at + 0.5, line) for line in lm.checkpoint(at, 4000)]
    if rnd.random() < 0.15:  # decoy transient
        _dip(m, rnd.randrange(STEPS), rnd.uniform(0.2, 0.5), rnd.randint(1, 2), disk=False)
    if rnd.random() < 0.15:  # the job completed: metrics fall like a crash, but the log says done
        at = STEPS - rnd.randint(1, 2)
        _stop(m, at)
        out.append((at, lm.fmt(ll.COMPLETED, at)))
    return "normal"


def _software(rnd, nrs, m, lm, out):
    kind = rnd.choices(("startup", "host_oom", "runtime"), (0.45, 0.25, 0.30))[0]
    if kind == "startup":  # dies within minutes of starting: the host was idle before
        k = rnd.randint(1, 5)
        start = STEPS - k
        for name in METRICS:
            m[name][:start] = m[name][:start] * 0.02
        m["cpu_util"][start:] = nrs.uniform(20, 60)
        m["gpu_util"][start:] = nrs.uniform(0, 30)
        m["gpu_mem_util"][start:] = nrs.uniform(2, 25)
        m["disk_read_mbps"][start:] *= 2
        out += [(start + 0.1 * i, line) for i, line in enumerate(lm.init(start))]
        t = STEPS - 0.5
        error = ll.GPU_OOM if rnd.random() < 0.15 else rnd.choice(ll.STARTUP_ERRORS)
        out += [(t, ll.TRACEBACK[0]), (t, ll.TRACEBACK[1]), (t + 0.01, error)]
        return kind
    if kind == "host_oom":  # RSS ramps linearly over tens of minutes until the kill (pytorch#5902)
        onset = STEPS - rnd.randint(10, 25)
        m["mem_util"][onset:] = np.linspace(m["mem_util"][onset], rnd.uniform(88, 98), STEPS - onset)
    _stop(m, STEPS - 1)
    t = STEPS - 1.0
    error = rnd.choice(ll.HOST_OOM if kind == "host_oom" else ll.RUNTIME_ERRORS)
    out += [(t, ll.TRACEBACK[0]), (t + 0.01, error)]
    return kind


def _performance(rnd, nrs, m, lm, out):
    if rnd.random() < 0.6:  # straggler: one host's iteration time x1.3-2.3, every rank waits for it
        onset = STEPS - rnd.randint(5, 15)
        end = STEPS if rnd.random() < 0.6 else rnd.randint(onset + 2, STEPS)  # transient: may recover
        ratio = rnd.uniform(1.3, 2.3)
        wobble = 1 + 0.08 * nrs.standard_normal(end - onset)
        for name in ("gpu_util", "net_rx_mbps", "net_tx_mbps"):
            m[name][onset:end] = m[name][onset:end] / ratio * wobble
        if rnd.random() < 0.3:
            out.append((onset + 1.0, lm.noise(onset + 1)))
        return "straggler"
    onset = STEPS - rnd.randint(10, 25)  # GPU memory leak, accelerating, ending in OOM (KAIOPS Table VII)
    x = np.linspace(0, 1, STEPS - onset) ** 2
    m["gpu_mem_util"][onset:] = m["gpu_mem_util"][onset] + (99.5 - m["gpu_mem_util"][onset]) * x
    _stop(m, STEPS - 1)
    if rnd.random() < 0.5:
        out.append((STEPS - 4.0, lm.fmt(ll.ALLOC_FLUSH, STEPS - 4)))
    out.append((STEPS - 1.0, ll.GPU_OOM))
    return "gpu_mem_leak"


def _network(rnd, nrs, m, lm, out):
    onset = STEPS - rnd.randint(5, 15)
    level = rnd.uniform(0.2, 0.6)
    fluct = np.clip(level + 0.25 * nrs.standard_normal(STEPS - onset), 0.05, 1.0)
    for name in ("net_rx_mbps", "net_tx_mbps"):
        m[name][onset:] *= fluct
    m["gpu_util"][onset:] *= np.clip(0.5 + 0.5 * fluct, 0, 1)
    warns = rnd.sample(ll.NET_WARN, rnd.randint(1, 3)) if rnd.random() < 0.7 else []
    out += [(onset + 1 + i, lm.fmt(w, onset + 1 + i, rnd.randrange(lm.nranks))) for i, w in enumerate(warns)]
    if rnd.random() < 0.7:  # the collective hangs until the NCCL watchdog fires (10 min default)
        hang = STEPS - rnd.randint(3, min(10, STEPS - onset))
        m["gpu_util"][hang:] = nrs.uniform(0, 2)
        m["net_rx_mbps"][hang:] = m["net_tx_mbps"][hang:] = nrs.uniform(0, 5)
        rank = rnd.randrange(lm.nranks)
        out += [(STEPS - 0.5, lm.fmt(w, STEPS - 1, rank)) for w in ll.WATCHDOG]
        return "hang"
    return "degraded"


def _hardware(rnd, nrs, m, lm, out):
    precursor = rnd.random() < 0.5
    if precursor:  # weak: a little GPU jitter and, sometimes, an SBE / row-remap line
        onset = STEPS - rnd.randint(5, 25)
        m["gpu_util"][onset:] -= np.abs(nrs.normal(0, 3, STEPS - onset))
        if rnd.random() < 0.4:
            out.append((onset + 0.5, rnd.choice(ll.HW_PRECURSOR)))
    at = STEPS - rnd.randint(1, 2)
    _stop(m, at)
    if rnd.random() < 0.2:  # the failed GPU's metrics go missing
        m["gpu_util"][at:] = np.nan
        m["gpu_mem_util"][at:] = np.nan
    if rnd.random() < 0.55:
        out += [(at + 0.01 * i, line) for i, line in enumerate(ll.XID[rnd.choice(list(ll.XID))])]
    elif rnd.random() < 0.5:
        out += [(at + 0.01 * i, lm.fmt(line, at)) for i, line in enumerate(ll.CUDA_UNKNOWN)]
    else:  # only the other ranks' watchdog: the Xid is in dmesg, not in the job's log
        out += [(STEPS - 0.5, lm.fmt(w, STEPS - 1, rnd.randrange(lm.nranks))) for w in ll.WATCHDOG]
    return "precursor" if precursor else "abrupt"


SHAPES = {"Normal": _normal, "Software": _software, "Performance": _performance, "Network": _network,
          "Hardware": _hardware}
CLIP = {"cpu_util": 100, "mem_util": 100, "gpu_util": 100, "gpu_mem_util": 100}


def make_task(seed: int, index: int, c: Cluster | None = None) -> dict:
    """One task as a JSON-ready dict (the on-disk format of agent.kaiops.dataset), plus `kind` (the shape drawn)
    and `drawn_label` (the class simulated, before label noise: what an oracle would answer)."""
    c = c or cluster()
    rnd = random.Random(f"{seed}:{index}")
    nrs = np.random.default_rng([seed, index])
    label = rnd.choices(CLASSES, MIX)[0]
    host_ids = _hosts(rnd, c, label)
    hosts = [c.hosts[i] for i in host_ids]
    m, training = _base(nrs, len(hosts))
    lm = ll.LineMaker(rnd, hosts, rnd.choice(("megatron", "deepspeed")))
    out: list[tuple[float, str]] = []
    if label != "Software":  # a running job logs a few iterations; a crashing one stops logging at the crash
        out += _iterations(lm, rnd, sorted(rnd.sample(range(STEPS - 2), rnd.randint(3, 6))), rnd.uniform(800, 9000))
    if rnd.random() < 0.3:
        out.append((rnd.uniform(0, STEPS - 1), lm.noise(rnd.randrange(STEPS))))
    kind = SHAPES[label](rnd, nrs, m, lm, out)
    if label == "Software" and kind != "startup":
        out += _iterations(lm, rnd, sorted(rnd.sample(range(STEPS - 2), rnd.randint(3, 6))), rnd.uniform(800, 9000))
    metrics = {}
    for name in METRICS:
        series = np.maximum(m[name], 0.0)
        if name in CLIP:
            series = np.minimum(series, CLIP[name])
        metrics[name] = [None if math.isnan(v) else round(float(v), 2) for v in series]
    for name in ("disk_read_mbps", "disk_write_mbps", "gpu_mem_util"):  # collectors that were not deployed
        if rnd.random() < 0.04:
            del metrics[name]
    drawn = label
    if label != "Normal" and rnd.random() < LABEL_NOISE:
        label = rnd.choice(CONFUSABLE[label])
    logs = [line for _, line in sorted(out, key=lambda p: p[0])]
    return {"id": f"s{seed}-{index:06d}", "hosts": hosts, "metrics": metrics, "logs": logs, "label": label,
            "kind": kind, "training": training, "drawn_label": drawn}


def generate(seed: int, n: int) -> list[dict]:
    c = cluster()
    return [make_task(seed, i, c) for i in range(n)]
