"""L4 benchmark (`make bench-l4`): throughput vs plain masked Drain3, template grouping accuracy on Loghub, node
localization and failure-indicating-event F1 on simulated faulty jobs, and robustness to broken files.

Prints the tables and writes them to eval/results/l4.md. Loghub samples are research-only: they are read from
--loghub (default ../shared/fixtures/real/loghub when present), never copied.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import random
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
    args = ap.parse_args()
    sections = []
    with tempfile.TemporaryDirectory(prefix="bench-l4-") as tmp:
        for title, fn in (("Throughput", lambda: throughput(Path(tmp), args.ranks, args.lines, args.drain_lines)),
                          ("Template quality (Loghub, grouping accuracy)", lambda: loghub(args.loghub)),
                          ("Simulated faulty jobs", lambda: simulated(Path(tmp), args.jobs, args.seed)),
                          ("Broken files", lambda: robustness(Path(tmp)))):
            began = time.perf_counter()
            body = fn()
            text = f"## {title}\n\n" + "\n".join(body) + f"\n\n({time.perf_counter() - began:.0f} s)\n"
            print(text, flush=True)
            sections.append(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("# L4 log localizer benchmark (`make bench-l4`)\n\n" + "\n".join(sections), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
