"""KAIOPS on the fault lab's real jobs (issue 36): each lab job as a KAIOPS task — its log lines (what the nodes
printed, in arrival order), its per-node metrics (the lab's telemetry, when the job has it) and its placement (the
node names) — labelled with the KAIOPS class of the fault the lab injected. KAIOPS (trained here from scratch), the
Decision Tree and the Random Forest on the same split (training seeds vs held-back seeds), each over several
training seeds, and two ablations: without the temporal-context encoding (log lines without their minute) and
without the dynamic class-weighted loss (plain label-smoothed cross-entropy). Writes eval/results/kaiops-lab.md.

    .venv/bin/python -m eval.bench_kaiops_lab --lab ../lab-v2 --lab ../lab-t36/dev --lab ../lab-t36/held \\
        --train 9,201,361 --test 202,203,362
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path

import torch

from agent.kaiops import CLASSES, STEPS
from agent.kaiops.baselines import fit_predict
from agent.kaiops.dataset import Task
from agent.kaiops.encode import LineEncoder
from agent.kaiops.features import MAX_LINES
from agent.kaiops.scoring import score
from agent.kaiops.train import labels_of, predict_proba, train

ROOT = Path(__file__).resolve().parents[1]
# the KAIOPS class of each lab fault: a bug or a resource limit the job's own code or configuration hits is Software,
# a slow node Performance, anything between the nodes Network, a lost node or a full disk Hardware (infrastructure)
CLASS_OF = {"exception": "Software", "exit": "Software", "nan": "Software", "missing_shard": "Software",
            "code_skew": "Software", "oom_rlimit": "Software", "oom_cgroup": "Software", "hang": "Software",
            "sigkill": "Hardware", "disk_full": "Hardware", "straggler": "Performance",
            "ifname": "Network", "port_taken": "Network", "partition": "Network",
            "none": "Normal", "cpu_contention": "Performance", "cpu_quota": "Performance",
            "mem_pressure": "Performance", "disk_contention": "Performance", "noisy_neighbour": "Performance",
            "packet_loss": "Network"}
# KAIOPS metric <- the lab telemetry's column, per node; the task's series is the largest node's per time bin
METRIC_OF = {"cpu_util": ("cpu_usage_pct", 1.0), "mem_util": ("mem_rss_mb", 100 / 24_105),
             "net_rx_mbps": ("net_rx_kb_per_s", 8 / 1024), "net_tx_mbps": ("net_tx_kb_per_s", 8 / 1024),
             "disk_read_mbps": ("disk_read_kb_per_s", 8 / 1024), "disk_write_mbps": ("disk_write_kb_per_s", 8 / 1024)}
VARIANTS = {"kaiops": {}, "kaiops_wo_temporal": {"temporal_context": False},
            "kaiops_wo_class_weights": {"dynamic_weights": False}}


def job_metrics(job: Path, truth: dict) -> dict[str, list[float | None]]:
    """STEPS time bins over the job (start to end), per KAIOPS metric the largest node's mean in each bin."""
    path = job / "telemetry.csv"
    if not path.is_file():
        return {}
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    start, end = float(truth["started"]), float(truth["ended"])
    width = (end - start) / STEPS
    out: dict[str, list[float | None]] = {}
    for name, (column, factor) in METRIC_OF.items():
        sums: dict[tuple[int, str], list[float]] = {}
        for row in rows:
            k = min(int((float(row["timestamp"]) - start) / width), STEPS - 1)
            if k >= 0 and row.get(column) not in (None, ""):
                sums.setdefault((k, row["host"]), []).append(float(row[column]) * factor)
        series: list[float | None] = []
        for k in range(STEPS):
            per_node = [statistics.fmean(v) for (kk, _), v in sums.items() if kk == k]
            series.append(max(per_node) if per_node else None)
        out[name] = series
    return out


def job_task(job: Path) -> Task:
    truth = json.loads((job / "truth.json").read_text())
    lines = [ln.split(": ", 1)[1] if ": " in ln else ln
             for ln in (job / "combined.out").read_text(errors="replace").splitlines() if ln.strip()]
    return Task(id=job.name, hosts=[n["host"] for n in truth["nodes"]], metrics=job_metrics(job, truth),
                logs=lines[-MAX_LINES:], label=CLASS_OF[truth["fault"]])


def load(labs: list[Path], seeds: set[int]) -> list[Task]:
    jobs = sorted(j for lab in labs for j in lab.iterdir()
                  if (j / "truth.json").is_file() and j.name.split("-")[0].isdigit()
                  and int(j.name.split("-")[0]) in seeds)
    return [job_task(j) for j in jobs]


