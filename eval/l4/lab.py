"""L4 judged on fault-lab jobs (eval/lab/run.py): faulty node top-1 / top-3 and stage, per launcher and per fault
kind, on the per-node files and on the combined launcher output alike.

    python -m eval.l4.lab JOBS_DIR [JOBS_DIR ...] [--seeds 1-3] [--out eval/results/l4-lab.md --title "..."]

L4 sees only the logs; the truth file is read after L4 has answered. Jobs whose fault did not fire are listed, not
scored.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from agent.l4.localize import localize


def jobs_in(roots: list[Path], seeds: set[int] | None) -> list[Path]:
    found = sorted(p.parent for root in roots for p in root.glob("*/truth.json"))
    if seeds is not None:
        found = [p for p in found if int(p.name.split("-")[0]) in seeds]
    return found


def judge(job: Path, view: str) -> dict:
    truth = json.loads((job / "truth.json").read_text())
    target = job / "logs" if view == "per-node" else job / "combined.out"
    result = localize(target, engine="local")
    ranked = [n.node for n in result.nodes]
    return {"job": job.name, "view": view, "fault": truth["fault"], "launcher": truth["launcher"],
            "nodes": len(truth["nodes"]), "truth_node": truth["faulty_node"], "truth_stage": truth["stage"],
            "top": ranked[:3], "stage": result.stage, "top1": ranked[:1] == [truth["faulty_node"]],
            "top3": truth["faulty_node"] in ranked[:3], "stage_ok": result.stage == truth["stage"]}


def _rate(rows: list[dict], key: str) -> str:
    return f"{sum(r[key] for r in rows) / len(rows):.2f} ({sum(r[key] for r in rows)}/{len(rows)})" if rows else "-"


def table(rows: list[dict], by: str) -> list[str]:
    out = [f"| {by} | view | jobs | top-1 | top-3 | stage |", "|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r[by], r["view"])].append(r)
        groups[("**all**", r["view"])].append(r)
    for (name, view), grp in sorted(groups.items(), key=lambda kv: (kv[0][0] == "**all**", kv[0])):
        out.append(f"| {name} | {view} | {len(grp)} | {_rate(grp, 'top1')} | {_rate(grp, 'top3')} | "
                   f"{_rate(grp, 'stage_ok')} |")
    return out


def publish(lines: list[str], out: Path | None) -> None:
    """A section of a results table: printed, and appended to OUT when given (a file collects several runs)."""
    text = "\n".join(lines)
    print(text)
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")


def parse_seeds(text: str | None) -> set[int] | None:
    if not text:
        return None
    seeds: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds.update(range(int(low), int(high or low) + 1))
    return seeds


def _truth_error(truth: dict) -> str:
    """Why a job's truth is wrong, from the lab's own records: labs before the fix removed a missing shard by the
    global rank the faulty node was assumed to run, and torchrun's rendezvous may give that node another rank."""
    removed = [str(e.get("rank")) for e in truth["lab_actions"] if e["what"] == "shard removed"]
    opened = [str(m["rank"]) for m in truth["marks"] if m["what"] == "open missing shard"]
    if removed and opened and removed[0] != opened[0]:
        return f"rank {removed[0]}'s shard removed, the faulty node ran rank {opened[0]}"
    return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", type=Path, nargs="+")
    ap.add_argument("--seeds", help="only jobs of these seeds, e.g. 1-3,7")
    ap.add_argument("--out", type=Path, help="append the tables to this markdown file")
    ap.add_argument("--title", default="L4 on the fault lab")
    ap.add_argument("--misses", action="store_true", help="list every miss")
    args = ap.parse_args()
    rows, unfired, unjudged = [], [], []
    for job in jobs_in(args.roots, parse_seeds(args.seeds)):
        truth = json.loads((job / "truth.json").read_text())
        failed = any(code != 0 for code in truth["exit"].values()) or truth["timed_out"]
        if not truth["fired"] or not failed:  # the fault never struck, or struck and the job still succeeded
            unfired.append(f"{job.name} ({truth['fault']}{'' if truth['fired'] else ', not fired'})")
            continue
        wrong = _truth_error(truth)
        if wrong:
            unjudged.append(f"{job.name} ({wrong})")
            continue
        rows.extend(judge(job, view) for view in ("per-node", "combined"))
    lines = [f"### {args.title}", "", f"`{' '.join(['python -m eval.l4.lab', *sys.argv[1:]])}`", "",
             *table(rows, "launcher"), "", *table(rows, "fault"), ""]
    if unfired:
        lines += [f"Not scored (the fault did not fire, or the job did not fail): {', '.join(unfired)}", ""]
    if unjudged:
        lines += [f"Not scored (the lab's truth names another node than the fault struck): {', '.join(unjudged)}", ""]
    misses = [r for r in rows if not (r["top1"] and r["stage_ok"])]
    if args.misses or args.out:
        lines += ["| job | view | fault | truth node / stage | L4 top-3 / stage |", "|---|---|---|---|---|"]
        lines += [f"| {r['job']} | {r['view']} | {r['fault']} | {r['truth_node']} / {r['truth_stage']} | "
                  f"{', '.join(r['top'])} / {r['stage']} |" for r in misses]
        lines.append("")
    publish(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
