"""Cold CLI diagnosis: `aidai diagnose TEXT --host sim:DIR --json` in fresh processes, as a customer runs it.

One simulated host with an uncorrectable ECC fault; the store (seed incident DB + KB index), the cached ONNX
model and the taxonomy's vectors are built by a warm-up run that is not counted. Each counted run is a new
Python process running the program as the `aidai` console script does (`python -m agent.cli.main`); wall time,
CPU time (user + system, the process and its children: the simulated host's tools) and peak RSS come from
`os.wait4` on that process. Medians over `--runs`. The machine's 1-minute load average is read before each run
and reported beside the times: on a shared machine, wall time is only meaningful with it (CPU time much less
affected), so compare runs at a low load.

`--before-commit REV` also measures the code of REV (a temporary `git worktree`, run with this venv's Python via
PYTHONPATH), alternating a before run and an after run so both see the same machine load. The table goes to
`--out` (markdown).

    python -m eval.bench_cold --runs 5 --before-commit 83d19f7 --out eval/results/cold.md
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = ("Rank 3 crashed with `RuntimeError: CUDA error: uncorrectable ECC error encountered`. dmesg: `NVRM: Xid "
        "(PCI:0000:5d:00): 48, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer`.")
FAULT = "gpu.ecc_uncorrectable"


@dataclass
class Variant:
    name: str
    pythonpath: str | None  # None: the installed (current) code
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)
    codes: list[int] = field(default_factory=list)
    load: list[float] = field(default_factory=list)  # 1-minute load average before each run
    lines: list[str] = field(default_factory=list)  # one per run, as printed


def run_once(variant: Variant, host: Path, data_dir: Path, model_cache: Path) -> tuple[float, float, float, int]:
    """One fresh process: (wall s, CPU s, peak RSS MB, exit code). Bytecode is cached (as in an installed
    package) under the bench's own directory, never in the tree, whatever PYTHONDONTWRITEBYTECODE says here."""
    env = dict(os.environ, AIDAI_DATA_DIR=str(data_dir), AIDAI_MODEL_CACHE=str(model_cache), PYTHONHASHSEED="0",
               PYTHONPYCACHEPREFIX=str(data_dir.parent / "pycache"))
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if variant.pythonpath:
        env["PYTHONPATH"] = variant.pythonpath
    cmd = [sys.executable, "-m", "agent.cli.main", "diagnose", TEXT, "--host", f"sim:{host}", "--json"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=variant.pythonpath or ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode


def table(variants: list[Variant], runs: int) -> str:
    lines = ["| code | runs | wall median (min-max) | CPU median (min-max) | peak RSS median (min-max) | load avg "
             "(min-max) | exit codes |", "|---|---|---|---|---|---|---|"]
    for v in variants:
        lines.append(f"| {v.name} | {len(v.wall)} | {statistics.median(v.wall):.2f} s ({min(v.wall):.2f}-"
                     f"{max(v.wall):.2f}) | {statistics.median(v.cpu):.2f} s ({min(v.cpu):.2f}-{max(v.cpu):.2f}) | "
                     f"{statistics.median(v.rss_mb):.0f} MB ({min(v.rss_mb):.0f}-{max(v.rss_mb):.0f}) | "
                     f"{statistics.median(v.load):.1f} ({min(v.load):.1f}-{max(v.load):.1f}) | "
                     f"{','.join(str(c) for c in sorted(set(v.codes)))} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="counted runs per code version (after one warm-up)")
    parser.add_argument("--before-commit", help="also measure this git revision (temporary worktree)")
    parser.add_argument("--before-dir", help="also measure the code in this directory (e.g. a worktree)")
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="aidai-cold-") as tmp_name:
        tmp = Path(tmp_name)
        variants: list[Variant] = []
        worktree: Path | None = None
        if args.before_commit:
            worktree = tmp / "before"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree),
                            args.before_commit], check=True, capture_output=True)
            variants.append(Variant(f"before ({args.before_commit})", str(worktree)))
        elif args.before_dir:
            variants.append(Variant(f"before ({args.before_dir})", str(Path(args.before_dir).resolve())))
        variants.append(Variant("after (this tree)", None))
        try:
            host = tmp / "host"
            subprocess.run([sys.executable, "-c", "from agent.cli.main import app; app()", "sim", "create", str(host),
                            "--fault", FAULT], check=True, capture_output=True, cwd=ROOT)
            data_dir, model_cache = tmp / "data", tmp / "models"
            for v in variants:  # warm-up: builds the store and the ONNX model once; not counted
                wall, _, _, code = run_once(v, host, data_dir, model_cache)
                print(f"warm-up {v.name}: {wall:.1f} s, exit {code}", file=sys.stderr)
            for i in range(args.runs):
                for v in variants:
                    load = os.getloadavg()[0]
                    wall, cpu, rss, code = run_once(v, host, data_dir, model_cache)
                    v.wall.append(wall)
                    v.cpu.append(cpu)
                    v.rss_mb.append(rss)
                    v.codes.append(code)
                    v.load.append(load)
                    v.lines.append(f"run {i + 1} {v.name}: wall {wall:.2f} s, CPU {cpu:.2f} s, RSS {rss:.0f} MB, "
                                   f"exit {code}, load average {load:.1f}")
                    print(v.lines[-1], file=sys.stderr)
        finally:
            if worktree is not None:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)],
                               capture_output=True)
    result = table(variants, args.runs)
    print(result)
    if args.out:
        load = os.getloadavg()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            "# Cold CLI diagnosis\n\n"
            f"`python -m eval.bench_cold --runs {args.runs}"
            f"{f' --before-commit {args.before_commit}' if args.before_commit else ''}`: "
            f"`aidai diagnose TEXT --host sim:DIR --json` (one simulated host, fault {FAULT}) in a fresh process "
            f"per run (`python -m agent.cli.main`, what the console script runs), after one uncounted warm-up per "
            f"code version (it builds the store, the ONNX model, the taxonomy vectors and the bytecode cache); "
            f"before and after runs alternate. CPU = user + system time of the process and its children (the "
            f"simulated host's tools run as child processes), peak RSS = the CLI process's max resident set "
            f"(os.wait4), load avg = the machine's 1-minute load average before each run (wall times are only "
            f"comparable at similar, low loads). {platform.machine()}, {os.cpu_count()} cores, load average at "
            f"the end {load[0]:.1f}.\n\n{result}\n\nRuns, in the order they ran:\n\n"
            + "".join(f"- {line}\n" for line in sorted((ln for v in variants for ln in v.lines),
                                                        key=lambda ln: int(ln.split()[1]))), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
