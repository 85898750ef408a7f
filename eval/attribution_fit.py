"""The attribution's claim model, fitted and judged on traced benchmark runs (`aidai eval --trace`): every run is
one choice among its confirmed leaves (their features, agents/attribution.py) and "none of them" (the right one is
the record's label when it was confirmed), a conditional logit over them gives the weights, and every run's
conclusion is drawn again with them (no host is checked again: the checks do not depend on the weights, only the
claim does).

    python -m eval.attribution_fit --incidents ../shared/eval/dev_incidents.jsonl \\
        --rows eval/results/diagnosis/confound-{1,2,3}.rows.jsonl --controls controls-1.rows.jsonl \\
        [--judge public-confound-1.rows.jsonl --judge-controls public-controls-1.rows.jsonl \\
         --judge-incidents eval/incidents/public.jsonl] [--out F.md]

Prints the shipped weights and those fitted on each set and on both, and for every (weights, set): leaf micro-F1
of the first claimed cause, precision of confirmed and of probable claims, controls with a claim; then the
shipped weights' reliability table per set (claims per confidence decile and how often each was the labelled
cause). Weights fitted on one set and judged on the other are the out-of-sample numbers.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from agent.agents import attribution, reading
from agent.incident import Incident
from agent.reasoning.base import LeafJudgement, PastIncident
from agent.reasoning.offline import OfflineReasoner
from agent.taxonomy import Taxonomy, load_taxonomy

Example = tuple[dict[str, float], bool]  # one confirmed leaf's features, and whether it is the record's label


class Replay:
    """One traced run, read back: its incident as the reasoner reads it, its judgements and its hosts."""

    def __init__(self, row: dict[str, Any], record: dict[str, Any], taxonomy: Taxonomy, reader: OfflineReasoner):
        trace = row["trace"]
        self.row, self.label, self.control = row, record["label"], bool(row.get("control"))
        self.judgements = [LeafJudgement.model_validate(j) for j in trace["judgements"]]
        self.confirmed = [j for j in self.judgements if j.status == "confirmed"]
        self.summary = reader.summarize(Incident(text=record["description"],
                                                 environment=record.get("environment") or ""))
        similar = [PastIncident(id=str(i), label=label, text="", score=score)
                   for i, (label, score) in enumerate(trace["similar"])]
        self.reading = reading.reading(reader, taxonomy, self.summary, similar)
        self.hosts = len(row["hosts"])

    def examples(self, taxonomy: Taxonomy) -> list[Example]:
        unique = list({j.label: j for j in self.confirmed}.values())
        return [(attribution.features(taxonomy, self.summary, j, self.judgements, unique, self.reading,
                                      self.hosts)[0].vector(), j.label == self.label and not self.control)
                for j in unique]

    def conclude(self, taxonomy: Taxonomy, weights: dict[str, float]) -> attribution.Attribution:
        return attribution.attribute(taxonomy, self.summary, self.confirmed, self.judgements, self.reading,
                                     self.hosts, weights)


def load(rows: list[Path], incidents: Path, taxonomy: Taxonomy, method: str = "aidai") -> list[Replay]:
    records = {json.loads(line)["id"]: json.loads(line) for line in incidents.read_text().splitlines() if line}
    reader = OfflineReasoner(taxonomy)
    out = []
    for path in rows:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("method") == method and "trace" in row and not row.get("error"):
                out.append(Replay(row, records[row["id"]], taxonomy, reader))
    return out


def fit(replays: list[Replay], taxonomy: Taxonomy, l2: float = 1.0) -> dict[str, float]:
    """The conditional logit's weights (L2 penalty `l2`, none on the bias): each run chooses among its confirmed
    leaves and "none of them"; the right choice is the record's label when it was confirmed, else none."""
    import numpy as np
    from scipy.optimize import minimize

    runs = [r.examples(taxonomy) for r in replays]
    names = list(next(x for run in runs for x, _ in run))
    data = [(np.array([[1.0, *(x[n] for n in names)] for x, _ in run]).reshape(-1, len(names) + 1),
             next((i for i, (_, y) in enumerate(run) if y), -1)) for run in runs]

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        total, grad = 0.5 * l2 * float(w[1:] @ w[1:]), np.concatenate([[0.0], l2 * w[1:]])
        for x, chosen in data:
            z = np.concatenate([[0.0], x @ w]) if len(x) else np.zeros(1)
            top = z.max()
            p = np.exp(z - top) / np.exp(z - top).sum()
            total -= z[chosen + 1] - top - np.log(np.exp(z - top).sum())
            if len(x):
                grad += x.T @ p[1:] - (x[chosen] if chosen >= 0 else 0.0)
        return total, grad

    w = minimize(loss, np.zeros(len(names) + 1), jac=True, method="L-BFGS-B").x
    return {"bias": round(float(w[0]), 2), **{n: round(float(v), 2) for n, v in zip(names, w[1:], strict=True)}}


