"""Benchmark of Reveal (telemetry anomaly detection) and preflight (known-bad environment combinations).

Background: the real anomaly-free Exathlon Spark node metrics (tests/fixtures/exathlon, Apache-2.0, 4 nodes,
1 s). Tables: false-positive window rate on clean data, recall and attribution per injected anomaly kind,
detection time, collector overhead, preflight on simulated hosts. Writes eval/results/reveal.md.

    .venv/bin/python -m eval.bench_reveal [--trials 50] [--collector-s 60] [--out eval/results/reveal.md]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from agent.reveal import collect, detect, frame, inject

ROOT = Path(__file__).resolve().parents[1]
TRACES = sorted((ROOT / "tests" / "fixtures" / "exathlon").glob("*_node_metrics.csv.gz"))
SEGMENT_S = 600
REFERENCE_MARGIN_S = 30
PREFLIGHT_CASES = ["fw.nccl_regression", "driver.cuda_too_old", "cuda.arch_unsupported", "cuda.host_vm_mismatch",
                   "netstack.ofed_hpcx_mismatch", "driver.known_bug", "driver.gsp_bug", "container.toolkit_regression",
                   "fw.deepspeed_bug", "fw.accelerate_bug", "fw.nccl_version_skew"]


def table(header: list[str], rows: list[list[object]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(str(c) for c in r) + " |" for r in rows]]


def run_mode(df: pd.DataFrame, ref: pd.DataFrame, mode: str) -> detect.RevealReport:
    return detect.run(frame.from_frame(df), reference=frame.from_frame(ref) if mode == "reference" else None)


def clean_fp(backgrounds: dict[str, pd.DataFrame], rng: np.random.Generator, segments: int,
             modes: list[str]) -> list[str]:
    rows = []
    for name, bg in backgrounds.items():
        if "self" in modes:
            report = detect.run(frame.from_frame(bg))
            rows.append([f"{name} (whole, {bg.host.nunique()} hosts)", "self", report.total_windows,
                         len(report.windows), f"{100 * report.anomalous_rate:.2f} %", f"{report.duration_s:.2f}"])
        flagged = {m: 0 for m in modes}
        total = {m: 0 for m in modes}
        for _ in range(segments):
            seg, ref = _segment(bg, rng)
            for mode in modes:
                r = run_mode(seg, ref, mode)
                flagged[mode], total[mode] = flagged[mode] + len(r.windows), total[mode] + r.total_windows
        for mode in modes:
            rows.append([f"{name} ({segments} random {SEGMENT_S} s segments)", mode, total[mode], flagged[mode],
                         f"{100 * flagged[mode] / total[mode]:.2f} %", ""])
    return table(["clean run", "mode", "windows", "anomalous", "FP window rate", "detect s"], rows)


def _segment(bg: pd.DataFrame, rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A random segment and its held-out reference: the rest of the same clean run, less a margin either side so
    that no window of the reference overlaps the segment."""
    start = rng.uniform(bg.timestamp.min(), bg.timestamp.max() - SEGMENT_S)
    inside = (bg.timestamp >= start) & (bg.timestamp < start + SEGMENT_S)
    margin = (bg.timestamp >= start - REFERENCE_MARGIN_S) & (bg.timestamp < start + SEGMENT_S + REFERENCE_MARGIN_S)
    return bg[inside], bg[~margin]


def injected(backgrounds: dict[str, pd.DataFrame], seed: int, trials: int, mode: str) -> list[str]:
    """Trial t of every kind (and mode) uses the same segment, host, start and duration: the kinds are compared
    on the same backgrounds, and skipping a section or a kind changes nothing else."""
    rows, outside_rates = [], []
    names = list(backgrounds)
    for kind in inject.KINDS:
        hits = correct = 0
        peer_share = []  # per detected trial, the share of its windows flagged as off the host's peers
        for trial in range(trials):
            rng = np.random.default_rng([seed, 2, trial])
            seg, ref = _segment(backgrounds[names[trial % len(names)]], rng)
            host = str(rng.choice(sorted(seg.host.unique())))
            duration = rng.uniform(30, 60)
            start = seg.timestamp.min() + rng.uniform(100, SEGMENT_S - 100 - duration)
            df, inj = inject.inject(seg, kind, host, start, duration, rng)
            report = run_mode(df, ref, mode)
            inside = [w for w in report.windows if w.host == host and w.end > inj.start and w.start < inj.end]
            outside = [w for w in report.windows
                       if not (w.host == host and w.end > inj.start - 3 and w.start < inj.end + 3)]
            outside_rates.append(len(outside) / report.total_windows)
            if not inside:
                continue
            hits += 1
            peer_share.append(sum(w.imbalance for w in inside) / len(inside))
            if inj.subsystem == "imbalance":
                correct += sum(w.imbalance for w in inside) * 2 >= len(inside)
            else:
                top = Counter(w.subsystems[0] for w in inside if w.subsystems).most_common(1)
                correct += bool(top) and top[0][0] == inj.subsystem
        rows.append([kind, inject.KINDS[kind][1], trials, f"{hits / trials:.2f}",
                     f"{correct / hits:.2f}" if hits else "n/a",
                     f"{statistics.mean(peer_share):.2f}" if peer_share else "n/a"])
    lines = table(["anomaly kind", "expected attribution", "trials", "recall", "attribution accuracy",
                   "windows off their peers"], rows)
    lines.append("")
    lines.append(f"FP window rate outside the injected interval during these trials: mean "
                 f"{100 * statistics.mean(outside_rates):.2f} %, max {100 * max(outside_rates):.2f} %")
    return lines


