"""How the attribution's one parameter moves the realistic-fleet scores: every conclusion of a traced run
(`aidai eval --trace`) drawn again with READING_TOP = 3 … 10, from the judgements, similar past incidents and hosts
the run saved (no host is checked again: the checks do not depend on the parameter, only the claim does).

    python -m eval.attribution_sweep --incidents ../shared/eval/dev_incidents.jsonl \\
        --rows eval/results/diagnosis/confound-1.rows.jsonl ... [--controls controls-1.rows.jsonl] [--out F.md]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from agent.agents import attribution, planning
from agent.incident import Incident
from agent.reasoning.base import LeafJudgement, PastIncident
from agent.reasoning.offline import OfflineReasoner
from agent.taxonomy import Taxonomy, load_taxonomy

TOPS = (3, 4, 5, 6, 8, 10)


def claimed(row: dict[str, Any], record: dict[str, Any], taxonomy: Taxonomy, reader: OfflineReasoner,
            top: int) -> LeafJudgement | None:
    """The primary cause the run would have named with READING_TOP = `top`."""
    trace = row["trace"]
    judgements = [LeafJudgement.model_validate(j) for j in trace["judgements"]]
    confirmed = [j for j in judgements if j.status == "confirmed"]
    if not confirmed:
        return None
    summary = reader.summarize(Incident(text=record["description"], environment=record.get("environment") or ""))
    similar = [PastIncident(id=str(i), label=label, text="", score=score)
               for i, (label, score) in enumerate(trace["similar"])]
    reading = planning.reading(reader, taxonomy, summary, similar)
    saved, attribution.READING_TOP = attribution.READING_TOP, top
    try:
        found = attribution.attribute(taxonomy, summary, confirmed, judgements, reading, len(row["hosts"]))
    finally:
        attribution.READING_TOP = saved
    return found.primary[0] if found.primary else None


def score(rows: list[dict[str, Any]], claims: list[LeafJudgement | None]) -> dict[str, float]:
    """As eval/harness/metrics.py: leaf micro-F1 over the records, false confirmations (a wrong primary cause
    backed by strong evidence), and the share of controls with any cause claimed."""
    real = [(r, c) for r, c in zip(rows, claims, strict=True) if not r.get("control")]
    controls = [c for r, c in zip(rows, claims, strict=True) if r.get("control")]
    tp = sum(1 for r, c in real if c and c.label == r["label"])
    fp = sum(1 for r, c in real if c and c.label != r["label"])
    fn = len(real) - tp
    strong = sum(1 for r, c in real if c and c.label != r["label"] and c.evidence.strength == "strong")
    return {"n": len(real), "f1": round(2 * tp / (2 * tp + fp + fn), 3) if real else 0.0,
            "false_confirmations": round(strong / len(real), 3) if real else 0.0,
            "controls_confirmed": round(sum(1 for p in controls if p) / len(controls), 3) if controls else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--incidents", type=Path, required=True)
    parser.add_argument("--rows", type=Path, nargs="+", required=True, help="traced rows of the confound runs")
    parser.add_argument("--controls", type=Path, nargs="*", default=[], help="traced rows of the controls")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    records = {json.loads(line)["id"]: json.loads(line) for line in args.incidents.read_text().splitlines() if line}
    taxonomy = load_taxonomy()
    reader = OfflineReasoner(taxonomy)
    by_method: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in [*args.rows, *args.controls]:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if "trace" in row and not row.get("error"):
                by_method[row["method"]].append(row)
    if not by_method:
        raise SystemExit("no traced rows: run `aidai eval ... --trace`")
    lines = ["| method | READING_TOP | leaf micro-F1 | false confirmations | controls confirmed |",
             "|---|---|---|---|---|"]
    for method, rows in sorted(by_method.items()):
        for top in TOPS:
            s = score(rows, [claimed(r, records[r["id"]], taxonomy, reader, top) for r in rows])
            mark = " (shipped)" if top == attribution.READING_TOP else ""
            lines.append(f"| {method} | {top}{mark} | {s['f1']:.3f} | {s['false_confirmations']:.1%} | "
                         f"{s['controls_confirmed']:.1%} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(f"# Attribution: READING_TOP\n\n`python -m eval.attribution_sweep` on "
                            f"{', '.join(p.name for p in [*args.rows, *args.controls])}\n\n{table}\n")


if __name__ == "__main__":
    main()
