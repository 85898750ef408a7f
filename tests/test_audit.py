"""The audit log: one append-only JSONL line per event of a run (who approved what, every check executed with its
exit code and output hash, the model and prompt version, the conclusion), and `aidai audit show RUN`."""

from __future__ import annotations

import json
import stat
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from agent.audit import AuditLog, audit_path, local_user, read, signed
from agent.audit_records import ApprovalRecord, CheckRecord, ExportRecord, RunRecord, StoppedRecord
from agent.cli.audit_cmd import app
from agent.diagnosis import Diagnoser
from agent.incident import Incident
from agent.options import DiagnoseOptions
from agent.reasoning.offline import OfflineReasoner
from agent.reasoning.prompts import PROMPT_VERSION
from agent.sim.scenario import create_scenario
from agent.taxonomy import load_taxonomy
from tests.hashed_words import word_embed

ECC_TEXT = "RuntimeError: CUDA error: uncorrectable ECC error encountered on local rank 1."
TAXONOMY = load_taxonomy()


# two independent causes the incident's lines name: which comes first is what the active checks decide, so the run
# asks for them (one ECC event and what followed from it on its GPU is one cause: nothing to ask)
TWO_CAUSES = ECC_TEXT + " NCCL also logged NVLink errors, Xid 74 on GPU 5."


def test_a_run_logs_who_approved_what_and_every_check_it_executed(tmp_path: Path) -> None:
    faults = [{"fault": "gpu.ecc_uncorrectable", "gpu": 1}, {"fault": "nvlink.link_down", "gpu": 5}]
    host = f"sim:{create_scenario(tmp_path / 'host', faults, []).root}"
    options = DiagnoseOptions(hosts=[host], data_dir=str(tmp_path / "data"), history=False, knowledge=False,
                              approval="ask", operator="ops-bot")
    asked: list[dict[str, Any]] = []

    def answer(payload: dict[str, Any]) -> Any:  # what the server sends: the operator's name with the answers
        asked.append(payload)
        first, *rest = [c["id"] for c in payload["checks"]]
        return {first: True, **{c: False for c in rest}, "approved_by": "alice"}

    reasoner = OfflineReasoner(TAXONOMY, embed=word_embed)
    report = Diagnoser(options, taxonomy=TAXONOMY, reasoner=reasoner).run(Incident(text=TWO_CAUSES), answer,
                                                                           run_id="audited")
    path = tmp_path / "data" / "runs" / "audited.audit.jsonl"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    events, problems = read(path)
    assert problems == [] and asked
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert all(datetime.fromisoformat(e["ts"]).tzinfo is not None and e["run_id"] == "audited" for e in events)

    start = events[0]
    assert start["event"] == "run" and start["operator"] == "ops-bot" and start["approval"] == "ask"
    assert start["prompt_version"] == PROMPT_VERSION and start["reasoner"] == "offline"

    approvals = [e for e in events if e["event"] == "approval"]
    offered = [c["id"] for p in asked for c in p["checks"]]
    assert [e["check"] for e in approvals] == offered
    assert all(e["by"] == "alice" and e["via"] == "operator" and e["tier"] in ("active", "intrusive")
               for e in approvals)
    assert [e["approved"] for e in approvals][:1] == [True]

    checks = {(e["host"], e["check"]): e for e in events if e["event"] == "check"}
    ran = [r for r in report.results if not r.summary.startswith("not run")]
    assert len(checks) == report.spent["checks"] >= len(ran) > 0  # the pre-triage's own checks are logged too
    for result in ran:
        logged = checks[(result.host, result.check)]
        assert logged["verdict"] == result.verdict.value and logged["output_sha256"] == result.output_sha256
        assert logged["exit_code"] == 0 and logged["tier"] == result.tier and logged["commands"] == result.cmds
    refused = {e["check"] for e in approvals if not e["approved"]}
    assert not refused & {c for _, c in checks}  # a refused check never ran

    end = events[-1]
    assert report.resolved and {c.label for c in report.root_causes} == {
        "GPU.MEMORY.UNCORRECTABLE_ECC", "INTERCONNECT_NETWORKING.NVLINK.LINK_HARDWARE_FAULT"}
    assert end["event"] == "conclusion" and end["resolved"] is True
    assert end["root_causes"] == [c.label for c in report.root_causes]


def test_audit_show_renders_a_table_or_json_and_reports_a_torn_last_line(tmp_path: Path) -> None:
    path = audit_path(tmp_path / "runs", "r1")
    log = AuditLog(path, "r1")
    log.append(RunRecord(operator="alice", hosts=["gpu-a17"], approval="ask", reasoner="openai", model="gpt-x",
                         prompt_version=PROMPT_VERSION, limits={"max_checks": 5}))
    log.append(ApprovalRecord(node="GPU", check="dcgm_diag", tier="active", approved=True, by="alice", via="operator"))
    log.append(CheckRecord(node="GPU", check="dcgm_diag", host="gpu-a17", tier="active", executed=True,
                           verdict="FAIL", exit_code=0, output_sha256="ab" * 32, duration_s=1.5, commands=[],
                           summary=""))
    with path.open("ab") as handle:  # a crash in the middle of a write
        handle.write(b'{"ts": "2026-11-23T10:00:00Z", "event": "llm", "tas')

    runner = CliRunner()
    shown = runner.invoke(app, ["show", "r1", "--data-dir", str(tmp_path)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    for text in ("audit log of run r1", "approval", "dcgm_diag", "alice", "approved", "FAIL", "exit 0", "gpt-x"):
        assert text in shown.output, text
    assert "line 4: not JSON" in shown.output  # warned about, the rest still shown

    as_json = runner.invoke(app, ["show", "r1", "--json", "--data-dir", str(tmp_path)])
    events = json.loads(as_json.stdout)
    assert [e["event"] for e in events] == ["run", "approval", "check"] and events[2]["exit_code"] == 0
    log.append(StoppedRecord(node="dfs", limit="max_checks", message="check limit reached", spent={}))
    assert read(path)[0][-1]["seq"] == 4  # numbering goes on after the torn line

    for bad in ("nope", "../r1"):
        missing = runner.invoke(app, ["show", bad, "--data-dir", str(tmp_path)])
        assert missing.exit_code == 2 and "error:" in missing.output and "Traceback" not in missing.output


def test_appends_from_many_threads_are_whole_lines(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a.audit.jsonl", "r")
    def record(n: int, i: int) -> ExportRecord:
        return ExportRecord(by=f"thread {n}", target=f"ticket {i}", result="written", detail="x" * 500)

    threads = [threading.Thread(target=lambda n=n: [log.append(record(n, i)) for i in range(25)]) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    events, problems = read(log.path)
    assert problems == [] and len(events) == 200
    assert sorted(e["seq"] for e in events) == list(range(1, 201))


def test_cli_approvals_are_signed_with_the_local_user() -> None:
    answer = signed(lambda payload: {"dcgm_diag": True} if payload["kind"] == "approval" else "text", local_user())
    assert answer({"kind": "approval", "checks": []}) == {"dcgm_diag": True, "approved_by": local_user()}
    assert answer({"kind": "feedback"}) == "text"
    server = signed(lambda payload: {"dcgm_diag": True, "approved_by": "alice"}, "root")
    assert server({"kind": "approval"})["approved_by"] == "alice"  # an operator named by the API is kept