def table(header: list[str], rows: list[list[object]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(str(c) for c in r) + " |" for r in rows]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab", type=Path, action="append", required=True, help="a lab output folder (repeatable)")
    ap.add_argument("--train", default="9,201,361", help="lab seeds to train on")
    ap.add_argument("--test", default="202,203,362,363", help="held-back lab seeds")
    ap.add_argument("--runs", type=int, default=3, help="training seeds per method")
    # a few dozen training jobs: 150 epochs of 16 (about 750 updates) scored 0.32 macro-F1 against 0.18 for the
    # shipped recipe's 30 epochs of 64 (60 updates) when trained on seed 9 and validated on seed 201 (training
    # seeds only; the held-back seeds were not used to choose)
    ap.add_argument("--epochs", type=int, default=150)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--out", type=Path, default=ROOT / "eval" / "results" / "kaiops-lab.md")
    args = ap.parse_args()
    began = time.perf_counter()
    train_seeds = {int(s) for s in args.train.split(",")}
    test_seeds = {int(s) for s in args.test.split(",")}
    train_tasks, test_tasks = load(args.lab, train_seeds), load(args.lab, test_seeds)
    y_train, y_test = labels_of(train_tasks), labels_of(test_tasks)
    encoder = LineEncoder("minilm")
    results: dict[str, list[dict]] = {name: [] for name in [*VARIANTS, "rf", "dt"]}
    for run in range(args.runs):
        for name, flags in VARIANTS.items():
            trained, _ = train(train_tasks, encoder, epochs=args.epochs, seed=run, val_frac=0.2, batch=args.batch,
                               **flags)
            arrays = trained.featurizer.arrays(test_tasks, encoder)  # embeds the held-back lines first
            table_t = torch.from_numpy(encoder.table())
            pred = predict_proba(trained.model, arrays, table_t).argmax(1)
            results[name].append(score(y_test, pred))
            print(f"run {run} {name}: macro-F1 {results[name][-1]['macro_f1']:.4f}", flush=True)
        for name, pred in fit_predict(("rf", "dt"), train_tasks, y_train, test_tasks, seed=run).items():
            results[name].append(score(y_test, pred))
            print(f"run {run} {name}: macro-F1 {results[name][-1]['macro_f1']:.4f}", flush=True)

    def mix(tasks: list[Task]) -> str:
        return ", ".join(f"{c} {sum(t.label == c for t in tasks)}" for c in CLASSES)

    def with_metrics(tasks: list[Task]) -> int:
        return sum(bool(t.metrics) for t in tasks)

    lines = ["# KAIOPS on the fault lab's jobs", "",
             f"Training: lab seeds {args.train} ({len(train_tasks)} jobs: {mix(train_tasks)}; "
             f"{with_metrics(train_tasks)} with telemetry). Held back: seeds {args.test} ({len(test_tasks)} jobs: "
             f"{mix(test_tasks)}; {with_metrics(test_tasks)} with telemetry). Each method trained {args.runs} times "
             f"(seeds 0-{args.runs - 1}) on the training seeds and scored on the held-back ones; mean ± standard "
             "deviation over the runs. KAIOPS is trained here from scratch (MiniLM line embeddings, "
             f"{args.epochs} epochs of batches of {args.batch}, 20 % of the training jobs for the per-class "
             "accuracy that drives the loss weights and for picking the epoch); DT/RF: scikit-learn on flattened "
             "metric statistics, log TF-IDF and host one-hot (agent/kaiops/baselines.py).", "",
             "## Overall (held-back seeds)", ""]
    rows = []
    for name, runs in results.items():
        def ms(key: str, runs: list[dict] = runs) -> str:
            vals = [r[key] for r in runs]
            return f"{statistics.fmean(vals):.3f} ± {statistics.pstdev(vals):.3f}"
        rows.append([name, ms("macro_p"), ms("macro_r"), ms("macro_f1"), ms("fpr"), ms("anomaly_fnr"),
                     ms("normal_fpr")])
    lines += table(["method", "macro P", "macro R", "macro F1", "FPR", "anomalies called Normal",
                    "Normal called an anomaly"], rows)
    lines += ["", "## Per class F1 (mean over the runs)", ""]
    support = score(y_test, y_test)["per_class"]
    lines += table(["method", *(f"{c} ({support[c]['support']})" for c in CLASSES)],
                   [[name, *(f"{statistics.fmean(r['per_class'][c]['f1'] for r in runs):.3f}" for c in CLASSES)]
                    for name, runs in results.items()])
    f1 = {name: statistics.fmean(r["macro_f1"] for r in runs) for name, runs in results.items()}
    best = max(("kaiops", "rf", "dt"), key=lambda n: f1[n])
    lines += ["", "## Verdict", "",
              f"Best macro-F1 on the held-back lab jobs: **{best}** ({f1[best]:.3f}; KAIOPS {f1['kaiops']:.3f}, "
              f"RF {f1['rf']:.3f}, DT {f1['dt']:.3f}). Temporal-context encoding: KAIOPS {f1['kaiops']:.3f} with, "
              f"{f1['kaiops_wo_temporal']:.3f} without ({f1['kaiops'] - f1['kaiops_wo_temporal']:+.3f}). "
              f"Dynamic class-weighted loss: {f1['kaiops']:.3f} with, {f1['kaiops_wo_class_weights']:.3f} without "
              f"({f1['kaiops'] - f1['kaiops_wo_class_weights']:+.3f}).", "",
              f"Whole benchmark: {time.perf_counter() - began:.0f} s on this machine (2 shared cores).", "",
              "Command: `.venv/bin/python -m eval.bench_kaiops_lab " + " ".join(f"--lab {p}" for p in args.lab)
              + f" --train {args.train} --test {args.test} --runs {args.runs} --epochs {args.epochs} "
              f"--batch {args.batch}`",
              ""]
    text = "\n".join(lines)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
