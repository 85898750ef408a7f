"""Safety limits of one investigation: check, time and LLM-token limits stop it cleanly (an escalation that says
which limit and what was tried, checkpointed), the loop breaker stops repeats, and only manifest checks run.
Real graph and checks on a simulated host; the LLM is the loopback stub."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.agents.context import AgentTools
from agent.checks.runner import CheckNotAllowed, CheckRunner
from agent.diagnosis import Diagnoser
from agent.executors.base import Executor, ScriptRun
from agent.graph.build import DiagnosisGraph
from agent.graph.state import DiagnosisState, Frame
from agent.incident import Incident
from agent.limits import LimitError, Limits
from agent.options import DiagnoseOptions
from agent.reasoning.offline import OfflineReasoner
from agent.sim.scenario import create_scenario
from agent.taxonomy import load_taxonomy
from agent.ticket import render_markdown, ticket_data
from tests.hashed_words import word_embed

TAXONOMY = load_taxonomy()
ECC_TEXT = "RuntimeError: CUDA error: uncorrectable ECC error encountered on local rank 1."


def sim_host(root: Path) -> str:
    return f"sim:{create_scenario(root, [{'fault': 'gpu.ecc_uncorrectable', 'gpu': 1}], []).root}"


def diagnoser(tmp_path: Path, host: str, **options: Any) -> Diagnoser:
    options = {"history": False, "knowledge": False, **options}
    return Diagnoser(DiagnoseOptions(hosts=[host], data_dir=str(tmp_path / "data"), **options), taxonomy=TAXONOMY,
                     reasoner=OfflineReasoner(TAXONOMY, embed=word_embed))


def executed(log: list[str]) -> Any:
    return lambda result: log.append(f"{result.host}|{result.check}") if not result.summary.startswith(
        "not run") else None


def test_check_limit_stops_with_a_checkpointed_escalation_naming_the_limit(tmp_path: Path) -> None:
    host = sim_host(tmp_path / "host")
    first = diagnoser(tmp_path, host, max_checks=2)
    ran: list[str] = []
    first.runner.on_result = executed(ran)
    report = first.run(Incident(text=ECC_TEXT), run_id="limited")

    assert len(ran) == 2 and len(set(ran)) == 2
    assert not report.resolved and report.stopped["limit"] == "max_checks"
    assert "check limit reached" in report.explanation and "Tried so far" in report.explanation
    assert report.spent["checks"] == 2
    ticket = ticket_data(report)
    assert ticket["status"] == "escalated" and ticket["stopped"]["limit"] == "max_checks"
    assert "Investigation stopped" in render_markdown(ticket)
    first.close()

    again = diagnoser(tmp_path, host, max_checks=2)  # a new process: the stop is in the checkpoint
    again.runner.on_result = executed(ran)
    resumed = again.resume("limited")
    assert len(ran) == 2 and resumed.stopped == report.stopped and resumed.explanation == report.explanation
    log = tmp_path / "data" / "runs" / "limited.audit.jsonl"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["limit"] for e in events if e["event"] == "stopped"] == ["max_checks"]
    assert events[-1]["event"] == "conclusion" and events[-1]["stopped"]["limit"] == "max_checks"


def test_time_limit_stops_before_any_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every reading of the graph's clock is 10 ms later than the one before: the first node alone spends the
    # 5 ms budget however fast this machine runs it
    ticks = iter(range(1_000_000))
    monkeypatch.setattr("agent.graph.guard.time", SimpleNamespace(perf_counter=lambda: next(ticks) * 0.01))
    d = diagnoser(tmp_path, sim_host(tmp_path / "host"), max_wall_s=0.005)
    ran: list[str] = []
    d.runner.on_result = executed(ran)
    report = d.run(Incident(text=ECC_TEXT))
    assert report.stopped["limit"] == "max_wall_s" and "time limit reached" in report.stopped["message"]
    assert ran == [] and not report.resolved


def test_step_loop_breaker_ends_a_walk_that_does_not_finish(tmp_path: Path) -> None:
    d = diagnoser(tmp_path, sim_host(tmp_path / "host"))
    d.tools.limits = Limits(max_steps=3)
    report = d.run(Incident(text=ECC_TEXT))
    assert report.stopped["limit"] == "loop" and "3 graph steps" in report.stopped["message"]
    assert report.spent["steps"] == 4  # summarize, pretriage, historical, then conclude


class Forgetful(dict):  # type: ignore[type-arg]
    """A result cache that keeps nothing: every node would run its checks again."""

    def __setitem__(self, key: Any, value: Any) -> None:
        return None

    def setdefault(self, key: Any, default: Any = None) -> Any:
        return default


def test_the_same_check_on_the_same_host_never_runs_twice(tmp_path: Path) -> None:
    d = diagnoser(tmp_path, sim_host(tmp_path / "host"))
    d.runner.cache = Forgetful()
    ran: list[str] = []
    d.runner.on_result = executed(ran)
    report = d.run(Incident(text=ECC_TEXT))
    assert len(ran) == len(set(ran)) > 0
    assert report.stopped["limit"] == "loop" and "would run again" in report.stopped["message"]


def test_the_dfs_enters_a_node_at_most_once_per_pass() -> None:
    tools = AgentTools(taxonomy=TAXONOMY, reasoner=OfflineReasoner(TAXONOMY), runner=CheckRunner([]))
    graph = DiagnosisGraph(tools)
    state = DiagnosisState(incident=Incident(text="job died"), visited=["GPU"],
                           stack=[Frame(label="", phase="children", children=["GPU", "GPU"], next=1, mark=0)])
    update = graph.planning.dfs(state)
    assert len(update["stack"]) == 1 and update["stack"][0].next == 2  # not pushed again
    assert update["path"][-1].action == "loop" and update["path"][-1].node == "GPU"


class Recording(Executor):
    def __init__(self) -> None:
        self.name, self.profile, self.calls = "h1", None, []

    def run_script(self, script: Path, params: dict[str, Any], timeout: float) -> ScriptRun:
        self.calls.append(script.name)
        return ScriptRun(stdout="", rc=1)

    def close(self) -> None:
        return None


def test_a_check_outside_the_manifest_is_refused_before_anything_runs() -> None:
    executor = Recording()
    runner = CheckRunner([executor])
    with pytest.raises(CheckNotAllowed, match=r"'rm_rf_slash' refused: not in the manifest's allowlist"):
        runner.run(["xid_scan", "rm_rf_slash"])
    assert executor.calls == []
    graph = DiagnosisGraph(AgentTools(taxonomy=TAXONOMY, reasoner=OfflineReasoner(TAXONOMY), runner=runner))
    with pytest.raises(CheckNotAllowed):
        graph.execution.run("GPU", ["../../bin/sh"])
    assert executor.calls == []


def test_bad_limits_are_refused_with_a_clear_error() -> None:
    with pytest.raises(LimitError, match="--max-checks must be a positive number"):
        Limits(max_checks=0)
    with pytest.raises(LimitError, match="--max-wall-s"):
        DiagnoseOptions(max_wall_s=-1).limits()
    from agent.cli.main import app

    result = CliRunner().invoke(app, ["diagnose", "the job died", "--max-checks", "0"])
    assert result.exit_code == 2 and "--max-checks" in result.output


def test_llm_token_limit_stops_calling_the_model(tmp_path: Path) -> None:
    from tests.openai_stub import OpenAIStub

    with OpenAIStub() as stub:
        # every answer is broken JSON (the model's fault, not the form's): the offline reasoner answers
        stub.responder = lambda request: "{not json at all"
        from agent.reasoning.openai_reasoner import OpenAIReasoner

        model = OpenAIReasoner(OfflineReasoner(TAXONOMY, embed=word_embed), "m", stub.base_url, api_key="x")
        d = Diagnoser(DiagnoseOptions(hosts=[sim_host(tmp_path / "host")], data_dir=str(tmp_path / "data"),
                                      history=False, knowledge=False, llm="openai", max_llm_tokens=50),
                      taxonomy=TAXONOMY, reasoner=model)
        report = d.run(Incident(text=ECC_TEXT))
    assert report.stopped["limit"] == "max_llm_tokens" and report.spent["tokens"] >= 50
    assert len(stub.requests) == 2  # summarize and its one retry; then nothing more is sent
    assert not report.resolved
