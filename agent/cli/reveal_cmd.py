"""`aidai reveal collect|detect`: hardware telemetry collection and Reveal-style anomaly detection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(help="Collect host telemetry and detect anomalous windows in it (Reveal).", no_args_is_help=True)
console = Console(emoji=False)
err = Console(stderr=True, emoji=False)


def _fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(2)


@app.command("collect")
def collect_cmd(
    out: Annotated[Path, typer.Option("--out", help="Output file (.parquet, or .csv).")],
    interval: Annotated[float, typer.Option(help="Seconds between samples.")] = 0.5,
    duration: Annotated[float, typer.Option(help="Seconds to collect.")] = 60.0,
    no_gpu: Annotated[bool, typer.Option("--no-gpu", help="Skip nvidia-smi.")] = False,
    no_perf: Annotated[bool, typer.Option("--no-perf", help="Skip perf stat.")] = False,
) -> None:
    """Sample procfs/sysfs (and nvidia-smi, perf when present) and write one row per interval."""
    if interval <= 0 or duration <= 0 or duration < interval:
        _fail(f"need 0 < interval <= duration (got interval {interval}, duration {duration})")
    if not out.parent.exists():
        _fail(f"{out.parent}: no such directory")
    from agent.reveal import collect as collector  # pandas: only when collecting

    try:
        result = collector.collect(interval, duration, use_gpu=not no_gpu, use_perf=not no_perf)
    except RuntimeError as exc:
        _fail(str(exc))
    collector.write(result.frame, out)
    console.print(f"wrote {len(result.frame)} samples x {result.frame.shape[1] - 2} metrics to {out}")
    console.print(f"sources: {', '.join(result.sources)}")
    for source, why in result.missing.items():
        console.print(f"[yellow]skipped {source}[/]: {why}")
    console.print(f"collector overhead: {result.cpu_s:.3f} CPU s over {result.wall_s:.1f} s = "
                  f"{result.overhead_pct_of_core:.2f} % of one core, {result.overhead_pct_of_host:.2f} % of the "
                  f"host's {result.cpus} CPUs")


@app.command("detect")
def detect_cmd(
    file: Annotated[Path, typer.Argument(help="CSV or Parquet: timestamp, optional host, one column per metric.")],
    hosts: Annotated[list[str] | None, typer.Option("--hosts", help="Only these hosts (repeatable).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    window: Annotated[float, typer.Option(help="Window length, s.")] = 3.0,
    stride: Annotated[float, typer.Option(help="Window stride, s.")] = 1.0,
    min_votes: Annotated[int, typer.Option(help="Self mode: detectors that must agree (1-3).")] = 2,
    baseline: Annotated[list[Path] | None, typer.Option(
        "--baseline", help="An earlier healthy run of the same job to learn the normal from (repeatable).")] = None,
    learn_start: Annotated[bool, typer.Option(
        "--learn-start/--no-learn-start", help="Learn the normal from the file's own start too.")] = True,
    learn: Annotated[float, typer.Option(help="Seconds of the file's start to learn the normal from.")] = 20.0,
    skip: Annotated[float, typer.Option(help="Seconds to skip before learning (warm-up); not judged.")] = 0.0,
    self_mode: Annotated[bool, typer.Option(
        "--self", help="The paper's self mode: the file's strongest 1 % of windows against the rest.")] = False,
) -> None:
    """Detect anomalous windows against a learned normal (the file's own start, earlier healthy runs, or both),
    name the host, the subsystems and the metrics that moved. --self: Reveal's original self-referential mode."""
    if not 1 <= min_votes <= 3:
        _fail(f"--min-votes must be 1, 2 or 3 (got {min_votes})")
    if window <= 0 or stride <= 0:
        _fail("--window and --stride must be positive")
    if not self_mode:
        _detect_normal(file, hosts, as_json, window, stride, baseline or [], learn_start, learn, skip)
        return
    from agent.reveal import detect as detector  # pandas, scikit-learn: only when detecting
    from agent.reveal.frame import FrameError

    try:
        report = detector.run(file, hosts or None, window, stride, min_votes)
    except (FrameError, ValueError) as exc:
        _fail(str(exc))
    if as_json:
        data = report.model_dump(mode="json")
        for w in data["windows"]:
            for s in w["signals"]:
                s.pop("z"), s.pop("subsystem")
        print(json.dumps(data, indent=1))
        return
    console.print(f"{len(report.windows)} of {report.total_windows} windows anomalous "
                  f"({100 * report.anomalous_rate:.2f} %), {len(report.pruned)} metric(s) pruned as redundant, "
                  f"{report.duration_s:.2f} s")
    if report.anchored:
        console.print("error counters judged against their traffic: "
                      + ", ".join(f"{c} ~ {t}" for c, t in report.anchored.items()))
    table = Table(title="hosts")
    for col in ("host", "anomalous / windows", "subsystems", "imbalance windows", "static imbalance"):
        table.add_column(col)
    for h in report.hosts:
        table.add_row(h.host, f"{h.anomalous_windows} / {h.windows}",
                      ", ".join(f"{k} {v}" for k, v in h.subsystems.items()), str(h.imbalance_windows),
                      ", ".join(str(s["metric"]) for s in h.static_imbalance))
    console.print(table)
    if report.windows:
        wt = Table(title="anomalous windows (strongest 20)")
        for col in ("start", "host", "score", "subsystems", "signals (metric:feature detector)"):
            wt.add_column(col)
        for w in sorted(report.windows, key=lambda w: -w.score)[:20]:
            wt.add_row(f"{w.start:.0f}", w.host, f"{w.score:.2f}", ", ".join(w.subsystems),
                       "; ".join(f"{s.metric}:{s.feature} {s.detector}" for s in w.signals[:3]))
        console.print(wt)
    if report.skipped_columns:
        console.print(f"skipped non-numeric columns: {', '.join(report.skipped_columns)}")


def _detect_normal(file: Path, hosts: list[str] | None, as_json: bool, window: float, stride: float,
                   baseline: list[Path], learn_start: bool, learn: float, skip: float) -> None:
    if learn <= 0 or skip < 0:
        _fail("--learn must be positive and --skip not negative")
    from agent.reveal import normal  # pandas: only when detecting
    from agent.reveal.frame import FrameError

    try:
        report = normal.run(file, list(baseline), learn_start=learn_start, learn_s=learn, skip_s=skip,
                            window_s=window, stride_s=stride, hosts=hosts or None)
    except (FrameError, ValueError) as exc:
        _fail(str(exc))
    if as_json:
        print(json.dumps(report.model_dump(mode="json"), indent=1))
        return
    learned = f"the first {report.learn_s:g} s after {report.skip_s:g} s" if "start" in report.mode else ""
    if report.baseline_files:
        learned += (" and " if learned else "") + ", ".join(report.baseline_files)
    console.print("times in seconds from the file's first sample")
    console.print(f"normal learned from {learned}; {len(report.windows)} of {report.judged_windows} judged windows "
                  f"anomalous ({100 * report.anomalous_rate:.2f} %), {len(report.metrics)} metrics"
                  + (", deviations relative to the peers" if report.peers else "") + f", {report.duration_s:.2f} s")
    table = Table(title="hosts")
    for col in ("host", "anomalous / judged", "peak sigmas", "learned from"):
        table.add_column(col)
    for h in report.hosts:
        table.add_row(h.host, f"{h.anomalous_windows} / {h.judged_windows}", f"{h.peak:.1f}", h.learned_from)
    console.print(table)
    if report.events:
        et = Table(title="anomalies (strongest first)")
        for col in ("host", "from s", "to s", "windows", "peak", "subsystems", "metrics that moved"):
            et.add_column(col)
        for e in report.events[:20]:
            et.add_row(e.host, f"{e.start - report.origin:.0f}", f"{e.end - report.origin:.0f}", str(e.windows),
                       f"{e.peak:.1f}",
                       ", ".join(e.subsystems), ", ".join(e.metrics))
        console.print(et)
