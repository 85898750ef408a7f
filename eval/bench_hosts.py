"""Benchmark of "learn what the host is, never blame what could not be seen" (issue: real hosts).

1. `aidai diagnose --host local` on every incident text, on this machine as it is (the CLI, as a user runs it):
   how many resolved (should be none on a GPU-less machine), how many said why they could not check, wall time.
2. Unreachable hosts: a refused port and a silent one (a loopback listener that never answers), through the CLI.
3. Every shipped profile, healthy: every incident text diagnosed on a healthy simulated host of that profile
   (nothing may be confirmed; one diagnoser per host, its read-only checks cached across texts); faulty: a GPU
   fault on every profile, an NVLink fault where the SKU has NVLink, an IB fault where it has InfiniBand (the
   record's leaf must be the top cause). Hosts are learnt by the inventory, exactly as real ones: the simulated
   scenario's profile is not passed to the diagnosis.

    .venv/bin/python -m eval.bench_hosts --incidents ../shared/eval/dev_incidents.jsonl [--out eval/results/hosts.md]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from agent.checks.manifest import load_profiles
from eval.harness.problems import Problem, load_problems
from eval.harness.runner import RunConfig, run_benchmark

ROOT = Path(__file__).resolve().parents[1]
AIDAI = [sys.executable, "-m", "agent.cli.main"]
# the faults each profile is given, by kind, each with the label of the dev record whose text goes with it
FAULTS = {"gpu": [({"fault": "gpu.ecc_uncorrectable", "gpu": 0}, "GPU.MEMORY.UNCORRECTABLE_ECC"),
                  ({"fault": "gpu.fallen_off_bus", "gpu": 0}, "GPU.AVAILABILITY.FALLEN_OFF_BUS"),
                  ({"fault": "gpu.thermal_throttle", "gpu": 0}, "GPU.THERMAL.OVERHEATING_THROTTLE")],
          "nvlink": [({"fault": "nvlink.link_down", "gpu": 1, "links": 4},
                      "INTERCONNECT_NETWORKING.NVLINK.LINK_HARDWARE_FAULT")],
          "ib": [({"fault": "ib.port_down", "hca": "mlx5_0"}, "INTERCONNECT_NETWORKING.IB.PORT_DOWN")]}


def cli(args: list[str], data_dir: Path, text: str) -> tuple[int, str, float]:
    """One `aidai diagnose` as a user runs it: exit code, what it printed, wall seconds."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write(text)
    began = time.perf_counter()
    proc = subprocess.run([*AIDAI, "diagnose", "--file", handle.name, "--data-dir", str(data_dir), *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "COLUMNS": "200"})
    wall = time.perf_counter() - began
    os.unlink(handle.name)
    return proc.returncode, proc.stdout + proc.stderr, wall


def local_runs(problems: list[Problem], data_dir: Path) -> list[str]:
    rows = [cli(["--host", "local"], data_dir, p.incident.text) for p in problems]
    walls = [wall for _, _, wall in rows]
    said = sum("could not check local" in out.lower() for _, out, _ in rows)
    return ["| runs | resolved (exit 0) | exit 1 | said \"could not check local\" | median wall s | max wall s |",
            "|---|---|---|---|---|---|",
            f"| {len(rows)} | {sum(rc == 0 for rc, _, _ in rows)} | {sum(rc == 1 for rc, _, _ in rows)} | {said} | "
            f"{statistics.median(walls):.2f} | {max(walls):.2f} |"]


