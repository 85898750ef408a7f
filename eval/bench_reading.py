"""How an incident reads before any check: where the reading (agents/reading.py) puts the labelled leaf among every
leaf, on traced benchmark runs (`aidai eval --trace`: the past incidents retrieved for each text are in the trace,
so only the reading is redone), for several weights of the documentation's words (offline.WORDS) and for single
words alone or with pairs of words (lexicon.NGRAMS).

    python -m eval.bench_reading \\
        --set dev ../shared/eval/dev_incidents.jsonl eval/results/diagnosis/claims-confound-1.rows.jsonl \\
        --set public eval/incidents/public.jsonl eval/results/diagnosis/public-confound-1.rows.jsonl \\
        [--words 0 0.25 0.5 1] [--ngrams 1 2] [--out eval/results/reading.md]

Prints, per set, word n-grams and weight: incidents, top-1/3/5/10 (the labelled leaf among the reading's first k)
and the mean reciprocal rank. The weight is chosen on the dev set; the other sets are the material it was not chosen on.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.agents import reading
from agent.reasoning import lexicon, offline
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


def row(name: str, ngrams: int, weight: float, places: list[int]) -> str:
    n = len(places)
    tops = " | ".join(f"{sum(p <= k for p in places) / n:.2f}" for k in TOPS)
    return f"| {name} | 1-{ngrams} | {weight:g} | {n} | {tops} | {sum(1 / p for p in places) / n:.3f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", nargs=3, action="append", required=True, metavar=("NAME", "INCIDENTS", "ROWS"),
                        help="a name, the incident records and one traced rows file")
    parser.add_argument("--words", type=float, nargs="+", default=[0.0, offline.WORDS])
    parser.add_argument("--ngrams", type=int, nargs="+", default=[lexicon.NGRAMS[1]],
                        help="longest word n-gram of the lexicon (1: single words)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    taxonomy = load_taxonomy()
    header = ["| set | word n-grams | words weight | incidents | " + " | ".join(f"top-{k}" for k in TOPS) + " | MRR |",
              "|---|---|---|---|" + "---|" * len(TOPS) + "---|"]
    lines = list(header)
    shipped, shipped_ngrams = offline.WORDS, lexicon.NGRAMS
    try:
        for name, incidents, rows in args.set:
            replays = load([Path(rows)], Path(incidents), taxonomy)
            for longest in args.ngrams:
                lexicon.NGRAMS = (1, longest)
                lexicon.lexicon.cache_clear()
                reader = OfflineReasoner(taxonomy)
                for weight in args.words:
                    offline.WORDS = weight
                    lines.append(row(name, longest, weight, ranks(replays, taxonomy, reader)))
    finally:
        offline.WORDS, lexicon.NGRAMS = shipped, shipped_ngrams
        lexicon.lexicon.cache_clear()
    text = "\n".join(lines)
    print(text)
    if args.out:
        command = "python -m eval.bench_reading " + " ".join(f"--set {' '.join(s)}" for s in args.set) + \
            " --words " + " ".join(f"{w:g}" for w in args.words) + " --ngrams " + " ".join(map(str, args.ngrams))
        chosen = f"Shipped: weight {shipped:g}, word n-grams 1-{shipped_ngrams[1]} (chosen on dev)."
        args.out.write_text(f"# The reading: the labelled leaf's place before any check\n\n`{command}`\n\n"
                            f"{chosen}\n\n{text}\n")


if __name__ == "__main__":
    main()
