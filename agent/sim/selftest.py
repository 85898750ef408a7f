"""Simulator self-test: which passive checks see each fault, and that healthy hosts and noise stay clean.

Shared by the acceptance test (tests/test_fault_matrix.py) and the benchmark (eval/bench_checks.py).
"""

from __future__ import annotations

import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.checks.runner import CheckRunner
from agent.executors.sim import sim_executors
from agent.models import CheckResult, Verdict
from agent.paths import ROOT
from agent.sim.faults import REGISTRY
from agent.sim.scenario import create_scenario

FAULTS_DOC = ROOT / "docs" / "FAULTS.md"


def documented_ids() -> dict[str, str | None]:
    """Fault id -> leaf, and noise id -> None, as FAULTS.md lists them."""
    text = FAULTS_DOC.read_text()
    ids: dict[str, str | None] = {}
    for match in re.finditer(r"^\| ([a-z0-9_]+\.[a-z0-9_]+) \|.*\| ([A-Z_]+\.[A-Z_]+\.[A-Z0-9_]+) \|$", text, re.M):
        ids[match.group(1)] = match.group(2)
    for match in re.finditer(r"`(noise\.[a-z0-9_]+)`", text):
        ids[match.group(1)] = None
    return ids


def ancestors(label: str) -> set[str]:
    parts = label.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


@dataclass
class MatrixRow:
    scenario: str
    leaf: str | None
    results: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0

    def flagged(self, verdict: Verdict) -> list[CheckResult]:
        return [r for r in self.results if r.verdict == verdict]

    def on_leaf(self, manifest_nodes: dict[str, list[str]]) -> list[CheckResult]:
        """FAIL/WARN results of checks attached to the leaf or one of its parents."""
        if self.leaf is None:
            return []
        wanted = ancestors(self.leaf)
        return [r for r in self.results if r.verdict in (Verdict.FAIL, Verdict.WARN)
                and wanted & set(manifest_nodes[r.check])]


def run_scenario(name: str, faults: list[dict[str, Any]], noise: list[dict[str, Any]], profile: str = "H100-SXM-8",
                 hosts: list[str] | None = None, workers: int = 4) -> MatrixRow:
    """Create the scenario in a temp dir, run every passive check on every host."""
    leaf = REGISTRY[faults[0]["fault"]].leaf if faults else None
    with tempfile.TemporaryDirectory(prefix="aidai-selftest-") as tmp:
        start = time.monotonic()
        create_scenario(Path(tmp) / "s", faults, noise, profile, hosts)
        runner = CheckRunner(sim_executors(Path(tmp) / "s"), workers=workers)
        results = runner.run(runner.passive_ids())
        return MatrixRow(name, leaf, results, time.monotonic() - start)


def fault_scenario(fid: str) -> tuple[list[dict[str, Any]], list[str] | None]:
    """The one-fault scenario for `fid`: scenario-scoped faults get the hosts they need."""
    definition = REGISTRY[fid]
    hosts = [f"node-{i + 1}" for i in range(max(definition.min_hosts, 1))]
    return [{"fault": fid}], hosts
