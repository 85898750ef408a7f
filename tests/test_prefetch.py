"""The runner's prefetch: the inventory and passive checks started in the background (while a cold CLI imports its
graph library) are taken by the next `run` exactly as if it had started them, only with the same params, never
from an earlier run; checks that need approval, and runs that a limit could refuse, never start early."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from agent.checks.manifest import CheckSpec, Manifest
from agent.checks.runner import CheckRunner
from agent.diagnosis import Diagnoser
from agent.executors.base import Executor, ScriptRun
from agent.incident import Incident
from agent.models import CheckResult
from agent.options import DiagnoseOptions
from agent.preflight.collect import CHECKS as PREFLIGHT_CHECKS


class Recording(Executor):
    """A host whose scripts answer at once and are counted: each answer says which run of that script it was."""

    def __init__(self, name: str = "node-1", hold_inventory: threading.Event | None = None):
        self.name = name
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.hold_inventory = hold_inventory
        self._lock = threading.Lock()

    def runs(self, check: str) -> int:
        return sum(c == check for c, _ in self.calls)

    def run_script(self, script: Path, params: dict[str, Any], timeout: float) -> ScriptRun:
        check = script.stem
        if check == "host_inventory" and self.hold_inventory is not None:
            self.hold_inventory.wait(10)
        with self._lock:
            self.calls.append((check, params))
            n = self.runs(check)
        metrics: dict[str, Any] = {"n": n}
        if check == "host_inventory":  # a GPU node its checks can run on
            metrics = {"hostname": self.name, "pci_source": "sysfs", "driver_loaded": True,
                       "gpus_pci": [{"bus_id": "0000:18:00.0", "device_id": "2330"}]}
        evidence = {"check": check, "verdict": "PASS", "summary": f"run {n} of {check}", "metrics": metrics}
        return ScriptRun(stdout=json.dumps(evidence) + "\n", rc=0, duration_s=0.01)


def manifest() -> Manifest:
    return Manifest(checks=[CheckSpec(id=cid, script=f"{cid}.py", description=cid, nodes=["GPU"], tier=tier)
                            for cid, tier in (("a", "passive"), ("b", "passive"), ("bench", "active"))])


def test_prefetched_checks_run_once_and_are_handled_as_run_now() -> None:
    host = Recording()
    runner = CheckRunner([host], manifest=manifest(), approve=True)
    heard: list[CheckResult] = []
    runner.listeners.append(heard.append)
    runner.prefetch(["a", "b", "bench"]).join()
    assert host.runs("a") == host.runs("b") == 1 and host.runs("bench") == 0  # needs approval: never early
    results = runner.run(["a", "b"])
    assert [r.summary for r in results] == ["run 1 of a", "run 1 of b"]
    assert host.runs("a") == host.runs("b") == 1 and not any(r.cached for r in results)
    assert [r.check for r in heard] == ["a", "b"]  # executed, as far as the listeners (loop breaker, audit) go
    assert runner.run(["a"])[0].cached and host.runs("a") == 1  # then the cache, as for any run
    assert host.runs("host_inventory") == 1


def test_an_early_run_with_other_params_is_run_again() -> None:
    host = Recording()
    runner = CheckRunner([host], manifest=manifest())
    runner.prefetch(["a"]).join()
    runner.params["incident_at"] = 1_700_000_000.0  # the graph set the incident's time after the prefetch
    [result] = runner.run(["a"])
    assert result.summary == "run 2 of a" and host.runs("a") == 2
    assert host.calls[-1][1]["incident_at"] == 1_700_000_000.0


def test_early_runs_serve_the_next_run_only() -> None:
    host = Recording()
    runner = CheckRunner([host], manifest=manifest())
    runner.prefetch(["a", "b"]).join()
    runner.run(["a"])
    [later] = runner.run(["b"])  # b's early run is from before the previous run: not served
    assert later.summary == "run 2 of b" and host.runs("b") == 2


def test_the_inventory_is_taken_once_when_the_prefetch_and_the_graph_ask_together() -> None:
    release = threading.Event()
    host = Recording(hold_inventory=release)
    runner = CheckRunner([host], manifest=manifest())
    prefetch = runner.prefetch(["a"])
    asked: list[Any] = []
    graph = threading.Thread(target=lambda: asked.append(runner.take_inventory()))
    graph.start()
    release.set()
    prefetch.join(10)
    graph.join(10)
    assert host.runs("host_inventory") == 1 and asked and not asked[0]["node-1"].cannot_check
    assert runner.run(["a"])[0].summary == "run 1 of a"


def test_a_host_that_cannot_be_checked_runs_nothing_early() -> None:
    class Unreachable(Recording):
        def run_script(self, script: Path, params: dict[str, Any], timeout: float) -> ScriptRun:
            self.calls.append((script.stem, params))
            return ScriptRun(error="connection refused")

    host = Unreachable()
    runner = CheckRunner([host], manifest=manifest())
    runner.prefetch(["a", "b"]).join()
    assert [c for c, _ in host.calls] == ["host_inventory"]


def test_the_diagnosis_prefetches_preflight_only_when_no_limit_could_refuse_it(tmp_path: Path) -> None:
    incident = Incident(text="Xid 79 on GPU 3", hosts=["node-1"], at="2026-01-02T03:04:05Z")
    for limits, wanted in (({}, tuple(PREFLIGHT_CHECKS)), ({"max_checks": 3}, ()), ({"max_wall_s": 30.0}, ())):
        runner = CheckRunner([Recording()])
        asked: list[tuple[str, ...]] = []
        runner.prefetch = lambda ids, asked=asked: asked.append(tuple(ids))  # type: ignore[method-assign]
        options = DiagnoseOptions(hosts=["node-1"], data_dir=str(tmp_path), checkpoint=False, **limits)
        Diagnoser(options, runner=runner)._prefetch(incident)
        assert asked == [wanted]
        assert runner.params["incident_at"] == 1767323045.0  # what the graph's guard would set