def silent_port() -> tuple[int, threading.Event]:
    """A loopback TCP port that accepts and never says a word (an SSH server that hangs)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    stop = threading.Event()

    def serve() -> None:
        held = []
        server.settimeout(0.5)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
        for conn in held:
            conn.close()
        server.close()

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1], stop


def unreachable_runs(problem: Problem, data_dir: Path) -> list[str]:
    port, stop = silent_port()
    lines = ["| host | exit code | said \"could not check\" | wall s |", "|---|---|---|---|"]
    try:
        for what, spec in (("refused", "ssh://nobody@127.0.0.1:1"), ("silent", f"ssh://nobody@127.0.0.1:{port}")):
            rc, out, wall = cli(["--host", spec], data_dir, problem.incident.text)
            lines.append(f"| {what} ({spec}) | {rc} | {'yes' if 'could not check' in out.lower() else 'no'} | "
                         f"{wall:.2f} |")
    finally:
        stop.set()
    return lines


def healthy_runs(problems: list[Problem], work: Path) -> dict[str, dict[str, Any]]:
    """Every text on a healthy host of every profile. One diagnoser per host serves all its texts: the host does
    not change and its checks are read-only, so a fresh run would get the very answers the cache holds."""
    from agent.diagnosis import Diagnoser
    from agent.knowledge.incident_db import IncidentDB
    from agent.options import DiagnoseOptions
    from agent.sim.scenario import create_scenario

    IncidentDB(data_dir=work / "data").ensure_seed()
    out: dict[str, dict[str, Any]] = {}
    for name in load_profiles():
        create_scenario(work / name, profile=name)
        diagnoser = Diagnoser(DiagnoseOptions(hosts=[f"sim:{work / name}"], data_dir=str(work / "data"),
                                              checkpoint=False, knowledge=False))
        began = time.perf_counter()
        confirmed = {}
        for p in problems:
            report = diagnoser.run(p.incident)
            if report.resolved:
                confirmed[p.id] = [c.label for c in report.root_causes]
        found = diagnoser.runner.expectations["node-1"]
        out[name] = {"runs": len(problems), "confirmed": confirmed, "profile": found.profile,
                     "checks": len(diagnoser.runner.cache), "seconds": time.perf_counter() - began}
        print(f"{name}: {len(confirmed)} resolved of {len(problems)} ({out[name]['seconds']:.0f} s)", flush=True)
    return out


def faulty_problems(problems: list[Problem]) -> list[Problem]:
    by_label = {p.label: p for p in reversed(problems)}  # the first record of each label
    out = []
    for name, spec in load_profiles().items():
        kinds = ["gpu"] + (["nvlink"] if spec.get("nvlink_links") else []) + (
            ["ib"] if spec.get("hca_count") and spec.get("link_layer", "InfiniBand") == "InfiniBand" else [])
        for kind in kinds:
            for fault, label in FAULTS[kind]:
                source = by_label[label]
                out.append(Problem({**source.record, "id": f"{name}/{kind}/{source.id}", "faults": [fault],
                                    "noise": [], "profile": name, "hosts": None}))
    return out


def profile_table(healthy: dict[str, dict[str, Any]], faulty: list[dict[str, Any]]) -> list[str]:
    right: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    errors = [f"- {r['id']}: {r['error'][:160]}" for r in faulty if r.get("error")]
    for row in faulty:
        name, kind, _ = row["id"].split("/", 2)
        right[name][kind].append(bool(row["leaf_ok"]))
    lines = ["| profile | inventory matched | healthy: texts | healthy: resolved (false causes) "
             "| GPU faults: right leaf | NVLink fault: right leaf | IB fault: right leaf |",
             "|---|---|---|---|---|---|---|"]
    for name in load_profiles():
        h, r = healthy.get(name, {}), right[name]

        def cell(kind: str, r: dict[str, list[bool]] = r) -> str:
            return f"{sum(r[kind])}/{len(r[kind])}" if r.get(kind) else "n/a (SKU has none)"

        lines.append(f"| {name} | {h.get('profile')} | {h.get('runs', 0)} | {len(h.get('confirmed', {}))} | "
                     f"{cell('gpu')} | {cell('nvlink')} | {cell('ib')} |")
    false = [f"- {name}: {i}: {labels}" for name, h in healthy.items() for i, labels in h["confirmed"].items()]
    wrong = [f"- {r['id']}: predicted {r['predicted']}" for r in faulty if not r["leaf_ok"] and not r.get("error")]
    return lines + (["", "Confirmed on a healthy host:", *false] if false else []) + (
        ["", "Wrong leaf on a faulty host:", *wrong] if wrong else []) + (["", "Errors:", *errors] if errors else [])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--incidents", default=str(ROOT.parent / "shared" / "eval" / "dev_incidents.jsonl"))
    parser.add_argument("--out", default=str(ROOT / "eval" / "results" / "hosts.md"))
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--skip-profiles", action="store_true")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    problems = load_problems(args.incidents)
    out = ["# Real hosts: inventory first, never blame what could not be seen", "",
           f"`python -m eval.bench_hosts --incidents {args.incidents}` on {time.strftime('%Y-%m-%d')}, "
           f"{len(problems)} incident texts.", ""]
    with tempfile.TemporaryDirectory(prefix="aidai-bench-hosts-") as tmp:
        if not args.skip_local:
            out += ["## `aidai diagnose --host local` on this machine", "", *local_runs(problems, Path(tmp)), ""]
            out += ["## Unreachable hosts", "", *unreachable_runs(problems[0], Path(tmp)), ""]
            print("\n".join(out), flush=True)
        if not args.skip_profiles:
            began = time.perf_counter()
            healthy = healthy_runs(problems, Path(tmp) / "healthy")
            result = run_benchmark(RunConfig(workers=args.workers), faulty_problems(problems),
                                   on_row=lambda r: print(f"{r['id']} -> {r['predicted']} ({r['wall_s']:.1f}s)",
                                                          flush=True))
            out += ["## Every profile: healthy hosts and faulty ones", "",
                    "Healthy: every incident text on a healthy simulated host of the profile (seed DB as history); "
                    "faulty: the first dev record of the leaf, its fault on a host of that profile (`aidai eval`'s "
                    "harness). The inventory picks the profile; nothing passes it. "
                    f"{time.perf_counter() - began:.0f} s.",
                    "", *profile_table(healthy, result.rows), ""]
    Path(args.out).write_text("\n".join(out))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
