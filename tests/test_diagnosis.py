"""The diagnosis end to end on simulated hosts: AidAI's two case studies, exploration → feedback → ticket, and a
killed run resumed from its checkpoint. Real graph, real checks, real embeddings; only the hosts are simulated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from agent.diagnosis import Diagnoser
from agent.incident import Incident
from agent.knowledge.incident_db import IncidentDB
from agent.options import DiagnoseOptions
from agent.runs import load_run
from agent.sim.scenario import create_scenario
from agent.taxonomy import load_taxonomy
from agent.ticket import write_ticket

TAXONOMY = load_taxonomy()
NVLINK = "INTERCONNECT_NETWORKING.NVLINK.LINK_HARDWARE_FAULT"
ECC = "GPU.MEMORY.UNCORRECTABLE_ECC"

CASE_1 = ("Multi-GPU training on one H100 VM hangs and dies at the first all-reduce. Rank 5 prints\n"
          "NCCL WARN Connect to 10.2.0.4<35017> failed : Connection refused\n"
          "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error")
CASE_2 = ("The job crashed with RuntimeError: CUDA error: uncorrectable ECC error encountered on local rank 1. "
          "Compile with TORCH_USE_CUDA_DSA to enable device-side assertions.")
# the history the case study's pipeline 1 retrieves: similar text, other root causes
MISLEADING_HISTORY = [
    {"id": "past-ifname", "label": "INTERCONNECT_NETWORKING.SOCKET.IFNAME_MISCONFIG",
     "description": "All-reduce fails at start: NCCL WARN Connect to 10.0.3.9<41235> failed : Connection refused. "
                    "NCCL_SOCKET_IFNAME pointed at docker0 so the bootstrap used an unreachable address."},
    {"id": "past-hca", "label": "INTERCONNECT_NETWORKING.NCCL.IB_HCA_MISCONFIG",
     "description": "NCCL init fails with unhandled system error after NCCL WARN Connect failed : Connection "
                    "refused; NCCL_IB_HCA listed mlx5_8 which does not exist on this SKU."},
]


def sim_host(root: Path, faults: list[dict[str, Any]], noise: list[dict[str, Any]] | None = None) -> str:
    return f"sim:{create_scenario(root, faults, noise or []).root}"


def diagnoser(tmp_path: Path, host: str, **options: Any) -> Diagnoser:
    return Diagnoser(DiagnoseOptions(hosts=[host], data_dir=str(tmp_path / "data"), **options), taxonomy=TAXONOMY)


def test_case_study_nvlink_found_by_the_taxonomy_after_history_misses(tmp_path: Path) -> None:
    IncidentDB(data_dir=tmp_path / "data").build(MISLEADING_HISTORY)
    host = sim_host(tmp_path / "host", [{"fault": "nvlink.link_down", "gpu": 5, "links": [0, 1, 2, 3]}],
                    [{"fault": "noise.correctable_ecc"}])
    report = diagnoser(tmp_path, host, seed=False, knowledge=False).run(Incident(text=CASE_1))

    tested_by_history = [s for s in report.path if s.pipeline == 1]
    assert [s.node for s in tested_by_history] == [r["label"] for r in MISLEADING_HISTORY]
    assert {s.action for s in tested_by_history} == {"rejected"}
    assert report.resolved and report.pipeline == 2
    assert report.root_causes[0].label == NVLINK
    assert any(line.startswith("nvlink_status:nvlink_inactive@GPU5") for line in report.root_causes[0].evidence)
    # the DFS went INTERCONNECT_NETWORKING → NVLINK → the leaf, and pruned the categories with no signal
    entered = [s.node for s in report.path if s.pipeline == 2 and s.action == "enter"]
    assert entered.index("INTERCONNECT_NETWORKING") < entered.index("INTERCONNECT_NETWORKING.NVLINK") < \
        entered.index(NVLINK)
    assert "OTHER.STORAGE" not in entered
    assert report.llm_calls == 0 and report.checks_run > 0


def test_case_study_ecc_reports_the_row_remap_that_followed_and_xid(tmp_path: Path, data_dir: Path) -> None:
    host = sim_host(tmp_path / "host", [{"fault": "gpu.ecc_uncorrectable", "gpu": 1}])
    report = Diagnoser(DiagnoseOptions(hosts=[host], data_dir=str(data_dir), knowledge=False),
                       taxonomy=TAXONOMY).run(Incident(text=CASE_2))

    assert report.resolved
    primary, *others = report.root_causes
    assert primary.label == ECC and primary.level == "confirmed" and not others
    assert any(line.startswith("xid_scan:xid_48@GPU1") for line in primary.evidence)
    assert any(line.startswith("gpu_memory_errors:ecc_uncorrectable@GPU1") for line in primary.evidence)
    # the pending row remap is what the ECC error left on its GPU: it followed from the cause, with its evidence
    remap = {c.label: c for c in report.follows}["GPU.MEMORY.ROW_REMAP_PENDING"]
    assert any("row_remap_pending@GPU1" in line for line in remap.evidence)
    assert remap.link.startswith(f"followed from {ECC} on gpu1")
    # NVIDIA's Xid catalogue: 48 with 63 on one GPU -> drain the node, then reset that GPU; the report says so
    assert any(action.startswith("drain the node, then reset GPU1") for action in primary.actions), primary.actions
    assert primary.confidence > remap.confidence
    # siblings without evidence were tested and rejected, not silently skipped
    rejected = {j.label for j in report.hypotheses if j.status == "rejected"}
    assert "GPU.MEMORY.ROW_REMAP_FAILURE" in rejected


def test_unmatched_incident_explores_asks_feedback_and_escalates_with_a_full_ticket(
        tmp_path: Path, data_dir: Path, tiny_kb: Path) -> None:
    host = sim_host(tmp_path / "host", [])
    asked: list[dict[str, Any]] = []

    def answer(payload: dict[str, Any]) -> Any:
        asked.append(payload)
        return ""  # nothing more to add: escalate

    options = DiagnoseOptions(hosts=[host], data_dir=str(data_dir), kb_dir=str(tiny_kb), max_feedback_rounds=1)
    text = ("Since Tuesday the nightly evaluation job of our team at acme-ml.com produces slightly different scores "
            "than before; nothing crashes, no error in the logs. Contact: ops@acme-ml.com, api key "
            "sk-proj-abcdefghijklmnopqrstuvwx. Runs on gpu-node-17 (10.20.30.40).")
    report = Diagnoser(options, taxonomy=TAXONOMY).run(Incident(text=text), answer=answer)

    assert not report.resolved and report.pipeline == 0 and report.root_causes == []
    assert [p["kind"] for p in asked] == ["feedback"]
    assert asked[0]["question"] and asked[0]["hypotheses"] == [h.model_dump(mode="json") for h in report.exploration]
    assert report.hypotheses and all(j.status != "confirmed" for j in report.hypotheses)

    md_path, json_path = write_ticket(report, tmp_path / "ticket")
    ticket = json.loads(json_path.read_text())
    markdown = md_path.read_text()
    assert ticket["status"] == "escalated"
    assert [h["label"] for h in ticket["hypotheses_tested"]] == [j.label for j in report.hypotheses]
    assert len(ticket["checks"]) == len(report.results) == report.checks_run
    for result in report.results:
        assert f"| {result.check} | {result.tier} | {result.verdict.value} |" in markdown
        assert any(c["check"] == result.check and c["verdict"] == result.verdict.value and
                   c["output_sha256"] == result.output_sha256 for c in ticket["checks"])
    for judgement in report.hypotheses:
        assert f"| {judgement.label} | {judgement.status} |" in markdown
    everything = md_path.read_text() + json_path.read_text()
    for secret in ("sk-proj-abcdefghijklmnopqrstuvwx", "ops@acme-ml.com", "acme-ml.com", "10.20.30.40",
                   "gpu-node-17"):
        assert secret not in everything
    assert ticket["redactions"]["secret"] >= 1 and ticket["redactions"]["ip"] >= 1


def test_feedback_re_enters_the_diagnosis_with_the_new_text(tmp_path: Path, data_dir: Path, tiny_kb: Path) -> None:
    # a slow GPU only gives weak evidence (WARN): the checks alone cannot confirm it, the user's answer can
    host = sim_host(tmp_path / "host", [{"fault": "gpu.slow", "gpu": 3}])
    asked: list[dict[str, Any]] = []

    def answer(payload: dict[str, Any]) -> str:
        asked.append(payload)
        return "every step waits on GPU 3: it is a straggler, 20% slower than the other GPUs"

    options = DiagnoseOptions(hosts=[host], data_dir=str(data_dir), kb_dir=str(tiny_kb), max_feedback_rounds=1,
                              history=False)
    report = Diagnoser(options, taxonomy=TAXONOMY).run(
        Incident(text="our job stopped, no idea why, the log is empty"), answer=answer)
    straggler = "GPU.PERFORMANCE.SLOW_GPU_STRAGGLER"
    assert [p["kind"] for p in asked] == ["feedback"]
    assert any(straggler in h["related_labels"] for h in asked[0]["hypotheses"])  # offered as unverified
    assert report.resolved and report.pipeline == 3 and report.root_causes[0].label == straggler
    assert report.feedback and any(s.action == "feedback" for s in report.path)


RESUME_CHILD = """
import os, signal, sys
from agent.diagnosis import Diagnoser
from agent.options import DiagnoseOptions
from agent.incident import Incident
entered = []
def emit(event):
    if event.type == "hypothesis":
        entered.append(event.node)
        if len(entered) == int(sys.argv[3]):
            os.kill(os.getpid(), signal.SIGKILL)
