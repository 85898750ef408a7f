"""Cheapest tier first: a node's active checks (minutes of GPU or fabric load) run only when its passive ones
leave the question open, and then only with approval."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.agents.context import AgentTools
from agent.checks.runner import CheckRunner
from agent.events import Event, SkippedEvent
from agent.executors.hosts import executors_for
from agent.graph.build import DiagnosisGraph
from agent.graph.state import DiagnosisState
from agent.incident import Incident
from agent.models import CheckResult, Verdict
from agent.reasoning.offline import OfflineReasoner
from agent.sim.scenario import create_scenario
from agent.taxonomy import load_taxonomy

TAXONOMY = load_taxonomy()


def execute(root: Path, faults: list[dict[str, Any]], label: str, approval: str,
            ) -> tuple[dict[str, CheckResult], list[Event]]:
    host = f"sim:{create_scenario(root, faults, []).root}"
    events: list[Event] = []
    graph = DiagnosisGraph(AgentTools(taxonomy=TAXONOMY, reasoner=OfflineReasoner(TAXONOMY),
                                      runner=CheckRunner(executors_for([host])), emit=events.append,
                                      approval=approval))  # type: ignore[arg-type]
    results, _ = graph.execution.execute(DiagnosisState(incident=Incident(text="training job failed")), label)
    return {r.check: r for r in results}, events


def test_a_leaf_its_passive_checks_confirm_skips_the_active_ones(tmp_path: Path) -> None:
    ran, events = execute(tmp_path, [{"fault": "gpu.ecc_uncorrectable", "gpu": 1}], "GPU.MEMORY.UNCORRECTABLE_ECC",
                          "all")
    assert ran["gpu_memory_errors"].verdict == Verdict.FAIL
    assert "dcgm_diag" not in ran
    assert [e.checks for e in events if isinstance(e, SkippedEvent)] == [["dcgm_diag"]]


def test_an_inner_node_with_a_passive_failure_defers_its_active_checks(tmp_path: Path) -> None:
    ran, _ = execute(tmp_path, [{"fault": "nvlink.link_down", "gpu": 5, "links": [0, 1]}],
                     "INTERCONNECT_NETWORKING.NVLINK", "all")
    assert ran["nvlink_status"].verdict == Verdict.FAIL
    assert not {"p2p_bw", "nccl_intranode"} & set(ran)


def test_active_checks_run_when_the_passive_ones_are_silent_and_only_with_approval(tmp_path: Path) -> None:
    label = "GPU.PERFORMANCE.SLOW_GPU_STRAGGLER"
    refused, _ = execute(tmp_path / "a", [{"fault": "gpu.slow", "gpu": 5}], label, "none")
    assert refused["gpu_exec"].verdict == Verdict.UNKNOWN and "approval" in refused["gpu_exec"].summary
    approved, _ = execute(tmp_path / "b", [{"fault": "gpu.slow", "gpu": 5}], label, "all")
    assert approved["gpu_exec"].verdict == Verdict.FAIL
    assert any(f.id == "straggler" for f in approved["gpu_exec"].findings)