def speed(backgrounds: dict[str, pd.DataFrame]) -> list[str]:
    bg = next(iter(backgrounds.values()))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for hosts in (1, 4):
            names = sorted(bg.host.unique())[:hosts]
            part = bg[bg.host.isin(names) & (bg.timestamp < bg.timestamp.min() + 60)]
            path = Path(tmp) / f"sixty_{hosts}.parquet"
            part.to_parquet(path, index=False)
            times = []
            for _ in range(5):
                began = time.perf_counter()
                detect.run(path)
                times.append(time.perf_counter() - began)
            rows.append([f"60 s, 1 s samples, {hosts} host(s), Parquet (load included)", len(part),
                         f"{statistics.median(times):.3f}", f"{max(times):.3f}"])
    whole = pd.concat(backgrounds.values())
    began = time.perf_counter()
    detect.run(frame.from_frame(next(iter(backgrounds.values()))))
    rows.append([f"whole trace, 4 hosts, {len(whole) // 2} rows (in memory)", len(whole) // 2,
                 f"{time.perf_counter() - began:.3f}", ""])
    return table(["input", "rows", "median s (5 runs)", "max s"], rows)


def collector(duration: float) -> list[str]:
    rows = []
    for interval in (1.0, 0.1):
        span = duration if interval == 1.0 else min(duration, 20.0)
        result = collect.collect(interval, span)
        rows.append([f"{interval:g}", f"{span:g}", len(result.frame), result.frame.shape[1] - 2,
                     f"{result.overhead_pct_of_core:.2f} %", f"{result.overhead_pct_of_host:.2f} %",
                     ", ".join(f"{k} ({v})" for k, v in result.missing.items()) or "none"])
    return table(["interval s", "duration s", "samples", "metrics", "CPU % of one core", "CPU % of host",
                  "skipped sources"], rows)


def preflight() -> list[str]:
    from agent.preflight import run
    from agent.sim.faults import resolve
    from agent.sim.scenario import create_scenario

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, fault in enumerate(["(clean)", *PREFLIGHT_CASES]):
            faults = [] if fault == "(clean)" else [{"fault": fault}]
            hosts = ["node-1", "node-2"] if fault.endswith("skew") else None
            scenario = create_scenario(Path(tmp) / f"s{i}", faults, hosts=hosts)
            report = run.run([f"sim:{scenario.root}"], salt=b"bench")
            expected = resolve(faults[0]).definition.leaf if faults else "(nothing)"
            labels = sorted({f.label for f in report.findings})
            ok = (not labels) if not faults else expected in labels
            rows.append([fault, expected, ", ".join(f"{f.id} {f.severity}" for f in report.findings) or "none",
                         "yes" if ok else "NO", f"{report.duration_s:.2f}"])
    return table(["simulated fault", "expected label", "preflight findings", "flagged as expected", "s"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50, help="injected anomalies per kind")
    parser.add_argument("--segments", type=int, default=10, help="clean 600 s segments per trace")
    parser.add_argument("--collector-s", type=float, default=60.0, help="collector run length at 1 s interval")
    parser.add_argument("--seed", type=int, default=20240601, help="segments, hosts and injections")
    parser.add_argument("--mode", choices=["reference", "self", "both"], default="self",
                        help="reference: fitted on the rest of the clean run; self: the file's own strongest 1 %%")
    parser.add_argument("--skip", nargs="*", default=[],
                        choices=["false-positives", "injected", "speed", "collector", "preflight"])
    parser.add_argument("--out", type=Path, default=ROOT / "eval" / "results" / "reveal.md")
    args = parser.parse_args()
    if not TRACES:
        raise SystemExit("no Exathlon traces in tests/fixtures/exathlon")
    # the collector's loss counters (absent from nmon) with a healthy link's background, so that the network
    # injection can raise them as a real lossy link would
    loss = np.random.default_rng([args.seed, 0])
    backgrounds = {p.name.split("_node")[0]: inject.with_loss_counters(inject.exathlon_long(str(p)), loss)
                   for p in TRACES}
    modes = ["reference", "self"] if args.mode == "both" else [args.mode]
    sections = [
        ("False positives on clean Exathlon runs (2-of-3 detector vote)",
         lambda: clean_fp(backgrounds, np.random.default_rng([args.seed, 1]), args.segments, modes)),
        *[(f"Injected anomalies, {mode} mode ({SEGMENT_S} s segments of 4 hosts, one anomaly of 30-60 s on one "
           f"host)", (lambda m=mode: injected(backgrounds, args.seed, args.trials, m))) for mode in modes],
        ("Detection time", lambda: speed(backgrounds)),
        ("Collector overhead (procfs/sysfs; nvidia-smi/perf when present)", lambda: collector(args.collector_s)),
        ("Preflight on simulated hosts", preflight),
    ]
    skipped = {"false-positives": "False positives", "injected": "Injected anomalies", "speed": "Detection time",
               "collector": "Collector overhead", "preflight": "Preflight"}
    sections = [(t, f) for t, f in sections if not any(t.startswith(skipped[k]) for k in args.skip)]
    out = ["# Reveal and preflight benchmark", "", "`.venv/bin/python -m eval.bench_reveal` (`make bench-reveal`)", ""]
    for title, section in sections:
        lines = section()
        out += [f"## {title}", "", *lines, ""]
        print(f"\n## {title}\n" + "\n".join(lines), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(out))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
