"""How an incident reads before any check: where the reading (agents/reading.py) puts the labelled leaf among every
leaf, on traced benchmark runs (`aidai eval --trace`: the past incidents retrieved for each text are in the trace,
so only the reading is redone), for several weights of the documentation's words (offline.WORDS).

    python -m eval.bench_reading \\
        --set dev ../shared/eval/dev_incidents.jsonl eval/results/diagnosis/claims-confound-1.rows.jsonl \\
        --set public eval/incidents/public.jsonl eval/results/diagnosis/public-confound-1.rows.jsonl \\
        [--words 0 0.25 0.5 1] [--out eval/results/reading.md]

Prints, per set and weight: incidents, top-1/3/5/10 (the labelled leaf among the reading's first k) and the mean
reciprocal rank. The weight is chosen on the dev set; the other sets are the material it was not chosen on.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.agents import reading
from agent.reasoning import offline
from agent.reasoning.base import PastIncident
from agent.reasoning.offline import OfflineReasoner
from agent.taxonomy import load_taxonomy
from eval.attribution_fit import load

TOPS = (1, 3, 5, 10)


def ranks(replays: list, taxonomy, reader: OfflineReasoner) -> list[int]:
    """The labelled leaf's place in each run's reading (controls and unknown labels left out)."""
    out = []
    for r in replays:
        if r.control or r.label not in taxonomy.labels():
            continue
        similar = [PastIncident(id=str(i), label=label, text="", score=score)
                   for i, (label, score) in enumerate(r.row["trace"]["similar"])]
        order = reading.reading(reader, taxonomy, r.summary, similar)
        out.append(order.get(r.label, len(order) + 1))
    return out


def row(name: str, weight: float, places: list[int]) -> str:
    n = len(places)
    tops = " | ".join(f"{sum(p <= k for p in places) / n:.2f}" for k in TOPS)
    return f"| {name} | {weight:g} | {n} | {tops} | {sum(1 / p for p in places) / n:.3f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", nargs=3, action="append", required=True, metavar=("NAME", "INCIDENTS", "ROWS"),
                        help="a name, the incident records and one traced rows file")
    parser.add_argument("--words", type=float, nargs="+", default=[0.0, offline.WORDS])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    taxonomy = load_taxonomy()
    reader = OfflineReasoner(taxonomy)
    header = ["| set | words weight | incidents | " + " | ".join(f"top-{k}" for k in TOPS) + " | MRR |",
              "|---|---|---|" + "---|" * len(TOPS) + "---|"]
    lines = list(header)
    shipped = offline.WORDS
    try:
        for name, incidents, rows in args.set:
            replays = load([Path(rows)], Path(incidents), taxonomy)
            for weight in args.words:
                offline.WORDS = weight
                lines.append(row(name, weight, ranks(replays, taxonomy, reader)))
    finally:
        offline.WORDS = shipped
    text = "\n".join(lines)
    print(text)
    if args.out:
        command = "python -m eval.bench_reading " + " ".join(f"--set {' '.join(s)}" for s in args.set) + \
            " --words " + " ".join(f"{w:g}" for w in args.words)
        args.out.write_text(f"# The reading: the labelled leaf's place before any check\n\n`{command}`\n\n"
                            f"Shipped weight: {shipped:g} (chosen on dev).\n\n{text}\n")


if __name__ == "__main__":
    main()
