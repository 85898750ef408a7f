"""The verification scripts on a corpus of real tool outputs (eval/corpus/cases.yaml).

Each case serves one real fixture as the stdout of the tool a check reads (or as a file or directory under a
fake sysroot), with every other tool answering "not found", runs the check and compares its verdict with the
one the fixture's source says it shows (never one taken from our own scripts).

Fixture paths in cases.yaml:
  tests/fixtures/...       committed with the project;
  shared:gpu_checks/NAME   ../shared/fixtures/real/gpu_checks/NAME, used when present (not committed: licence);
  external:NAME            known real outputs that are not copied here (counted as absent).

    .venv/bin/python -m eval.corpus.run [--markdown eval/results/corpus.md] [--no-shared] [--jobs 8]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent.checks.manifest import profile
from agent.paths import SCRIPTS_DIR
from tests.conftest import FakeTools

ROOT = Path(__file__).resolve().parents[2]
CASES_FILE = Path(__file__).with_name("cases.yaml")
SHARED_DIR = ROOT.parent / "shared" / "fixtures" / "real"

# Tools a check may fall back to; shadowed so the benchmark machine's own tools never leak in.
SHADOWED = ("nvidia-smi", "lspci", "dcgmi", "nvbandwidth", "dmesg", "lsmod", "modinfo", "systemctl",
            "nv-fabricmanager", "ibstat", "ibstatus", "ip", "ibv_devinfo", "ib_write_bw", "all_reduce_perf", "mpirun")


@dataclass
class Case:
    fixture: str
    check: str
    expected: str | list[str]    # the verdict, or the verdicts that are all right ("not FAIL": [PASS, WARN])
    family: str = ""             # tool family for the per-tool table ("kernel log", "nvidia-smi -q", ...)
    tool: str = ""               # served as this tool's stdout
    file: str = ""               # or as this file (or directory) under the sysroot
    header: str = ""             # the lines an excerpt cut off above it, restored so the tool output is whole
    rc: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    gen: str = ""
    expected_from: str = ""
    url: str = ""

    @property
    def id(self) -> str:
        return f"{self.fixture.split('/')[-1].split(':')[-1]}::{self.check}"

    @property
    def accepted(self) -> list[str]:
        return [self.expected] if isinstance(self.expected, str) else list(self.expected)

    @property
    def expected_text(self) -> str:
        return "|".join(self.accepted)

    @property
    def committed(self) -> bool:
        return self.fixture.startswith("tests/")


def load_cases(path: Path = CASES_FILE) -> list[Case]:
    doc = yaml.safe_load(path.read_text())
    known = set(Case.__dataclass_fields__)
    cases = []
    for entry in doc["cases"]:
        unknown = set(entry) - known
        if unknown:
            raise ValueError(f"{entry.get('fixture')}: unknown keys {sorted(unknown)}")
        cases.append(Case(**entry))
    return cases


def resolve(case: Case, shared: Path | None = SHARED_DIR) -> Path | None:
    """Where the fixture lies on this machine, or None when it is absent (external, or ../shared missing)."""
    if case.fixture.startswith("external:"):
        return None
    if case.fixture.startswith("shared:"):
        if shared is None:
            return None
        path = shared / case.fixture.split(":", 1)[1]
    else:
        path = ROOT / case.fixture
    return path if path.exists() else None


def check_params(case: Case) -> dict[str, Any]:
    params = {"profile": "H100-SXM-8", "host": "node-1", "sample_s": 0.05, "server_wait_s": 0.05, **case.params}
    if isinstance(params["profile"], str):
        params["profile"] = profile(params["profile"])
    return params


def run_case(case: Case, fixture: Path, work: Path) -> str:
    """The verdict the check gives on the fixture, or 'error rc=N' when it printed no verdict."""
    fake = FakeTools(work)
    for name in SHADOWED:
        fake.tool(name, stderr=f"sh: 1: {name}: not found\n", rc=127)
    fake.tool("journalctl", stderr="No journal files were found.\n", rc=1)
    if fixture.is_dir():
        shutil.copytree(fixture, fake.sysroot / case.file.lstrip("/"), dirs_exist_ok=True)
    else:
        text = case.header + fixture.read_text(errors="replace")
        if case.tool:
            fake.tool(case.tool, text, rc=case.rc)
        if case.file:
            fake.file(case.file, text)
    if case.check == "rdma_perftest":
        # ib_write_bw needs a local HCA to bind to: one HDR port in the sysfs layout
        base = "/sys/class/infiniband/mlx5_0"
        for name, value in (("ports/1/state", "4: ACTIVE"), ("ports/1/phys_state", "5: LinkUp"),
                            ("ports/1/rate", "200 Gb/sec (4X HDR)"), ("ports/1/link_layer", "InfiniBand"),
                            ("hca_type", "MT4123"), ("device/net/ib0/operstate", "up")):
            fake.file(f"{base}/{name}", value + "\n")
    proc = subprocess.run([sys.executable, "-S", str(SCRIPTS_DIR / f"{case.check}.py")],
                          input=json.dumps(check_params(case)), capture_output=True, text=True, env=fake.env(),
                          timeout=120)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        return f"error rc={proc.returncode}"
    return str(json.loads(lines[-1])["verdict"])


@dataclass
class Row:
    case: Case
    got: str | None  # None: fixture absent

    @property
    def agree(self) -> bool:
        return self.got in self.case.accepted


def run_cases(cases: list[Case], shared: Path | None = SHARED_DIR, jobs: int = 8) -> list[Row]:
    """One Row per case, in order; absent fixtures get got=None. Cases run in parallel (each is a subprocess)."""
    with tempfile.TemporaryDirectory(prefix="aidai-corpus-") as tmp:
        def one(k: int) -> Row:
            case = cases[k]
            path = resolve(case, shared)
            return Row(case, None if path is None else run_case(case, path, Path(tmp) / str(k)))

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            return list(pool.map(one, range(len(cases))))


def report(rows: list[Row]) -> list[str]:
    """Markdown: per-tool agreement, totals, false FAILs on healthy files, and every disagreement."""
    ran = [r for r in rows if r.got is not None]
    absent = [r for r in rows if r.got is None]
    by_family: dict[str, list[Row]] = defaultdict(list)
    for r in ran:
        by_family[r.case.family or r.case.check].append(r)
    lines = ["| tool family | agree / total | checks |", "|---|---|---|"]
    for family, group in sorted(by_family.items()):
        checks = ", ".join(sorted({r.case.check for r in group}))
        lines.append(f"| {family} | {sum(r.agree for r in group)} / {len(group)} | {checks} |")
    agree = sum(r.agree for r in ran)
    healthy = [r for r in ran if "PASS" in r.case.accepted]
    false_fail = [r for r in healthy if r.got == "FAIL"]
    lines = [f"Cases agreeing with the source's verdict: **{agree}/{len(ran)}** "
             f"({len(absent)} absent: {sum(r.case.fixture.startswith('external:') for r in absent)} external, "
             f"{sum(r.case.fixture.startswith('shared:') for r in absent)} in ../shared not present)", "",
             f"False FAILs on healthy outputs (expected PASS, got FAIL): **{len(false_fail)}/{len(healthy)}**", "",
             *lines, ""]
    bad = [r for r in ran if not r.agree]
    lines += ["Disagreements:", ""] if bad else ["No disagreements."]
    if bad:
        lines += ["| fixture | check | tool family | expected | got | expected because |", "|---|---|---|---|---|---|"]
        for r in bad:
            lines.append(f"| {r.case.fixture} | {r.case.check} | {r.case.family} | {r.case.expected_text} | {r.got} "
                         f"| {r.case.expected_from} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=Path, default=CASES_FILE)
    parser.add_argument("--shared", type=Path, default=SHARED_DIR, help="root of ../shared/fixtures/real")
    parser.add_argument("--no-shared", action="store_true", help="run only the committed fixtures")
    parser.add_argument("--markdown", type=Path, help="also write the report as a markdown file")
    parser.add_argument("--jobs", type=int, default=8)
    args = parser.parse_args()
    rows = run_cases(load_cases(args.cases), None if args.no_shared else args.shared, args.jobs)
    text = "\n".join(["# Verification scripts on real tool outputs", "", *report(rows)]) + "\n"
    print(text)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