def judge(replays: list[Replay], taxonomy: Taxonomy, weights: dict[str, float]) -> dict[str, Any]:
    """Leaf micro-F1 of the first claimed cause, precision per level, controls with a claim, and the first claims'
    (level, confidence, right) for the reliability table."""
    tp = fp = fn = 0
    per_level: dict[str, list[bool]] = defaultdict(list)
    controls: list[bool] = []
    claims: list[tuple[str, float, bool]] = []
    for r in replays:
        found = r.conclude(taxonomy, weights)
        first = found.primary[0] if found.primary else None
        if r.control:
            controls.append(first is not None)
            if first is not None:
                claims.append((found.levels[first.label], found.claims[first.label], False))
            continue
        if first is None:
            fn += 1
            continue
        right = first.label == r.label
        tp, fp, fn = tp + right, fp + (not right), fn + (not right)
        per_level[found.levels[first.label]].append(right)
        claims.append((found.levels[first.label], found.claims[first.label], right))
    return {"f1": 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0, "n": tp + fn,
            "precision": {lv: (sum(v) / len(v), len(v)) for lv, v in per_level.items()},
            "controls": (sum(controls) / len(controls), len(controls)) if controls else None, "claims": claims}


def reliability(claims: list[tuple[str, float, bool]]) -> list[str]:
    """Markdown rows: for each level and confidence decile, the claims and how often they were right."""
    lines = ["| level | confidence | claims | right | share right |", "|---|---|---|---|---|"]
    cells: dict[tuple[str, int], list[bool]] = defaultdict(list)
    for level, confidence, right in claims:
        cells[(level, min(int(confidence * 10), 9))].append(right)
    for (level, decile), rights in sorted(cells.items()):
        lines.append(f"| {level} | {decile / 10:.1f}-{(decile + 1) / 10:.1f} | {len(rights)} | {sum(rights)} | "
                     f"{sum(rights) / len(rights):.2f} |")
    return lines


def summary_line(name: str, result: dict[str, Any]) -> str:
    precision = "; ".join(f"{lv} {p:.3f} ({n})" for lv, (p, n) in sorted(result["precision"].items()))
    controls = f"{result['controls'][0]:.1%} of {result['controls'][1]}" if result["controls"] else "—"
    return f"| {name} | {result['n']} | {result['f1']:.3f} | {precision} | {controls} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--incidents", type=Path, required=True)
    parser.add_argument("--rows", type=Path, nargs="+", required=True, help="traced rows of the dev fleet")
    parser.add_argument("--controls", type=Path, nargs="*", default=[], help="traced rows of its controls")
    parser.add_argument("--judge", type=Path, nargs="*", default=[], help="traced rows of a second set")
    parser.add_argument("--judge-controls", type=Path, nargs="*", default=[], help="traced rows of its controls")
    parser.add_argument("--judge-incidents", type=Path, help="the records of the second set (default --incidents)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    taxonomy = load_taxonomy()
    sets = {"dev": load([*args.rows, *args.controls], args.incidents, taxonomy)}
    if args.judge:
        sets["public"] = load([*args.judge, *args.judge_controls], args.judge_incidents or args.incidents, taxonomy)
    if not all(sets.values()):
        raise SystemExit("no traced aidai rows: run `aidai eval ... --trace`")
    weights = {"shipped": attribution.CLAIM_WEIGHTS}
    for name, replays in sets.items():
        weights[f"fitted on {name}"] = fit(replays, taxonomy)
    if len(sets) > 1:
        weights["fitted on both"] = fit([r for replays in sets.values() for r in replays], taxonomy)
    names = list(weights["fitted on dev"])
    lines = ["## Weights", "", "| weights | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    lines += [f"| {w} | " + " | ".join(f"{values.get(n, 0.0):g}" for n in names) + " |"
              for w, values in weights.items()]
    lines += ["", "## Conclusions drawn again with each set of weights", "",
              "A run's checks do not depend on the weights (the walk follows only causes tied to the incident), so "
              "these are the runs' own conclusions under each model. Weights fitted on one set and judged on the "
              "other are the out-of-sample numbers.", "",
              "| weights, judged on | incidents | leaf micro-F1 (first claim) | precision by level (claims) | "
              "controls with a claim |", "|---|---|---|---|---|"]
    shipped = {}
    for w, values in weights.items():
        for name, replays in sets.items():
            result = judge(replays, taxonomy, values)
            shipped[name] = result if w == "shipped" else shipped.get(name)
            lines.append(summary_line(f"{w}, judged on {name}", result))
    for name, result in shipped.items():
        lines += ["", f"## Reliability of the shipped weights on {name}", "", *reliability(result["claims"])]
    text = "\n".join(lines)
    print(text)
    if args.out:
        sources = ", ".join(p.name for p in [*args.rows, *args.controls, *args.judge, *args.judge_controls])
        args.out.write_text(f"# Attribution: the claim model\n\n`python -m eval.attribution_fit` on {sources}\n\n"
                            f"{text}\n")


if __name__ == "__main__":
    main()
