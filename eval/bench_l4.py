"""L4 benchmark (`make bench-l4`): throughput vs plain masked Drain3, template grouping accuracy on Loghub, node
localization and failure-indicating-event F1 on simulated faulty jobs, and robustness to broken files.

Prints the tables and writes them to eval/results/l4.md. Loghub samples are research-only: they are read from
--loghub (default ../shared/fixtures/real/loghub when present), never copied.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from drain3 import TemplateMiner as Drain3Miner
from drain3.masking import MaskingInstruction
from drain3.template_miner_config import TemplateMinerConfig

from agent.l4.localize import localize
from agent.l4.reader import discover, read_bytes
from agent.l4.simulate import FAULTS, JobSpec, simulate_job
from agent.l4.simulate_ds import DS_FAULTS, WHEN, DsSpec, simulate_ds_job
from agent.l4.templates import TemplateMiner, canonical, fold_digits
from eval.l4.baselines import error_baselines

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LOGHUB = ROOT.parent / "shared" / "fixtures" / "real" / "loghub"
OUT = ROOT / "eval" / "results" / "l4.md"


def plain_drain3() -> Drain3Miner:
    """Drain3 as research/logs.md measured it: sim_th 0.4, depth 4, drain3.ini example masks (IP/HEX/NUM)."""
    cfg = TemplateMinerConfig()
    cfg.masking_instructions = [
        MaskingInstruction(r"((?<=[^A-Za-z0-9])|^)(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})((?=[^A-Za-z0-9])|$)", "IP"),
        MaskingInstruction(r"((?<=[^A-Za-z0-9])|^)(0x[a-f0-9A-F]+)((?=[^A-Za-z0-9])|$)", "HEX"),
        MaskingInstruction(r"((?<=[^A-Za-z0-9])|^)([\-\+]?\d+)((?=[^A-Za-z0-9])|$)", "NUM")]
    return Drain3Miner(config=cfg)


def throughput(tmp: Path, ranks: int, target_lines: int, drain_lines: int) -> list[str]:
    iterations = max(10, (target_lines // ranks - 20) // 2)
    job = tmp / "big"
    truth = simulate_job(job, JobSpec(ranks=ranks, framework="deepspeed", iterations=iterations, fault="link_flap",
                                      seed=7, checkpoint_every=500))
    lines: list[str] = []
    for f in discover(job):
        lines.extend(read_bytes(f.path).decode().splitlines())
        if len(lines) >= drain_lines:
            break
    sample = lines[:drain_lines]
    miner = plain_drain3()
    began = time.perf_counter()
    for line in sample:
        miner.add_log_message(line)
    drain_rate = len(sample) / (time.perf_counter() - began)
    rows = [f"| plain masked Drain3 (add_log_message per line), first {len(sample):,} lines | {len(sample):,} | "
            f"{len(sample) / drain_rate:.2f} | {drain_rate:,.0f} | 1.0x |"]
    for engine in ("local", "dask"):
        result = localize(job, engine=engine)
        rate = result.lines / result.seconds
        rows.append(f"| L4 localize, whole pipeline, engine={engine} | {result.lines:,} | {result.seconds:.2f} | "
                    f"{rate:,.0f} | {rate / drain_rate:.1f}x |")
    top = result.nodes[0].node if result.nodes else "-"
    return [f"Job: {ranks} ranks, {truth.lines:,} lines ({sum(1 for _ in discover(job))} files); faulty node "
            f"{truth.faulty_nodes[0]}, L4 top-1 {top}.", "",
            "| what | lines | seconds | lines/s | vs Drain3 |", "|---|---|---|---|---|", *rows]


def grouping_accuracy(contents: list[str], truth: list[str], ours: bool) -> tuple[float, int]:
    if ours:
        miner = TemplateMiner()
        shapes = [canonical(fold_digits(c.encode()).decode()) for c in contents]
        miner.add(shapes)
        assign = miner.assignment()
        pred = [assign[s] for s in shapes]
    else:
        d3 = plain_drain3()
        for c in contents:
            d3.add_log_message(c)
        pred = [d3.match(c, "fallback").cluster_id for c in contents]
    groups_pred: dict[object, set[int]] = defaultdict(set)
    groups_true: dict[str, set[int]] = defaultdict(set)
    for i, (p, t) in enumerate(zip(pred, truth, strict=True)):
        groups_pred[p].add(i)
        groups_true[t].add(i)
    correct = sum(len(g) for g in groups_pred.values() if g == groups_true[truth[next(iter(g))]])
    return correct / len(contents), len(groups_pred)


def loghub(root: Path) -> list[str]:
    rows = ["| dataset | lines | true events | Drain3 (masked) GA | clusters | L4 templates GA | templates |",
            "|---|---|---|---|---|---|---|"]
    for name in ("HPC", "BGL"):
        found = sorted((root / name).glob("*_structured.csv"))
        if not found:
            rows.append(f"| {name} | not found under {root} | | | | | |")
            continue
        with open(found[0], encoding="utf-8", errors="replace") as fh:
            data = list(csv.DictReader(fh))
        contents, truth = [r["Content"] for r in data], [r["EventId"] for r in data]
        ga_d, n_d = grouping_accuracy(contents, truth, ours=False)
        ga_o, n_o = grouping_accuracy(contents, truth, ours=True)
        rows.append(f"| {name} ({found[0].name}) | {len(data)} | {len(set(truth))} | {ga_d:.3f} | {n_d} | "
                    f"{ga_o:.3f} | {n_o} |")
    return rows


def _setup(rnd: random.Random) -> tuple[str, str]:
    return rnd.choice(["megatron", "deepspeed"]), rnd.choice(["per_rank", "per_node"])


def simulated(tmp: Path, jobs: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    pools: dict[tuple[str, str], list[Path]] = {}
    for fw in ("megatron", "deepspeed"):
        for layout in ("per_rank", "per_node"):
            pools[(fw, layout)] = []
            for k in range(2):  # successful runs of the same setup at a smaller scale (L4 §4.2)
                d = tmp / f"ok-{fw}-{layout}-{k}"
                simulate_job(d, JobSpec(ranks=rnd.choice([8, 16, 32]), framework=fw, layout=layout,
                                        iterations=rnd.randint(20, 40), seed=10_000 + len(pools) * 10 + k))
                pools[(fw, layout)].append(d)
    hits: dict[str, list[int]] = defaultdict(list)  # method -> rank of the faulty node (0 = top-1), 99 = missing
    f1: dict[str, list[tuple[int, int, int]]] = defaultdict(list)  # method -> (tp, fp, fn)
    stage_ok, flap_ok, flap_n, by_fault, lines, secs = 0, 0, 0, Counter(), 0, 0.0
    per_fault_top1: dict[str, list[int]] = defaultdict(list)
    stage_by: dict[str, Counter] = defaultdict(Counter)  # scenario -> predicted stage counts
    for j in range(jobs):
        fault = FAULTS[j % len(FAULTS)]
        fw, layout = _setup(rnd)
        ranks = rnd.choices([8, 16, 32, 64, 128, 256, 512, 1024], weights=[2, 3, 3, 3, 2, 2, 1, 1])[0]
        d = tmp / f"job{j}"
        truth = simulate_job(d, JobSpec(ranks=ranks, framework=fw, layout=layout, fault=fault, seed=j,
                                        iterations=rnd.randint(20, 60) if ranks <= 256 else 15, gzip_fraction=0.2))
        result = localize(d, pools[(fw, layout)], engine="local")
        lines += result.lines
        secs += result.seconds
        by_fault[fault] += 1
        stage_ok += result.stage == truth.stage
        stage_by[f"{fault} ({fw}, truth {truth.stage})"][result.stage] += 1
        gt = {result.template_of(e) or f"missing:{e}" for e in truth.events}
        pred = {e.id for e in result.events}
        f1["L4"].append((len(gt & pred), len(pred - gt), len(gt - pred)))
        by_time, by_count, errors = error_baselines(str(d))
        err_pred = {result.template_of(e) for e in errors} - {None}
        f1["error-level lines"].append((len(gt & err_pred), len(err_pred - gt), len(gt - err_pred)))
        if fault == "link_flap":
            flap_n += 1
            flap_ok += any(it.iteration in truth.iterations for it in result.iterations)
        if truth.faulty_nodes:
            node = truth.faulty_nodes[0]
            for method, ranking in (("L4", [n.node for n in result.nodes]), ("Error_time", by_time),
                                    ("Error_count", by_count)):
                hits[method].append(ranking.index(node) if node in ranking else 99)
            per_fault_top1[fault].append(hits["L4"][-1] == 0)
    out = [f"{jobs} faulty jobs ({', '.join(f'{k}: {v}' for k, v in sorted(by_fault.items()))}), 8-1024 ranks, "
           f"Megatron/DeepSpeed, per-rank and per-node (torchrun-prefixed) files, 20% gzipped; each localized with 2 "
           f"successful jobs of the same setup. {lines:,} lines, {secs:.1f} s of localize.", "",
           "| method | top-1 | top-3 | top-5 | jobs with a faulty node |", "|---|---|---|---|---|"]
    for method in ("L4", "Error_time", "Error_count"):
        r = hits[method]
        out.append(f"| {method} | {sum(x < 1 for x in r) / len(r):.3f} | {sum(x < 3 for x in r) / len(r):.3f} | "
                   f"{sum(x < 5 for x in r) / len(r):.3f} | {len(r)} |")
    out += ["", "L4 top-1 by fault: " + ", ".join(f"{k} {sum(v) / len(v):.3f} ({len(v)})"
                                                   for k, v in sorted(per_fault_top1.items())), "",
            "| failure-indicating events | precision | recall | F1 |", "|---|---|---|---|"]
    for method, rows in f1.items():
        tp, fp, fn = (sum(x[i] for x in rows) for i in range(3))
        p, r = tp / max(tp + fp, 1), tp / max(tp + fn, 1)
        out.append(f"| {method} (micro over jobs) | {p:.3f} | {r:.3f} | {2 * p * r / max(p + r, 1e-9):.3f} |")
    out += ["", f"Failed stage correct: {stage_ok}/{jobs}. Link-flap iteration found: {flap_ok}/{flap_n}.", "",
            "| scenario | failed stage correct | predicted stages |", "|---|---|---|"]
    for scenario, predicted in sorted(stage_by.items()):
        truth_stage = scenario.rsplit("truth ", 1)[1].rstrip(")")
        out.append(f"| {scenario} | {predicted[truth_stage]}/{sum(predicted.values())} | "
                   f"{', '.join(f'{k} {v}' for k, v in predicted.most_common())} |")
    return out


def second_generator(tmp: Path, jobs: int, seed: int) -> list[str]:
    """L4 on agent/l4/simulate_ds.py's jobs (DeepSpeed launcher + Lightning, written apart from simulate.py), with
    no successful job to compare with, as with real incident logs; each job also as the one combined launcher
    output a user's terminal shows."""
    rnd = random.Random(seed)
    hits: list[int] = []
    stage_ok = 0
    one_file: list[tuple[int, bool]] = []
    by: dict[str, list[tuple[int, bool]]] = defaultdict(list)
    lines = 0
    for j in range(jobs):
        fault, when = DS_FAULTS[j % len(DS_FAULTS)], WHEN[(j // len(DS_FAULTS)) % len(WHEN)]
        spec = DsSpec(nodes=rnd.choice([8, 16, 24, 32, 48, 64]), fault=fault, when=when,
                      steps=rnd.randint(500, 5000), seed=seed * 1000 + j)
        for combined in (False, True):
            d = tmp / f"ds{j}{'-one' if combined else ''}"
            spec.combined = combined
            truth = simulate_ds_job(d, spec)
            result = localize(d, engine="local")
            ranking = [n.node for n in result.nodes]
            pos = ranking.index(truth.faulty_node) if truth.faulty_node in ranking else 99
            if combined:
                one_file.append((pos, result.stage == truth.stage))
                continue
            lines += result.lines
            hits.append(pos)
            stage_ok += result.stage == truth.stage
            by[f"{fault} at {when}"].append((pos, result.stage == truth.stage))
    out = [f"{jobs} faulty jobs, 8-64 nodes x 8 GPUs, one file per node (pdsh-prefixed), 500-5000 steps, no successful "
           f"job given; {lines:,} lines. The last row gives the same jobs as one combined `deepspeed.out` (all "
           "nodes' lines in time order, the runner's own unprefixed), which L4 splits by the pdsh prefixes.", "",
           "| jobs | faulty node top-1 | top-5 | failed stage right |", "|---|---|---|---|",
           f"| all ({jobs}) | {sum(h < 1 for h in hits) / jobs:.3f} | {sum(h < 5 for h in hits) / jobs:.3f} | "
           f"{stage_ok / jobs:.3f} |"]
    for key, rows in sorted(by.items()):
        out.append(f"| {key} ({len(rows)}) | {sum(p < 1 for p, _ in rows) / len(rows):.3f} | "
                   f"{sum(p < 5 for p, _ in rows) / len(rows):.3f} | {sum(s for _, s in rows) / len(rows):.3f} |")
    out.append(f"| all ({jobs}), one combined file | {sum(p < 1 for p, _ in one_file) / jobs:.3f} | "
               f"{sum(p < 5 for p, _ in one_file) / jobs:.3f} | {sum(s for _, s in one_file) / jobs:.3f} |")
    return out


REAL_SOURCES = [  # public multi-node logs; none carries a licence that allows committing them (SOURCES.md)
    "https://github.com/elideng-sg/hypercomputer-internode-deepdive (assets/lab-13, assets/lab-15: two fault-injected "
    "24-GPU jobs, two ranks' logs each; read them in place with --real DIR)",
    "https://github.com/pytorch/pytorch/issues/118369",
    "https://github.com/Lightning-AI/pytorch-lightning/issues/20434",
    "https://github.com/huggingface/transformers/issues/26724",
]


def real_logs(root: Path) -> list[str]:
    """Real per-node log sets: tests/fixtures/l4_real/<job>/ (committable ones) and --real <dir>/<job>/ (read in
    place), each job with a truth.json {"faulty_node": ..., "stage": ...}."""
    jobs = [p.parent for base in (ROOT / "tests" / "fixtures" / "l4_real", root) if base.is_dir()
            for p in sorted(base.glob("*/truth.json"))]
    if not jobs:
        return [f"No real log sets found (tests/fixtures/l4_real/, {root}); skipped. Public multi-node logs without a "
                "licence to copy them: " + ", ".join(REAL_SOURCES) + "."]
    rows = ["| job | nodes | faulty node rank | stage (truth) | top node |", "|---|---|---|---|---|"]
    top1 = top5 = stage = 0
    for d in jobs:
        truth = json.loads((d / "truth.json").read_text(encoding="utf-8"))
        result = localize(d, engine="local")
        ranking = [n.node for n in result.nodes]
        pos = ranking.index(truth["faulty_node"]) if truth["faulty_node"] in ranking else 99
        top1, top5, stage = top1 + (pos == 0), top5 + (pos < 5), stage + (result.stage == truth["stage"])
        rows.append(f"| {d.name} | {len(ranking)} | {pos + 1} | {result.stage} ({truth['stage']}) | "
                    f"{ranking[0] if ranking else '-'} |")
    n = len(jobs)
    return [f"{n} real jobs (read from {', '.join(sorted({str(d.parent) for d in jobs}))}): top-1 {top1 / n:.3f}, "
            f"top-5 {top5 / n:.3f}, stage {stage / n:.3f}.", "", *rows]


MEMORY_CHILD = """
import json, resource, sys
from agent.l4.localize import localize
r = localize(sys.argv[1], engine="local")
print(json.dumps({"stage": r.stage, "events": [e.template for e in r.events], "top": r.nodes[0].node if r.nodes else "",
                  "lines": r.lines, "seconds": r.seconds,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _long_log(path: Path, megabytes: int, seed: int, hosts: int = 0) -> int:
    """A healthy run of `step N loss X` lines and a crash at the end (what broke the old scanner); with `hosts`, one
    combined launcher output in which every host prints the run and host 3 crashes."""
    rnd = random.Random(seed)
    lines = 0
    names = [f"gpu{k:02d}: " for k in range(hosts)] or [""]
    with open(path, "w", encoding="utf-8") as fh:
        for name in names:
            fh.write(f"{name}NCCL version 2.21.5+cuda12.4\n{name}> initializing torch distributed ...\n"
                     f"{name}training ...\n")
        step = 0
        while fh.tell() < megabytes * 2**20:
            step += 1
            for name in names:
                fh.write(f"{name}step {step} loss {rnd.uniform(1.5, 3):.4f} lr {3e-4 * rnd.random():.3e} "
                         f"tokens/s {rnd.randint(90000, 110000)}\n")
                lines += 1
        crash = names[3 % len(names)]
        fh.write(f"{crash}[rank3]:[E1102 10:00:00.000000000 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught "
                 f"collective operation timeout: WorkNCCL(SeqNum={step * 4}, OpType=ALLREDUCE) ran for 600042 "
                 f"milliseconds before timing out.\n{crash}RuntimeError: CUDA error: an illegal memory access was "
                 "encountered\n")
    return lines + 3 * len(names) + 2


def memory(tmp: Path, big: bool) -> list[str]:
    rows = ["| input | lines | progress lines among failure events | stage | top node | max RSS (MB) | seconds |",
            "|---|---|---|---|---|---|---|"]
    cases = [("one 50 MB log", 50, 1, 0), ("one 50 MB combined output of 8 hosts (split per host)", 50, 1, 8)]
    cases += [("1 GB log set (16 x 64 MB)", 64, 16, 0)] if big else []
    for name, mb, files, hosts in cases:
        d = tmp / f"mem-{mb}-{files}-{hosts}"
        d.mkdir()
        lines = sum(_long_log(d / f"node{k:02d}.log", mb, k, hosts) for k in range(files))
        target = d / "node00.log" if files == 1 else d
        out = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(target)], capture_output=True, text=True,
                             cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True)
        got = json.loads(out.stdout.strip().splitlines()[-1])
        progress = sum("loss" in e for e in got["events"])
        rows.append(f"| {name} | {lines:,} | {progress} | {got['stage']} | {got['top']} | {got['rss_mb']:.0f} | "
                    f"{got['seconds']:.1f} |")
        for f in d.iterdir():
            f.unlink()
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return [f"Each localized in a child process; RSS is the child's ru_maxrss (this process: {own:.0f} MB).", "",
            *rows]


def robustness(tmp: Path) -> list[str]:
    d = tmp / "broken"
    simulate_job(d, JobSpec(ranks=16, fault="gpu", seed=3))
    (d / "empty.log").write_bytes(b"")
    rnd = random.Random(1)
    (d / "core.log").write_bytes(bytes(rnd.randrange(256) for _ in range(20000)))
    (d / "garbage.log").write_bytes(bytes(rnd.randrange(1, 32) for _ in range(5000)))
    text = "".join(f"[{i}] iteration {i}/ 10000 | loss {rnd.random()}\n" for i in range(5000)).encode()
    (d / "cut.log.gz").write_bytes(gzip.compress(text)[:20000])
    result = localize(d, engine="local")
    rows = [f"| {Path(s.path).name} | {s.reason} |" for s in result.skipped_files]
    return [f"Job with 4 broken files added: {result.files} files used, {len(result.skipped_files)} skipped, "
            f"top node {result.nodes[0].node if result.nodes else '-'}.", "", "| file | reason |", "|---|---|", *rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--loghub", type=Path, default=DEFAULT_LOGHUB)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--drain-lines", type=int, default=200_000, help="lines fed to plain Drain3 (it runs ~30k/s)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--ds-jobs", type=int, default=120, help="jobs of the second generator (simulate_ds)")
    ap.add_argument("--real", type=Path, default=ROOT.parent / "l4_real", help="real per-node log sets, read in place")
    ap.add_argument("--big", action="store_true", help="also the 1 GB log set memory check (takes minutes)")
    ap.add_argument("--sections", default="all", help="comma-separated: throughput,loghub,sim,ds,real,memory,broken")
    args = ap.parse_args()
    wanted = set(args.sections.split(",")) if args.sections != "all" else None
    sections = []
    with tempfile.TemporaryDirectory(prefix="bench-l4-") as tmp:
        for key, title, fn in (
                ("throughput", "Throughput", lambda: throughput(Path(tmp), args.ranks, args.lines, args.drain_lines)),
                ("loghub", "Template quality (Loghub, grouping accuracy)", lambda: loghub(args.loghub)),
                ("sim", "Simulated faulty jobs", lambda: simulated(Path(tmp), args.jobs, args.seed)),
                ("ds", "Second generator (simulate_ds: DeepSpeed launcher + Lightning)",
                 lambda: second_generator(Path(tmp), args.ds_jobs, args.seed)),
                ("real", "Real multi-node logs", lambda: real_logs(args.real)),
                ("memory", "Memory (streamed input)", lambda: memory(Path(tmp), args.big)),
                ("broken", "Broken files", lambda: robustness(Path(tmp)))):
            if wanted is not None and key not in wanted:
                continue
            began = time.perf_counter()
            body = fn()
            text = f"## {title}\n\n" + "\n".join(body) + f"\n\n({time.perf_counter() - began:.0f} s)\n"
            print(text, flush=True)
            sections.append((title, text))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(_merged(args.out, sections), encoding="utf-8")
    print(f"wrote {args.out}")


def _merged(out: Path, fresh: list[tuple[str, str]]) -> str:
    """The results file with the sections just run replaced and the others kept, so that rerunning one section
    does not drop the rest."""
    kept: dict[str, str] = {}
    if out.exists():
        for part in out.read_text(encoding="utf-8").split("\n## ")[1:]:
            kept[part.split("\n", 1)[0]] = "## " + part.rstrip("\n") + "\n"
    kept.update(dict(fresh))
    return "# L4 log localizer benchmark (`make bench-l4`)\n\n" + "\n".join(kept.values())


if __name__ == "__main__":
    main()
