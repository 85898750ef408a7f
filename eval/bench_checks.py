"""Benchmark of the hands: the parsers on the real-output corpus (eval/corpus/cases.yaml: the committed files under
tests/fixtures and those of ../shared/fixtures/real, read in place), the fault matrix on simulated hosts, and
check timings.

    .venv/bin/python -m eval.bench_checks [--shared DIR] [--out eval/results/checks.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from agent.checks.manifest import load_manifest, load_profiles
from agent.models import Verdict
from agent.sim.selftest import ancestors, documented_ids, fault_scenario, run_scenario
from eval.corpus.run import SHARED_DIR, load_cases, report, run_cases

ROOT = Path(__file__).resolve().parents[1]


def fault_matrix() -> tuple[list[str], dict[str, list[float]]]:
    nodes = {c.id: c.nodes for c in load_manifest().checks}
    timings: dict[str, list[float]] = defaultdict(list)
    lines = ["| scenario | leaf | FAIL (leaf-attached) | WARN (leaf-attached) | FAIL elsewhere | UNKNOWN | s |",
             "|---|---|---|---|---|---|---|"]
    ok = total = 0
    ids = documented_ids()
    scenarios = [(f"healthy {p}", [], [], p, None) for p in sorted(load_profiles())]
    scenarios += [(nid, [], [{"fault": nid}], "H100-SXM-8", None) for nid, leaf in sorted(ids.items()) if leaf is None]
    scenarios += [(fid, *fault_scenario(fid)[:1], [], "H100-SXM-8", fault_scenario(fid)[1])
                  for fid, leaf in sorted(ids.items()) if leaf is not None]
    for name, faults, noise, profile, hosts in scenarios:
        row = run_scenario(name, faults, noise, profile=profile, hosts=hosts, workers=2)
        for r in row.results:
            timings[r.check].append(r.duration_s)
        wanted = ancestors(row.leaf) if row.leaf else set()

        def on_leaf(r, wanted=wanted) -> bool:
            return bool(wanted & set(nodes[r.check]))

        leaf_fail = [r.check for r in row.flagged(Verdict.FAIL) if on_leaf(r)]
        leaf_warn = [r.check for r in row.flagged(Verdict.WARN) if on_leaf(r)]
        other_fail = [r.check for r in row.flagged(Verdict.FAIL) if not on_leaf(r)]
        unknown = [r.check for r in row.flagged(Verdict.UNKNOWN)]
        good = bool(leaf_fail or leaf_warn) if row.leaf else not other_fail
        ok += good
        total += 1
        lines.append(f"| {name} | {row.leaf or '-'} | {', '.join(leaf_fail) or '-'} | {', '.join(leaf_warn) or '-'} "
                     f"| {', '.join(other_fail) or '-'} | {len(unknown)} | {row.seconds:.1f} |")
        print(f"{'ok ' if good else 'BAD'} {name}", file=sys.stderr)
    lines.insert(0, f"Scenarios meeting the acceptance rule: **{ok}/{total}**\n")
    return lines, timings


def timing_table(timings: dict[str, list[float]]) -> list[str]:
    lines = ["| check | runs | median s | p95 s |", "|---|---|---|---|"]
    for check, values in sorted(timings.items()):
        values = sorted(values)
        p95 = values[min(len(values) - 1, int(0.95 * len(values)))]
        lines.append(f"| {check} | {len(values)} | {statistics.median(values):.3f} | {p95:.3f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", type=Path, default=SHARED_DIR, help="root of ../shared/fixtures/real")
    parser.add_argument("--out", type=Path, default=ROOT / "eval" / "results" / "checks.md")
    args = parser.parse_args()
    start = time.monotonic()
    sections = []
    shared = args.shared if args.shared.exists() else None
    sections += ["## Parsers on real tool output", "", *report(run_cases(load_cases(), shared)), ""]
    matrix, timings = fault_matrix()
    sections += ["## Fault matrix (all passive checks, one scenario each)", "", *matrix, "",
                 "## Check wall time on simulated hosts", "", *timing_table(timings), ""]
    sections.append(f"Total benchmark time: {time.monotonic() - start:.0f} s")
    text = "\n".join(sections) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
