"""The offline phase on an organisation's history: import with per-row validation, the feedback loop, the taxonomy
built in two passes (diff, apply), verification mining and growth. Data: tests/fixtures/history (written for
these tests); Chroma lives in tmp directories."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from agent.checks.manifest import load_manifest
from agent.cli import history_cmd, taxonomy_cmd
from agent.history import build as builder
from agent.history import growth as grow
from agent.history.feedback import load_resolved, record_from_resolved
from agent.history.labeling import from_records
from agent.history.records import read_history
from agent.history.verification import mine
from agent.knowledge.incident_db import IncidentDB
from agent.knowledge.store import collection_exists, resolve_location
from agent.taxonomy import read_taxonomy_file

FIX = Path(__file__).parent / "fixtures" / "history"
runner = CliRunner()
cli = typer.Typer()
cli.add_typer(history_cmd.app, name="history")
cli.add_typer(taxonomy_cmd.app, name="taxonomy")


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(cli, [str(a) for a in args])
    return result.exit_code, result.output


# ---- reading and validation (no model) ---------------------------------------------------------------------

def test_every_bad_row_is_listed_with_its_line_and_reason() -> None:
    result = read_history(FIX / "bad.jsonl")
    reasons = {p.line: p.reason for p in result.rejected}
    assert sorted(reasons) == [2, 3, 4, 5, 6, 8]
    assert "invalid JSON" in reasons[2]
    assert "description" in reasons[3] and "required" in reasons[3]
    assert "label" in reasons[4] and "opened" in reasons[5]
    assert "id already used on line 1" in reasons[6] and "JSON object" in reasons[8]
    assert [(d.line, d.id) for d in result.duplicates] == [(7, "B-6")]  # same text as line 1: listed, not kept
    assert [r.id for _, r in result.records] == ["B-1", "B-7"]


def test_csv_rows_are_read_with_their_line_numbers() -> None:
    result = read_history(FIX / "history.csv")
    assert [(line, r.id, r.label) for line, r in result.records] == [
        (2, "C-1", "SYSTEM_SOFTWARE.DRIVER.LIBRARY_VERSION_MISMATCH"),
        (3, "C-2", "INTERCONNECT_NETWORKING.SOCKET.IFNAME_MISCONFIG")]
    assert "Driver/library version mismatch" in result.records[0][1].description
    assert [(p.line, p.reason) for p in result.rejected] == [(4, "1 more cell(s) than the header has columns")]
    with pytest.raises(ValueError, match="--format"):
        read_history(FIX / "ticket_resolved.json.txt")


def test_resolved_diagnosis_becomes_a_record_and_an_escalated_one_needs_a_confirmed_cause() -> None:
    record = load_resolved(FIX / "ticket_resolved.json")
    assert (record.id, record.label) == ("resolved-20251120-abc123", "GPU.MEMORY.UNCORRECTABLE_ECC")
    assert "`nvidia-smi -q -d ECC`" in record.discussion and "RMA" in record.resolution
    escalated = json.loads((FIX / "ticket_escalated.json").read_text())
    with pytest.raises(ValueError, match="confirmed root cause"):
        record_from_resolved(escalated)
    escalated["confirmed_root_cause"] = "FRAMEWORK_LIBRARY.PYTORCH.DATALOADER_DEADLOCK"
    assert record_from_resolved(escalated).label == "FRAMEWORK_LIBRARY.PYTORCH.DATALOADER_DEADLOCK"


def test_verification_commands_map_onto_checks_or_become_proposals() -> None:
    records = [r for _, r in read_history(FIX / "history.jsonl").records]
    labelled, _ = from_records(records)
    mined = mine(labelled, load_manifest())
    assert "gpu_memory_errors" in mined["GPU.MEMORY.UNCORRECTABLE_ECC"].mapped
    assert "driver_health" in mined["SYSTEM_SOFTWARE.DRIVER.LIBRARY_VERSION_MISMATCH"].mapped
    port = mined["INTERCONNECT_NETWORKING.IB.PORT_DOWN"]
    assert "nic_config" in port.mapped  # ibstat
    proposal = next(p for p in port.proposals if p.tool == "mlxlink")  # no check runs mlxlink: a proposal
    assert proposal.incidents == ["T-1005"] and "no cable detected" in proposal.results[0]
    as_dict = proposal.to_dict()
    assert set(as_dict) == {"label", "tool", "commands", "results", "incidents", "status"}  # text, no script
    assert as_dict["status"].startswith("proposal")


# ---- the incident DB (embeddings) ------------------------------------------------------------------------

def test_import_is_all_or_nothing_unless_skip_bad(tmp_path: Path) -> None:
    code, out = run("history", "import", FIX / "bad.jsonl", "--data-dir", tmp_path)
    assert code == 2 and "nothing imported" in out
    assert "line 2" in out and "line 9" in out and "not a leaf" in out  # every bad row, with its line
    assert not collection_exists(resolve_location(tmp_path), "incidents")
    code, out = run("history", "import", FIX / "bad.jsonl", "--data-dir", tmp_path, "--skip-bad")
    assert code == 1 and "1 imported" in out
    assert IncidentDB(data_dir=tmp_path).count() == 1


def test_import_labels_unlabelled_rows_and_add_resolved_feeds_pipeline_one(tmp_path: Path) -> None:
    shutil.copy(FIX / "history.jsonl", tmp_path / "h.jsonl")
    code, out = run("history", "import", tmp_path / "h.jsonl", "--data-dir", tmp_path, "--any-label")
    assert code == 0, out
    assert "9 imported" in out and "2 labelled by the nearest leaf" in out
    db = IncidentDB(data_dir=tmp_path)
    auto = db.collection.get(where={"source": "history-autolabel"}, include=["metadatas"])
    by_id = {m["incident_id"]: m["label"] for m in auto["metadatas"]}
    assert by_id["T-1007"] == "GPU.MEMORY.UNCORRECTABLE_ECC"  # an ECC crash: the nearest leaf is the ECC one
    code, out = run("history", "import", tmp_path / "h.jsonl", "--data-dir", tmp_path, "--any-label")
    assert code == 0 and "+0 new" in out  # de-duplicated by id and content: nothing embedded again

    code, out = run("history", "add-resolved", FIX / "ticket_resolved.json", "--data-dir", tmp_path)
    assert code == 0, out
    hits = db.query("inference crashed with uncorrectable ECC error on GPU 1, Xid 48", k=3)
    assert any(h.id == "resolved-20251120-abc123" and h.source == "resolved" for h in hits)
    archive = [json.loads(x) for x in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [a["id"] for a in archive] == ["resolved-20251120-abc123"]
    code, out = run("history", "add-resolved", FIX / "ticket_escalated.json", "--data-dir", tmp_path)
    assert code == 2 and "confirmed_root_cause" in out


# ---- taxonomy build / diff / apply / growth -----------------------------------------------------------------

def test_build_from_empty_merges_near_duplicates_and_apply_refuses_unverified_leaves(tmp_path: Path) -> None:
    out = tmp_path / "new.json"
    code, text = run("taxonomy", "build", "--history", FIX / "history.jsonl", "--empty", "--no-tsg", "--out", out)
    assert code == 0, text
    assert "merged GPU.MEMORY.ECC_UNCORRECTABLE -> GPU.MEMORY.UNCORRECTABLE_ECC" in text
    notes = json.loads(out.with_suffix(".build.json").read_text())
    sources = notes["pass1_sources"]
    # unlabelled rows, no base taxonomy: the ECC crash takes the label of a very similar labelled incident, the
    # storage incident resembles none and is clustered
    assert sources == {"record": 7, "nearest-incident": 1, "cluster": 1}
    assert {p["id"]: p["label"] for p in notes["pass1"]}["T-1007"] == "GPU.MEMORY.UNCORRECTABLE_ECC"
    built = read_taxonomy_file(out)
    ecc = next(c for c in next(c for c in built["children"] if c["name"] == "GPU")["children"]
               if c["name"] == "MEMORY")["children"]
    assert [n["name"] for n in ecc] == ["UNCORRECTABLE_ECC"]
    assert ecc[0]["evidence"] and "gpu_memory_errors" in ecc[0]["checks"]  # bound from the verification library
    assert any("no check verifies it" in r for r in notes["review"])  # cluster leaves: nothing verifies them
    code, text = run("taxonomy", "apply", out, "--to", tmp_path / "installed.json", "--yes")
    assert code == 2 and "does not validate" in text and not (tmp_path / "installed.json").exists()


def test_build_into_shipped_diff_and_apply_with_backup(tmp_path: Path) -> None:
    out = tmp_path / "new.json"
    code, text = run("taxonomy", "build", "--history", FIX / "history.jsonl", "--no-tsg", "--out", out)
    assert code == 0, text
    assert "merged GPU.MEMORY.ECC_UNCORRECTABLE" in text and "0 problem(s)" in text
    code, text = run("taxonomy", "diff", out, "--json")
    changes = json.loads(text)
    assert changes["summary"]["removed"] == 0 and changes["summary"]["added"] == 0
    changed = {c["label"] for c in changes["changes"]}
    assert changed == {"INTERCONNECT_NETWORKING.IB.PORT_DOWN"}  # refined: the new cable-error message added
    port = next(c for c in changes["changes"] if c["label"] == "INTERCONNECT_NETWORKING.IB.PORT_DOWN")
    assert any("Cable\\s+error" in s for s in port["fields"]["signatures"]["+"])
    target = tmp_path / "taxonomy.json"
    target.write_text(json.dumps(read_taxonomy_file()))
    code, text = run("taxonomy", "apply", out, "--to", target)  # no --yes: asks, and "no" changes nothing
    assert code == 1 and read_taxonomy_file(target) == read_taxonomy_file()
    code, text = run("taxonomy", "apply", out, "--to", target, "--yes")
    assert code == 0, text
    assert read_taxonomy_file(target) == read_taxonomy_file(out)
    assert read_taxonomy_file(target.with_suffix(".json.bak")) == read_taxonomy_file()


def test_growth_table_and_plot(tmp_path: Path) -> None:
    records = [r for _, r in read_history(FIX / "history.jsonl").records]
    result = builder.build(records, None, library=builder.library_from(read_taxonomy_file()))
    rows, undated = grow.growth(result.labelled)
    assert undated == 0
    assert [r.month for r in rows] == ["2025-01", "2025-02", "2025-03", "2025-04"]
    assert [len(r.new_labels) for r in rows][:2] == [2, 1]  # February's ECC label is a merged near-duplicate
    assert rows[-1].total_labels == len(set(result.leaf_labels()))
    png = grow.plot(rows, tmp_path / "growth.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, text = run("taxonomy", "growth", "--history", FIX / "history.csv", "--skip-bad")
    assert code == 0 and "| 2025-05 | 2 | 2 | 2 |" in text


def test_eval_refuses_a_candidate_taxonomy_that_does_not_validate(tmp_path: Path) -> None:
    from agent.cli import eval_cmd

    app = typer.Typer()
    app.command()(eval_cmd.eval_command)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "ROOT", "description": "x", "children": [
        {"name": "GPU", "description": "d", "severity": "high", "signatures": [], "checks": [], "runbook": "r"}]}))
    result = runner.invoke(app, ["--incidents", str(FIX / "history.jsonl"), "--taxonomy", str(bad)])
    assert result.exit_code == 2 and "no check reachable" in result.output
