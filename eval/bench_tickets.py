"""Tickets a provider can act on: diagnose every dev incident on its simulated host, render its ticket for each
channel, and check the first screen (the first 30 lines, what a terminal or a ticket preview shows) holds the cause,
where it is, the raw lines or evidence behind it and the action to take (for an escalation: what was found, with
its lines). Prints the share of tickets that pass and every miss.

    .venv/bin/python -m eval.bench_tickets [--incidents FILE] [--out eval/results/tickets.md]

FILE defaults to ../shared/eval/dev_incidents.jsonl.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

from agent.diagnosis import Diagnoser
from agent.options import DiagnoseOptions
from agent.ticket import CHANNELS, render_markdown, ticket_data
from eval.harness.problems import load_problems

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_INCIDENTS = ROOT.parent / "shared" / "eval" / "dev_incidents.jsonl"
FIRST_SCREEN = 30


def first_screen_misses(markdown: str, resolved: bool) -> list[str]:
    """What the first screen of a ticket lacks: cause, where, lines, action (resolved) or cause and the findings
    with their lines (escalated, when the checks found anything)."""
    screen = "\n".join(markdown.splitlines()[:FIRST_SCREEN])
    if resolved:
        wanted = {"cause": r"^## Root causes?$\n\n1\. \*\*[A-Z0-9_.]+\*\*", "where": r"^   - where: \S",
                  "lines": r"^   - (?:line|evidence): `", "action": r"^   - action: \S"}
    else:
        wanted = {"cause": r"^## No root cause confirmed$"}
        if "**What the checks found**" in markdown:
            wanted["findings"] = r"^\*\*What the checks found\*\*"
    return [name for name, pattern in wanted.items() if not re.search(pattern, screen, re.MULTILINE)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--incidents", type=Path, default=DEFAULT_INCIDENTS)
    parser.add_argument("--out", type=Path, default=ROOT / "eval" / "results" / "tickets.md")
    args = parser.parse_args()
    problems = load_problems(args.incidents)
    began = time.monotonic()
    rows, lengths = [], []
    with tempfile.TemporaryDirectory(prefix="aidai-tickets-") as tmp:
        for k, problem in enumerate(problems):
            hosts = problem.materialize(Path(tmp) / f"h{k}")
            options = DiagnoseOptions(hosts=hosts, data_dir=str(Path(tmp) / "data"), knowledge=False,
                                      checkpoint=False)
            report = Diagnoser(options).run(problem.incident)
            data = ticket_data(report)
            misses = {channel: first_screen_misses(render_markdown(data, channel), report.resolved)
                      for channel in CHANNELS}
            lengths.append(len(render_markdown(data).splitlines()))
            worst = sorted({m for found in misses.values() for m in found})
            rows.append((problem.id, "resolved" if report.resolved else "escalated", data["title"], worst))
            print(f"{'ok ' if not worst else 'BAD'} {problem.id}: {', '.join(worst) or 'first screen complete'}",
                  file=sys.stderr)
    good = sum(not r[3] for r in rows)
    lines = [f"Tickets whose first {FIRST_SCREEN} lines hold the cause, where, the lines and the action "
             f"(every channel: {', '.join(CHANNELS)}): **{good}/{len(rows)}**", "",
             f"Ticket length: median {sorted(lengths)[len(lengths) // 2]} lines, longest {max(lengths)}; "
             f"{time.monotonic() - began:.0f} s for {len(rows)} diagnoses.", "",
             "| incident | status | title | missing from the first screen |", "|---|---|---|---|"]
    lines += [f"| {i} | {s} | {t.replace('|', '/')} | {', '.join(m) or '-'} |" for i, s, t, m in rows]
    text = "\n".join(["# Tickets on the dev incidents", "", *lines]) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
