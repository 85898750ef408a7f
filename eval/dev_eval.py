"""Diagnosis accuracy and speed on incident records (AIOpsLab style: problem = the record's faults on simulated
hosts, evaluator = its label). Every record gets fresh simulated hosts built from its fault specs; history is
the seed DB only (the record itself is never in it); the first diagnosis is a warm-up and is not timed.

    .venv/bin/python -m eval.dev_eval [--records ../shared/eval/dev_incidents.jsonl] [--out eval/results/dev.md]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from agent.diagnosis import DiagnoseOptions, Diagnoser, Retrieval
from agent.incident import Incident
from agent.sim.scenario import create_scenario
from agent.taxonomy import load_taxonomy

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RECORDS = ROOT.parent / "shared" / "eval" / "dev_incidents.jsonl"


def load_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def diagnose_record(record: dict[str, Any], work: Path, options: DiagnoseOptions, taxonomy: Any,
                    retrieval: Retrieval) -> dict[str, Any]:
    scenario = create_scenario(work / record["id"], record.get("faults", []), record.get("noise", []),
                               record.get("profile", "H100-SXM-8"), record.get("hosts"))
    opts = DiagnoseOptions(**{**options.__dict__, "hosts": [f"sim:{scenario.root}"]})
    diagnoser = Diagnoser(opts, taxonomy=taxonomy, retrieval=retrieval)
    began = time.perf_counter()
    report = diagnoser.run(Incident(text=record["description"], environment=record.get("environment", "")))
    wall = time.perf_counter() - began
    diagnoser.close()
    predicted = report.root_causes[0].label if report.root_causes else None
    label = record["label"]
    return {"id": record["id"], "label": label, "predicted": predicted,
            "others": [c.label for c in report.root_causes[1:]], "pipeline": report.pipeline,
            "leaf_ok": predicted == label,
            "main_ok": bool(predicted) and predicted.split(".")[0] == label.split(".")[0],
            "in_confirmed": label in [c.label for c in report.root_causes],
            "wall_s": round(wall, 3), "check_s": report.check_seconds,
            "reason_s": round(wall - diagnoser.runner.wall_s, 3), "checks_run": report.checks_run,
            "hypotheses": len(report.hypotheses), "llm_calls": report.llm_calls, "tokens": report.tokens}


def nearest_seed(records: list[dict[str, Any]]) -> list[float]:
    """Each record's highest cosine similarity to a seed incident: how close the history is to the test set
    (the seed DB is written by us from public error strings, never from these records)."""
    from agent.knowledge.embeddings import embed
    from agent.knowledge.incident_db import SEED_PATH, read_jsonl

    seeds, _ = read_jsonl(SEED_PATH)
    seed_vectors = embed([record.embed_text() for _, record in seeds])
    vectors = embed([f"{r['description']}\n{r.get('environment', '')}".strip() for r in records])
    return [round(float(v), 3) for v in (vectors @ seed_vectors.T).max(axis=1)]


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    timed = rows[1:] or rows  # the first run pays for loading the model and opening the stores
    return {"incidents": n,
            "leaf_accuracy": round(sum(r["leaf_ok"] for r in rows) / n, 3),
            "main_accuracy": round(sum(r["main_ok"] for r in rows) / n, 3),
            "label_confirmed": round(sum(r["in_confirmed"] for r in rows) / n, 3),
            "resolved": round(sum(r["predicted"] is not None for r in rows) / n, 3),
            "by_pipeline": dict(sorted(Counter(r["pipeline"] for r in rows).items())),
            "median_wall_s": round(statistics.median(r["wall_s"] for r in timed), 3),
            "median_reason_s": round(statistics.median(r["reason_s"] for r in timed), 3),
            "p90_reason_s": round(sorted(r["reason_s"] for r in timed)[int(0.9 * (len(timed) - 1))], 3),
            "mean_checks": round(statistics.mean(r["checks_run"] for r in rows), 1),
            "llm_calls": sum(r["llm_calls"] for r in rows), "tokens": sum(r["tokens"] for r in rows),
            "nearest_seed_similarity_median": round(statistics.median(r["seed_sim"] for r in rows), 3),
            "nearest_seed_similarity_max": max(r["seed_sim"] for r in rows)}


def per_category(rows: list[dict[str, Any]]) -> list[str]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[row["label"].split(".")[0]].append(row)
    lines = ["| category | incidents | leaf accuracy | category accuracy |", "|---|---|---|---|"]
    for category, items in sorted(groups.items()):
        lines.append(f"| {category} | {len(items)} | {sum(r['leaf_ok'] for r in items) / len(items):.2f} | "
                     f"{sum(r['main_ok'] for r in items) / len(items):.2f} |")
    return lines


def markdown(summary: dict[str, Any], rows: list[dict[str, Any]], command: str) -> str:
    lines = [f"Command: `{command}`", "", "| metric | value |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in summary.items()]
    lines += ["", *per_category(rows), "", "| id | label | predicted | pipeline | reason s | checks | nearest seed |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['id']} | {r['label']} | {'✓' if r['leaf_ok'] else (r['predicted'] or '—')} | {r['pipeline']} | "
              f"{r['reason_s']} | {r['checks_run']} | {r['seed_sim']} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=DEFAULT_RECORDS)
    parser.add_argument("--out", type=Path, help="write the markdown tables here (and the rows as .json)")
    parser.add_argument("--llm", default="offline")
    parser.add_argument("--base-url")
    parser.add_argument("--model")
    parser.add_argument("--no-history", action="store_true", help="pipeline 1 off: taxonomy DFS only")
    parser.add_argument("--passive-only", action="store_true", help="do not approve active checks")
    parser.add_argument("--only", nargs="*", help="record ids to run (debugging)")
    args = parser.parse_args(argv)
    if not args.records.is_file():
        print(f"no records at {args.records}", file=sys.stderr)
        return 2
    records = load_records(args.records)
    if args.only:
        records = [r for r in records if r["id"] in set(args.only)]
    taxonomy = load_taxonomy()
    with tempfile.TemporaryDirectory(prefix="aidai-eval-") as tmp:
        work = Path(tmp)
        options = DiagnoseOptions(data_dir=str(work / "data"), llm=args.llm, base_url=args.base_url,
                                  model=args.model, history=not args.no_history,
                                  approval="none" if args.passive_only else "all", checkpoint=False)
        retrieval = Retrieval(options)
        rows = []
        for record in records:
            row = diagnose_record(record, work / "hosts", options, taxonomy, retrieval)
            rows.append(row)
            mark = "ok " if row["leaf_ok"] else "MISS"
            print(f"{mark} {row['id']:<28} {row['label']:<55} -> {row['predicted']} (p{row['pipeline']}, "
                  f"{row['reason_s']:.2f}s + checks {row['check_s']:.2f}s)", file=sys.stderr, flush=True)
    for row, similarity in zip(rows, nearest_seed(records), strict=True):
        row["seed_sim"] = similarity
    summary = summarize(rows)
    command = "python -m eval.dev_eval " + " ".join(argv if argv is not None else sys.argv[1:])
    text = markdown(summary, rows, command.strip())
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
        args.out.with_suffix(".json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
