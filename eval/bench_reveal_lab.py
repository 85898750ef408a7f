"""Reveal on the fault lab's telemetry jobs (issue 36): each job's per-node telemetry (eval/lab/telemetry.py) judged
against the normal learned from the job's own start (agent/reveal/normal.py), or from an earlier healthy run of
the same job configuration (--baseline: an anomaly-free lab job's telemetry), and scored against the
lab's truth: which node, which window. Writes eval/results/reveal-lab.md.

    .venv/bin/python -m eval.bench_reveal_lab --lab ../lab-t36/held --seeds 362,363 \\
        --baseline ../lab-t36/dev/361-013/telemetry.csv --title "held-back seeds 362-363"

An injected anomaly is found when a flagged window of any node overlaps [start, end + SLACK_S]; the node is right
when the node with the most flagged windows in that span (then the strongest) is the faulty one; the subsystem is
right when that node's strongest window there names the subsystem the anomaly acts on (cpu or memory for a noisy
neighbour). The flag rate on anomaly-free jobs is flagged windows over judged windows. What is judged: from the end
of the learned period to the job's last training step (the lab knows when training began and ended; start-up and
shutdown are not the workload's normal).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from agent.reveal import detect, frame, normal
from eval.lab.telemetry import KINDS, SUBSYSTEM

ROOT = Path(__file__).resolve().parents[1]
# what a right attribution names (among the subsystems of the strongest window): a noisy neighbour takes CPU time
# and memory alike
SUBSYSTEMS = {kind: (sub,) for kind, sub in SUBSYSTEM.items()} | {"noisy_neighbour": ("cpu", "memory")}
SLACK_S = 10.0  # a job slowed by an anomaly takes a few seconds to settle after it is lifted
LEARN_S = 12.0  # the lab's anomalies start 80-110 training steps (16 s or more) into training


def jobs_of(lab: Path, seeds: set[int]) -> list[Path]:
    return sorted(j for j in lab.iterdir() if (j / "telemetry.csv").is_file() and (j / "truth.json").is_file()
                  and int(j.name.split("-")[0]) in seeds)


def judge(job: Path, baseline: Path | None, learn_start: bool, learn_s: float = LEARN_S,
          persistence: int = normal.PERSISTENCE) -> dict:
    truth = json.loads((job / "truth.json").read_text())
    tel = frame.load(job / "telemetry.csv")
    origin = min(float(t[0]) for t in tel.times.values())
    skip = max(float(truth["first_step"]) - origin, 0.0)
    until = float(truth["last_step"]) - origin
    refs = [baseline] if baseline is not None else []
    report = normal.run(tel, refs, learn_start=learn_start, learn_s=learn_s, skip_s=skip, until_s=until,
                        persistence=persistence)
    collector = truth.get("collector") or {}
    out: dict = {"job": job.name, "kind": truth["fault"], "judged": report.judged_windows,
                 "flagged": len(report.windows), "seconds": report.duration_s,
                 "collector_pct": 100 * collector["job_process_cpu_s"] / collector["wall_s"]
                 if collector.get("wall_s") else None}
    anomaly = truth.get("anomaly")
    if anomaly is None or anomaly.get("start") is None:
        out["clean"] = anomaly is None
        return out
    start, end = float(anomaly["start"]), float(anomaly["end"]) + SLACK_S
    # the windows judged before the anomaly began are anomaly-free too: a second measure of false alarms
    learned = origin + skip + learn_s if learn_start else origin + skip
    per_host = max(0, int((start - report.window_s - learned) // report.stride_s) + 1)
    out["before"] = per_host * len(report.hosts)
    out["before_flagged"] = sum(1 for w in report.windows if w.end <= start)
    inside = [w for w in report.windows if w.start < end and w.end > start]
    out.update(clean=False, host=anomaly["host"], expected=anomaly["subsystem"], found=bool(inside))
    if inside:
        # the node named: the one anomalous longest in the span (then the strongest), as the report ranks hosts
        count = {h: sum(w.host == h for w in inside) for h in {w.host for w in inside}}
        node = max(count, key=lambda h: (count[h], max(w.score for w in inside if w.host == h)))
        top = max((w for w in inside if w.host == node), key=lambda w: w.score)
        out.update(node=top.host, node_right=top.host == anomaly["host"],
                   subsystem="+".join(top.subsystems) or "?", peak=top.score,
                   metrics=[s.metric for s in top.signals[:3]])
        out["subsystem_right"] = bool(set(top.subsystems) & set(SUBSYSTEMS[anomaly["kind"]]))
    return out


def analog_section(folder: Path) -> list[str]:
    """The CPU analog of the held-back H200 run, judged as `aidai reveal detect FILE` judges it by default."""
    truth = json.loads((folder / "truth.json").read_text())
    report = normal.run(folder / "telemetry.csv")
    rows = []
    covered: list[tuple[float, float]] = []
    for anomaly in truth["anomalies"]:
        start, end = float(anomaly["start"]), float(anomaly["end"]) + SLACK_S
        covered.append((start, end))
        inside = [w for w in report.windows if w.start < end and w.end > start]
        top = max(inside, key=lambda w: w.score) if inside else None
        rows.append([anomaly["kind"], f"{start - report.origin:.0f}-{float(anomaly['end']) - report.origin:.0f}",
                     "yes" if inside else "no", len(inside), f"{top.score:.1f}" if top else "",
                     ", ".join(top.subsystems) if top else "", ", ".join(s.metric for s in top.signals[:3])
                     if top else ""])
    outside = [w for w in report.windows if not any(w.start < e and w.end > s for s, e in covered)]
    old = detect.run(folder / "telemetry.csv")  # the paper's self mode, as `aidai reveal detect --self`
    old_found = [any(w.start < e and w.end > s for w in old.windows) for s, e in covered]
    return [f"## A CPU analog of the held-back H200 run ({folder.name})", "",
            "`python -m eval.lab.analog --out DIR` on this machine (host procfs only, no GPU), then "
            "`aidai reveal detect DIR/telemetry.csv` with its defaults (normal learned from the first "
            f"{report.learn_s:g} s): {report.judged_windows} judged windows, {len(report.windows)} anomalous."
            + (f" The collector: {truth['collector']}." if truth.get("collector") else ""), "",
            *table(["anomaly", "s from start", "found", "windows", "peak sigmas", "subsystems", "metrics that moved"],
                   rows), "",
            f"Anomalous windows outside both anomalies (and {SLACK_S:g} s after each): {len(outside)}"
            + (" (" + ", ".join(f"{w.start - report.origin:.0f} s {'+'.join(w.subsystems)}" for w in outside[:8])
               + ")" if outside else "") + ".", "",
            f"The same file in self mode (`--self`): {len(old.windows)} of {old.total_windows} windows anomalous; "
            + ", ".join(f"{a['kind']} {'found' if f else 'not found'}" for a, f in zip(truth["anomalies"], old_found,
                                                                                       strict=True)) + ".", ""]


def pretriage_section(jobs: list[Path]) -> list[str]:
    """The pre-triage tool as `aidai diagnose --telemetry FILE` runs it: the whole file, its first 20 s learned,
    nothing known of when training began (start-up is part of what it learns). Right: the host it puts first is the
    faulty one; on an anomaly-free job, no host named."""
    from agent.incident import Incident
    from agent.reveal.tool import reveal_pretriage

    rows, right, clean_named, clean, old_right, old_named = [], 0, 0, 0, 0, 0
    for job in jobs:
        truth = json.loads((job / "truth.json").read_text())
        anomaly = truth.get("anomaly")
        result = reveal_pretriage(Incident(text="the training job slowed down",
                                           attachments={"telemetry": str(job / "telemetry.csv")}))
        assert result is not None
        top = max(result.priors, key=lambda k: result.priors[k]) if result.priors else ""
        old = detect.run(job / "telemetry.csv")  # what the tool ran before: self mode
        old_hosts = [h.host for h in old.hosts if h.anomalous_windows or h.static_imbalance]
        if anomaly is None:
            clean += 1
            clean_named += bool(result.hosts)
            old_named += bool(old_hosts)
        else:
            right += bool(result.hosts) and result.hosts[0] == anomaly["host"]
            old_right += bool(old_hosts) and old_hosts[0] == anomaly["host"]
        rows.append([job.name, truth["fault"], anomaly["host"] if anomaly else "", result.status,
                     ", ".join(result.hosts[:3]), top, ", ".join(old_hosts[:3])])
    anomalous = len(jobs) - clean
    return [f"## The pre-triage tool, as `aidai diagnose --telemetry FILE` runs it ({len(jobs)} jobs)", "",
            "The whole telemetry file, the normal learned from its first 20 s (start-up included: the tool does not "
            f"know when training began). Faulty host named first: **{right}/{anomalous}**; anomaly-free jobs with a "
            f"host named: {clean_named}/{clean}. The tool's self mode before (`--self`): faulty host first "
            f"{old_right}/{anomalous}, anomaly-free jobs with a host named {old_named}/{clean}. Judged on the same "
            "jobs with the truth's start of training skipped (the tables above), the faulty node is found far more "
            "often: start-up is not the workload's normal, and the tool cannot tell where it ends.", "",
            *table(["job", "anomaly", "faulty host", "status", "hosts named", "strongest prior",
                    "self mode (before): hosts named"], rows), ""]


def rows_for(results: list[dict]) -> tuple[list[list[object]], dict]:
    rows: list[list[object]] = []
    total = {"n": 0, "found": 0, "node": 0, "sub": 0}
    for kind in KINDS:
        mine = [r for r in results if r["kind"] == kind and not r["clean"] and "found" in r]
        if not mine:
            continue
        found = sum(r["found"] for r in mine)
        node = sum(bool(r.get("node_right")) for r in mine)
        sub = sum(bool(r.get("node_right") and r.get("subsystem_right")) for r in mine)
        total["n"] += len(mine)
        total["found"] += found
        total["node"] += node
        total["sub"] += sub
        metrics: dict[str, int] = {}
        for r in mine:
            for m in r.get("metrics", [])[:1]:
                metrics[m] = metrics.get(m, 0) + 1
        rows.append([kind, len(mine), f"{found}/{len(mine)}", f"{node}/{len(mine)}", f"{sub}/{len(mine)}",
                     ", ".join(f"{m} ({c})" for m, c in sorted(metrics.items(), key=lambda kv: -kv[1]))])
    return rows, total


def table(header: list[str], rows: list[list[object]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(str(c) for c in r) + " |" for r in rows]]


def section(title: str, results: list[dict], command: str) -> list[str]:
    rows, total = rows_for(results)
    clean = [r for r in results if r["clean"]]
    before = [r for r in results if "before" in r]
    flagged, judged = sum(r["flagged"] for r in clean), sum(r["judged"] for r in clean)
    n = max(total["n"], 1)
    lines = [f"## {title}", "", f"`{command}`", "",
             "| anomaly | jobs | found | node right | node right, subsystem named | strongest metric (jobs) |",
             "|---|---|---|---|---|---|", *["| " + " | ".join(str(c) for c in r) + " |" for r in rows],
             f"| **all** | {total['n']} | {total['found'] / n:.2f} | **{total['node'] / n:.2f}** | "
             f"{total['sub'] / n:.2f} | |", "",
             f"Anomaly-free jobs: {len(clean)}, {judged} judged windows, {flagged} flagged: "
             f"**{100 * flagged / max(judged, 1):.2f} %** "
             + ("(per job: " + ", ".join(f"{r['job']} {r['flagged']}/{r['judged']}" for r in clean) + ")"
                if clean else ""), "",
             f"Before the anomaly began, in the {len(before)} anomaly jobs: {sum(r['before'] for r in before)} judged "
             f"windows, {sum(r['before_flagged'] for r in before)} flagged "
             f"({100 * sum(r['before_flagged'] for r in before) / max(sum(r['before'] for r in before), 1):.2f} %).",
             ""]
    misses = [r for r in results if not r["clean"] and "found" in r and not r.get("node_right")]
    if misses:
        lines += ["Missed or on the wrong node: " + "; ".join(
            f"{r['job']} {r['kind']} on {r['host']}: " + (f"strongest on {r['node']} ({r['subsystem']}, "
                                                          f"{r['peak']:.1f} sigmas)" if r["found"] else "not found")
            for r in misses), ""]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab", type=Path, action="append", required=True)
    ap.add_argument("--seeds", required=True)
    ap.add_argument("--baseline", type=Path, help="an earlier healthy run of the same job configuration "
                                                  "(a lab job without anomaly): its telemetry.csv")
    ap.add_argument("--title", default="")
    ap.add_argument("--out", type=Path, default=ROOT / "eval" / "results" / "reveal-lab.md")
    ap.add_argument("--json", type=Path, help="also write the per-job results here")
    ap.add_argument("--persistence", type=int, default=normal.PERSISTENCE,
                    help="windows the running median spans (agent/reveal/normal.py PERSISTENCE)")
    ap.add_argument("--pretriage", action="store_true", help="also judge the pre-triage tool on the whole files")
    ap.add_argument("--analog", type=Path, help="a run of eval/lab/analog.py (the H200 run's CPU analog) to judge")
    args = ap.parse_args()
    seeds = {int(s) for s in args.seeds.split(",")}
    jobs = [j for lab in args.lab for j in jobs_of(lab, seeds)]
    command = ("python -m eval.bench_reveal_lab " + " ".join(f"--lab {p}" for p in args.lab)
               + f" --seeds {args.seeds} --persistence {args.persistence}")
    lines = [f"# Reveal on the fault lab's telemetry{': ' + args.title if args.title else ''}", "",
             f"{len(jobs)} lab telemetry jobs (3 nodes, one torchrun rank each, gloo on CPU; eval/lab/telemetry.py). "
             f"Normal learned from the first {LEARN_S:g} s of training; a window is anomalous at "
             f"{normal.Z_FLAG:g} sigmas as a running median over {args.persistence} windows "
             f"(agent/reveal/normal.py). Found: a flagged window within the anomaly or {SLACK_S:g} s after it; "
             "node right: the node with the most such windows is the faulty one.", ""]
    results = [judge(j, None, True, persistence=args.persistence) for j in jobs]
    lines += section("Learned from the job's own start", results, command)
    everything = {"start": results}
    if args.baseline:
        both = [judge(j, args.baseline, True, persistence=args.persistence) for j in jobs]
        lines += section(f"Learned from the start and an earlier healthy run ({args.baseline.parent.name})", both,
                         command + f" --baseline {args.baseline}")
        everything["start+baseline"] = both
        only = [judge(j, args.baseline, False, persistence=args.persistence) for j in jobs]
        lines += section(f"Learned from the earlier healthy run alone ({args.baseline.parent.name}; every training "
                         "window judged)", only, command + f" --baseline {args.baseline}")
        everything["baseline"] = only
    if args.pretriage:
        lines += pretriage_section(jobs)
    if args.analog:
        lines += analog_section(args.analog)
    cost = [r["collector_pct"] for r in results if r["collector_pct"] is not None]
    if cost:
        lines += [f"The lab's collector (three nodes every 0.5 s: cgroup files, /proc of each node's processes, "
                  f"one `ss -tinp`): median {statistics.median(cost):.2f} % of one core, at most {max(cost):.2f} %: "
                  "the CPU time of the job process that hosts it (the nodes' output pumps included, the `ss` "
                  "processes it starts not counted).", ""]
    seconds = [r["seconds"] for r in results]
    if seconds:
        lines += [f"Detection time per job (3 nodes, ~{statistics.median(r['judged'] for r in results) / 3:.0f} "
                  f"judged windows a node): median {statistics.median(seconds):.2f} s.", ""]
    text = "\n".join(lines)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