options = DiagnoseOptions(hosts=[sys.argv[1]], data_dir=sys.argv[2], history=False, knowledge=False)
Diagnoser(options, emit=emit).run(Incident(text=sys.argv[4]), run_id="killed-run")
"""


def test_killed_run_resumes_from_its_checkpoint_without_rerunning_finished_checks(tmp_path: Path) -> None:
    host = sim_host(tmp_path / "host", [{"fault": "nvlink.link_down", "gpu": 2, "links": [0, 1]}])
    data = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    child = subprocess.run([sys.executable, "-c", RESUME_CHILD, host, str(data), "4", CASE_1], env=env,
                           capture_output=True, text=True, timeout=240)
    assert child.returncode == -9, child.stderr  # SIGKILL, mid-DFS

    options, incident = load_run("killed-run", str(data))
    assert options.hosts == [host] and incident.text == CASE_1
    resumed = Diagnoser(options, taxonomy=TAXONOMY)
    before = resumed.graph.get_state({"configurable": {"thread_id": "killed-run"}}).values
    finished = set(before["results"])
    assert finished, "the killed run had finished some checks"
    # the checkpoint holds plain JSON, not the state's typed objects: another process or version resumes it
    assert json.loads(json.dumps(before)) == before
    ran_again: list[str] = []
    resumed.runner.on_result = lambda result: ran_again.append(f"{result.host}|{result.check}")
    report = resumed.resume("killed-run")

    assert not finished & set(ran_again)
    assert report.resolved and report.root_causes[0].label == NVLINK
    straight = Diagnoser(DiagnoseOptions(hosts=[host], data_dir=str(tmp_path / "data2"), history=False,
                                         knowledge=False), taxonomy=TAXONOMY).run(incident)
    assert [c.label for c in report.root_causes] == [c.label for c in straight.root_causes]
    assert report.checks_run == straight.checks_run


def _most_credulous(schema: dict[str, Any]) -> Any:
    """A valid answer to any of the reasoner's schemas that believes everything: every offered label kept,
    every leaf confirmed with certainty."""
    kind = schema.get("type")
    if "enum" in schema:
        return "confirmed" if "confirmed" in schema["enum"] else schema["enum"][0]
    if kind == "object":
        return {name: _most_credulous(sub) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        items = schema.get("items", {})
        labels = next((sub["enum"] for sub in items.get("properties", {}).values() if "enum" in sub), None)
        if labels is not None:  # one entry per offered choice
            name = next(n for n, sub in items["properties"].items() if "enum" in sub)
            return [{**_most_credulous(items), name: label} for label in labels]
        return items["enum"][::-1] if "enum" in items else []
    return {"boolean": True, "number": 0.99, "integer": 0}.get(kind, "it is certainly this one")


def test_openai_reasoner_drives_the_whole_graph_and_cannot_confirm_without_evidence(tmp_path: Path) -> None:
    from tests.openai_stub import OpenAIStub

    with OpenAIStub() as stub:
        stub.responder = lambda request: json.dumps(
            _most_credulous(request["response_format"]["json_schema"]["schema"]))
        options = dict(llm="openai", base_url=stub.base_url, model=stub.model, history=False, knowledge=False)
        ecc = diagnoser(tmp_path / "a", sim_host(tmp_path / "ecc", [{"fault": "gpu.ecc_uncorrectable", "gpu": 1}]),
                        **options).run(Incident(text=CASE_2))
        healthy = diagnoser(tmp_path / "b", sim_host(tmp_path / "ok", []), **options).run(
            Incident(text="training is slower than yesterday"))

    assert ecc.resolved and ecc.root_causes[0].label == ECC
    assert all(c.evidence for c in ecc.root_causes)  # the model confirmed every leaf; only evidence counts
    assert ecc.llm_calls > 0 and ecc.tokens > 0 and ecc.reasoner == "openai"
    assert not healthy.resolved and healthy.llm_calls > 0
    assert any(j.status == "rejected" for j in healthy.hypotheses)
    tasks = {r["response_format"]["json_schema"]["name"] for r in stub.requests}
    assert {"summarize", "rank_children", "validate_leaf", "conclude"} <= tasks
