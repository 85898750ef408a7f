"""The fault lab (`make lab`): real multi-node training jobs on this machine, one real fault each.

    python -m eval.lab.run --out eval/lab/jobs --seed 1 --jobs 60 [--kinds exception,sigkill] [--launcher torchrun]

Per job, under OUT/<seed>-<k>/: logs/<host>.log (each node's launcher stdout+stderr), combined.out (every node's
lines as they arrived, behind `host: `), truth.json (faulty node, fault, stage, time, what the lab did, knobs),
pasted.txt (what a customer pastes: the first failing node's last lines and the launcher's failure summary), and
spec.json. A job is drawn from (seed, k) alone, so a seed range reproduces its jobs; each job is bounded by its
deadline plus a hard timeout on the namespace it runs in, and its cgroups and data are removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from eval.lab import telemetry

ROOT = Path(__file__).resolve().parent.parent.parent
KINDS = ("exception", "exit", "sigkill", "hang", "nan", "oom_rlimit", "oom_cgroup", "missing_shard", "disk_full",
         "ifname", "port_taken", "partition", "straggler", "code_skew")
LAUNCHERS = ("torchrun", "accelerate", "deepspeed")
STAGE = {"ifname": "init", "port_taken": "init", "code_skew": "init", "disk_full": "checkpointing"}  # else training
HOST_STYLES = ("gpu-node-{:02d}", "worker{}", "dgx-a{:02d}", "trn{:03d}", "compute-{}")
MEMCG = Path("/sys/fs/cgroup/memory")
CPUCG = Path("/sys/fs/cgroup/cpu")
HARD_MARGIN_S = 40


def draw(seed: int, k: int, kinds: tuple[str, ...], launcher: str) -> dict:
    """A job's spec from (seed, k): nodes, ranks, log style, the fault and where and when it strikes."""
    rng = random.Random(seed * 100_003 + k)
    kind = kinds[k % len(kinds)] if len(kinds) > 1 else kinds[0]
    n_nodes = rng.choice((2, 2, 3, 3, 4, 4, 5, 6, 8))
    nproc = 2 if n_nodes <= 3 else 1  # at most 8 ranks: every rank imports torch, and the machine has 2 cores
    style = rng.choice(HOST_STYLES)
    first = rng.randint(1, 20)
    net = rng.randint(1, 250)
    nodes = [{"host": style.format(first + i), "addr": f"127.0.{net}.{10 + i}"} for i in range(n_nodes)]
    steps = rng.choice((24, 30, 36))  # short jobs: ~15 s each, so a run of 150 jobs fits an hour on 2 cores
    config = {"steps": steps, "every_rank": rng.random() < 0.4, "style": rng.choice(("print", "logging")),
              "timeout": rng.choice((10, 12, 15)), "log_every": rng.choice((1, 1, 2)),
              "ckpt_every": rng.choice((10, 15, 10**9)), "pause": rng.choice((0.05, 0.1, 0.15))}
    node = 0 if kind == "port_taken" else rng.randrange(n_nodes)
    fault: dict = {"kind": kind, "node": node, "rank": rng.randrange(nproc),
                   "step": rng.randint(5, steps - 6), "after_steps": rng.randint(5, steps // 3)}
    if kind == "missing_shard":
        fault["step"] = rng.choice([s for s in (11, 21, 31) if s < steps])
    if kind == "disk_full":
        config["ckpt_every"] = rng.choice((5, 10, 15))
        fault["rank"] = 0  # node-local rank 0 writes the node's checkpoint
        fault["step"] = config["ckpt_every"]
    if kind == "exit":
        fault["code"] = rng.choice((1, 3, 7))
    if kind == "code_skew":
        fault["rank"] = None  # every rank of the node runs the node's older checkout
    if kind == "straggler":
        fault["quota_us"] = rng.choice((1000, 2000))  # 0.1-0.2 % of a CPU: its steps outlast the gloo timeout
    if kind == "ifname":
        fault["ifname"] = rng.choice(("eth0", "ib0", "ens5f0"))
    args = ["--tee=3"] if launcher == "torchrun" and rng.random() < 0.5 else []
    return {"seed": seed, "k": k, "launcher": launcher, "nodes": nodes, "nproc": nproc, "config": config,
            "fault": fault, "launcher_args": args, "deadline_s": 100 + 5 * n_nodes, "stagger": rng.random() * 0.5}


TELEMETRY_KINDS = (*telemetry.KINDS, "none")


def draw_telemetry(seed: int, k: int, kinds: tuple[str, ...] = TELEMETRY_KINDS) -> dict:
    """A telemetry job (issue 36) from (seed, k): three single-rank torchrun nodes training for about 50 s,
    sampled for the whole job, with one anomaly of kinds[k % len(kinds)] on one node for 12-18 s once the job has
    logged 80-110 steps (or none). Logs are the training's own; the anomaly is outside the training program."""
    rng = random.Random(seed * 100_003 + k + 7)
    kind = kinds[k % len(kinds)]
    style = rng.choice(HOST_STYLES)
    first, net = rng.randint(1, 20), rng.randint(1, 250)
    nodes = [{"host": style.format(first + i), "addr": f"127.0.{net}.{10 + i}"} for i in range(3)]
    config = {"steps": 250, "every_rank": False, "style": rng.choice(("print", "logging")), "timeout": 60,
              "log_every": 1, "ckpt_every": 10**9, "pause": 0.1, "work": 30, "read_mb": 64}
    fault = {"kind": kind, "node": rng.randrange(3), "rank": None, "after_steps": rng.randint(80, 110),
             "duration_s": round(rng.uniform(12, 18), 1)}
    return {"seed": seed, "k": k, "launcher": "torchrun", "nodes": nodes, "nproc": 1, "config": config,
            "fault": fault, "launcher_args": [], "deadline_s": 150, "stagger": rng.random() * 0.5,
            "telemetry": True, "cgroups": [f"aidai-lab-{seed}-{k}-n{i}" for i in range(3)]}


def run_job(spec: dict, out: Path) -> dict:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    spec["config"]["data"] = str(out / "data")
    spec["config"]["ckpt"] = str(out / "ckpt")
    memcg = MEMCG / f"aidai-lab-{spec['seed']}-{spec['k']}"
    cpucg = CPUCG / memcg.name
    if spec["fault"]["kind"] == "oom_cgroup":
        memcg.mkdir(exist_ok=True)
        spec["memcg"] = str(memcg)
    if spec["fault"]["kind"] == "straggler":
        cpucg.mkdir(exist_ok=True)
        spec["cpucg"] = str(cpucg)
    (out / "spec.json").write_text(json.dumps(spec, indent=1))
    argv = ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc",
            sys.executable, "-m", "eval.lab.job", str(out / "spec.json")]
    began = time.time()
    try:
        # --kill-child: the namespace's PID 1 dies with unshare, and the kernel then kills every process in it
        proc = subprocess.run(argv, cwd=ROOT, timeout=spec["deadline_s"] + HARD_MARGIN_S, capture_output=True)
        harness = proc.stderr.decode(errors="replace")[-2000:]
    except subprocess.TimeoutExpired:
        harness = "hard timeout: the job's namespace was killed"
    finally:
        shutil.rmtree(out / "data", ignore_errors=True)
        shutil.rmtree(out / "ckpt", ignore_errors=True)
        for group in (memcg, cpucg):
            telemetry.remove_cgroup(group)
        for tag in spec.get("cgroups", []):
            telemetry.remove_groups(tag)
    outcome = json.loads((out / "outcome.json").read_text()) if (out / "outcome.json").exists() else {}
    truth = _truth(spec, out, outcome, began, harness)
    (out / "truth.json").write_text(json.dumps(truth, indent=1))
    (out / "pasted.txt").write_text(pasted_text(out, faulty=truth["faulty_node"]))
    return truth


def _truth(spec: dict, out: Path, outcome: dict, began: float, harness: str) -> dict:
    fault = spec["fault"]
    marks = []
    if (out / "marks.jsonl").exists():
        marks = [json.loads(ln) for ln in (out / "marks.jsonl").read_text().splitlines() if ln.strip()]
    applied = [e for e in outcome.get("events", []) if not e["what"].startswith("job deadline")]
    when = [m["time"] for m in marks] + [e["time"] for e in applied]
    node = spec["nodes"][fault["node"]]
    extra: dict = {}
    if spec.get("telemetry"):
        start = next((e["time"] for e in applied if e["what"].startswith("anomaly start")), None)
        end = next((e["time"] for e in applied if e["what"] == "anomaly end"), None)
        extra = {"telemetry": "telemetry.csv", "first_step": outcome.get("first_step"),
                 "last_step": outcome.get("last_step"), "collector": outcome.get("collector", {}),
                 "anomaly": None if fault["kind"] == "none" else
                 {"kind": fault["kind"], "host": node["host"], "start": start, "end": end,
                  "subsystem": telemetry.SUBSYSTEM[fault["kind"]]}}
    return {**extra,"faulty_node": node["host"], "faulty_addr": node["addr"], "fault": fault["kind"],
            "stage": STAGE.get(fault["kind"], "training"), "launcher": spec["launcher"],
            "fault_time": min(when) if when else None, "fired": bool(marks) or bool(applied),
            "marks": marks, "lab_actions": outcome.get("events", []), "exit": outcome.get("exit", {}),
            "timed_out": outcome.get("timed_out", []), "started": outcome.get("started", began),
            "ended": outcome.get("ended", time.time()), "nodes": spec["nodes"], "nproc": spec["nproc"],
            "knobs": {**spec["config"], "launcher_args": spec["launcher_args"], "fault": fault},
            "harness_stderr": harness if not outcome else ""}


_FAILURE = re.compile(r"Traceback|Error|error|failed|FAILED|Killed|Signal|exitcode", re.M)
# the launcher's failure summary: torchrun's (and Accelerate's, which runs torchrun) ChildFailedError block, the
# DeepSpeed launcher's `exits with return code` line
_SUMMARY = re.compile(r"^(?:\S+: )?(?:torch\.distributed\.elastic\.multiprocessing\.errors\.)?ChildFailedError|"
                      r"exits with return code", re.M)


def pasted_text(out: Path, tail: int = 30, faulty: str | None = None) -> str:
    """What a customer pastes: the last lines of the first failing rank's node and the launcher's failure summary
    (the ChildFailedError block or DeepSpeed's return-code line). The first failing rank is the faulty node when its
    own output shows an error (the traceback of the rank that raised); when it shows none (killed, hung, throttled)
    the customer sees the first node whose output does, in the order the lines arrived."""
    combined = (out / "combined.out").read_text(errors="replace").splitlines() if (out / "combined.out").exists() \
        else []
    failing = [ln.split(": ", 1)[0] for ln in combined if ": " in ln and _FAILURE.search(ln.split(": ", 1)[1])]
    first = faulty if faulty in failing else next(iter(failing), None)
    if first is None:
        return "\n".join(ln.split(": ", 1)[-1] for ln in combined[-tail:]) + "\n"
    mine = [ln.split(": ", 1)[1] for ln in combined if ln.startswith(first + ": ")]
    text = mine[-tail:]
    summary_at = next((i for i, ln in enumerate(combined) if _SUMMARY.search(ln)), None)
    if summary_at is not None and not any(_SUMMARY.search(ln) for ln in text):
        host = combined[summary_at].split(": ", 1)[0]
        block = [ln.split(": ", 1)[1] for ln in combined[summary_at:] if ln.startswith(host + ": ")][:25]
        text += ["", *block]
    return "\n".join(text) + "\n"


def launcher_of(k: int, kinds: tuple[str, ...], launchers: tuple[str, ...]) -> str:
    """Job k's launcher: each block of len(kinds) jobs runs one launcher, so a seed's first len(kinds) x
    len(launchers) jobs hold every fault under every launcher."""
    return launchers[(k // len(kinds)) % len(launchers)]


WARM = ("from deepspeed.accelerator import get_accelerator; "
        "get_accelerator().create_op_builder('ShareMemCommBuilder').load()")


def warm(launchers: tuple[str, ...]) -> None:
    """DeepSpeed's CPU backend compiles its shared-memory op on first use (about 2 minutes, cached under
    ~/.cache/torch_extensions): done once here, or every rank of the first job would wait on the compile."""
    if "deepspeed" in launchers:
        subprocess.run([sys.executable, "-c", WARM], check=True, timeout=900, capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT.parent / "lab-jobs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=len(KINDS))
    ap.add_argument("--first", type=int, default=0, help="first job index k")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--launchers", default=",".join(LAUNCHERS), help="comma list (see launcher_of)")
    ap.add_argument("--parallel", type=int, default=1, help="jobs at once (each in its own namespaces)")
    ap.add_argument("--telemetry", action="store_true",
                    help="telemetry jobs (issue 36): --kinds among " + ",".join(TELEMETRY_KINDS))
    args = ap.parse_args()
    if args.telemetry and args.kinds == ",".join(KINDS):
        args.kinds = ",".join(TELEMETRY_KINDS)
    kinds, launchers = tuple(args.kinds.split(",")), tuple(args.launchers.split(","))
    if not args.telemetry:
        warm(launchers)
    out = args.out.resolve()  # the nodes run in the job's directory: every path they get must be absolute
    assert set(launchers) <= set(LAUNCHERS), launchers

    def one(k: int) -> str:
        spec = draw_telemetry(args.seed, k, kinds) if args.telemetry else \
            draw(args.seed, k, kinds, launcher_of(k, kinds, launchers))
        began = time.time()
        truth = run_job(spec, out / f"{args.seed}-{k:03d}")
        return (f"{args.seed}-{k:03d} {spec['launcher']:<10} {truth['fault']:<14} {len(spec['nodes'])}x{spec['nproc']} "
                f"faulty {truth['faulty_node']:<14} fired {truth['fired']!s:<5} timed_out {len(truth['timed_out'])} "
                f"{time.time() - began:.0f}s")

    with ThreadPoolExecutor(max_workers=max(args.parallel, 1)) as pool:
        for line in pool.map(one, range(args.first, args.first + args.jobs)):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
