"""Pre-triage through the diagnosis: preflight on the hosts always, L4 when the job's logs are attached; what
they find reaches the summary (hosts to check first), the planner's priors, the report and the ticket, and a tool
that breaks is reported without stopping the diagnosis."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent import pretriage
from agent.agents.context import AgentTools
from agent.checks.runner import CheckRunner
from agent.cli.main import app
from agent.diagnosis import Diagnoser
from agent.executors.hosts import executors_for
from agent.graph.build import DiagnosisGraph
from agent.graph.state import DiagnosisState
from agent.incident import Incident
from agent.l4.simulate import JobSpec, simulate_job
from agent.models import ToolResult
from agent.options import DiagnoseOptions
from agent.reasoning.offline import OfflineReasoner
from agent.sim.scenario import create_scenario
from agent.taxonomy import load_taxonomy
from agent.ticket import render_markdown, ticket_data

TAXONOMY = load_taxonomy()
TEXT = ("Megatron pretraining on 4 nodes died at iteration 12: NCCL watchdog timeouts on every rank, then "
        "torch.distributed.elastic ChildFailedError.")


def test_logs_and_preflight_feed_summary_priors_report_and_ticket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 data_dir: Path) -> None:
    monkeypatch.setenv("AIDAI_DATA_DIR", str(tmp_path / "l4-data"))  # L4's pattern library
    truth = simulate_job(tmp_path / "logs", JobSpec(ranks=32, fault="gpu", seed=4))
    simulate_job(tmp_path / "ok", JobSpec(ranks=32, seed=44))
    host = f"sim:{create_scenario(tmp_path / 'host', [{'fault': 'gpu.faulty', 'gpu': 1}], []).root}"
    incident = Incident(text=TEXT, attachments={"logs": str(tmp_path / "logs"), "success": str(tmp_path / "ok")})
    report = Diagnoser(DiagnoseOptions(hosts=[host], data_dir=str(data_dir), knowledge=False),
                       taxonomy=TAXONOMY).run(incident)

    tools = {t.tool: t for t in report.pretriage}
    assert set(tools) == {"preflight", "l4"}  # no telemetry attached: no Reveal
    assert tools["l4"].status == "ok" and tools["l4"].hosts[0] == truth.faulty_nodes[0]
    assert tools["preflight"].status == "ok"
    # preflight's checks ran on the diagnosis' runner: each (host, check) once in the report
    keys = [(r.host, r.check) for r in report.results]
    assert len(keys) == len(set(keys)) and any(check == "framework_versions" for _, check in keys)
    assert report.root_causes and report.root_causes[0].label == "GPU.HARDWARE.FAULTY_GPU"
    ticket = render_markdown(ticket_data(report))
    assert "## Pre-triage" in ticket and "**l4** (ok)" in ticket


def test_a_broken_tool_is_reported_and_the_priors_keep_only_taxonomy_labels(tmp_path: Path) -> None:
    def broken(incident: Incident) -> ToolResult | None:
        raise RuntimeError("parser exploded")

    def helpful(incident: Incident) -> ToolResult | None:
        return ToolResult(tool="helpful", hosts=["node-7"], priors={"GPU.THERMAL": 0.6, "NOT.A.LABEL": 0.9})

    host = f"sim:{create_scenario(tmp_path, [], []).root}"
    graph = DiagnosisGraph(AgentTools(taxonomy=TAXONOMY, reasoner=OfflineReasoner(TAXONOMY),
                                      runner=CheckRunner(executors_for([host])), pretriage=[broken, helpful]))
    state = DiagnosisState(incident=Incident(text="job died"))
    state = state.merged(graph.summarization.summarize(state))
    update = graph.summarization.pretriage(state)
    assert [(r.tool, r.status) for r in update["pretriage"]] == [("broken", "error"), ("helpful", "ok")]
    assert "parser exploded" in update["pretriage"][0].reason
    assert update["pretriage_priors"] == {"GPU.THERMAL": 0.6}
    assert update["summary"].entities.hosts[0] == "node-7"


def test_unknown_tool_names_and_missing_attachments_are_bad_input(tmp_path: Path, data_dir: Path) -> None:
    with pytest.raises(ValueError, match="unknown pre-triage tool"):
        pretriage.tools(["l4", "kaiops-v9"], CheckRunner(executors_for(["local"])))
    result = CliRunner().invoke(app, ["diagnose", "NCCL timeout", "--logs", str(tmp_path / "nope"),
                                      "--data-dir", str(data_dir)])
    assert result.exit_code == 2 and "--logs" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(app, ["diagnose", "NCCL timeout", "--metrics", str(tmp_path / "nope.csv"),
                                      "--data-dir", str(data_dir)])
    assert result.exit_code == 2 and "--metrics" in result.output and "Traceback" not in result.output
    assert pretriage.TOOLS["kaiops"][0] == "metrics"  # KAIOPS runs only on an incident with a metrics CSV
