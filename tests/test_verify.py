"""The evidence bundle and `aidai verify`, on simulated hosts and over a real sshd on 127.0.0.1.

One diagnosis of a simulated H100 with an uncorrectable ECC error on GPU 5 (module fixture) is verified in rounds, as
an on-call engineer would: before the fix (still failing), with nvidia-smi gone (could not check), with the host gone
(could not check), after the fix (cleared), and with the bundle tampered with. A second diagnosis runs over SSH.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.audit import read
from agent.bundle import MANIFEST, check_bundle, load_bundle
from agent.cli.main import app
from agent.diagnosis import Diagnoser
from agent.incident import Incident
from agent.models import CheckResult, Finding, Verdict
from agent.options import DiagnoseOptions
from agent.report import Report
from agent.runs import load_rounds, runs_dir
from agent.sim.scenario import create_scenario
from agent.verify import ConfirmingFinding, judge_cause, judge_check
from tests.sshd import Sshd, start_sshd

ECC_TEXT = ("Training crashed after 3 hours with `RuntimeError: CUDA error: uncorrectable ECC error encountered` on "
            "local rank 5; restarting the job on the same VM fails immediately.")
ECC_FAULT = [{"fault": "gpu.ecc_uncorrectable", "gpu": 5}]
ECC = "GPU.MEMORY.UNCORRECTABLE_ECC"
SLOW = "GPU.PERFORMANCE.SLOW_GPU_STRAGGLER"

cli = CliRunner(env={"COLUMNS": "200"})


def diagnose(hosts: list[str], data: Path, ssh: dict[str, object] | None = None) -> Report:
    # no history and no KB: the ECC is found by the taxonomy walk, without Chroma
    options = DiagnoseOptions(hosts=hosts, data_dir=str(data), history=False, knowledge=False, ssh=ssh or {})
    diagnoser = Diagnoser(options)
    try:
        return diagnoser.run(Incident(text=ECC_TEXT, hosts=hosts))
    finally:
        diagnoser.close()
        for executor in diagnoser.runner.executors.values():
            executor.close()


def verify(run_id: str, data: Path, *args: str) -> tuple[int, dict]:
    result = cli.invoke(app, ["verify", run_id, "--data-dir", str(data), "--json", *args])
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def statuses(round_: dict) -> dict[str, str]:
    return {c["label"]: c["status"] for c in round_["causes"]}


def check_status(round_: dict, label: str, check: str) -> dict:
    cause = next(c for c in round_["causes"] if c["label"] == label)
    return next(k for k in cause["checks"] if k["result"]["check"] == check)


@pytest.fixture(scope="module")
def ecc_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Report]:
    root = tmp_path_factory.mktemp("sim") / "ecc"
    create_scenario(root, ECC_FAULT)
    data = tmp_path_factory.mktemp("data")
    report = diagnose([f"sim:{root}"], data)
    assert report.resolved and report.root_causes[0].label == ECC, report.explanation
    return root, data, report


# ---- the evidence bundle -----------------------------------------------------------------------------------------
def test_bundle_keeps_the_confirming_outputs_hashed(ecc_run: tuple[Path, Path, Report], tmp_path: Path) -> None:
    _, data, report = ecc_run
    runs = runs_dir(DiagnoseOptions(data_dir=str(data)))
    info = report.evidence_bundle
    assert info is not None and not info.error and info.results >= 2
    bundle = Path(info.path)
    assert bundle == runs / f"{report.run_id}.evidence"
    assert stat.S_IMODE(bundle.stat().st_mode) == 0o700
    manifest = load_bundle(bundle)
    # the manifest's own hash is in the audit log, and every file's hash is in the manifest
    assert hashlib.sha256((bundle / MANIFEST).read_bytes()).hexdigest() == info.manifest_sha256
    events, _ = read(runs / f"{report.run_id}.audit.jsonl")
    [logged] = [e for e in events if e["event"] == "evidence_bundle"]
    assert logged["manifest_sha256"] == info.manifest_sha256
    conclusion = next(e for e in events if e["event"] == "conclusion")
    assert logged["seq"] < conclusion["seq"]  # kept before the conclusion was told
    assert check_bundle(bundle, info.manifest_sha256) == []
    by_key = {(r.host, r.check): r for r in report.results}
    kept = {(r["host"], r["check"]) for r in manifest["results"]}
    assert {("node-1", "gpu_memory_errors"), ("node-1", "xid_scan")} <= kept
    for entry in manifest["results"]:
        assert entry["raw"]["kept"] and entry["commands"] and entry["tool_versions"]["driver"] == "535.161.08"
        for item in entry["files"]:
            path = bundle / item["name"]
            assert hashlib.sha256(path.read_bytes()).hexdigest() == item["sha256"]
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
        # evidence.json is the script's stdout byte for byte: its hash is the output hash the audit log has
        evidence = bundle / entry["folder"] / "evidence.json"
        expected = by_key[(entry["host"], entry["check"])].output_sha256
        assert hashlib.sha256(evidence.read_bytes()).hexdigest() == expected
    # the whole output, not the 4 KB excerpt: nvidia-smi -q of eight GPUs, and the Xid line in the kernel log
    memory = next(e for e in manifest["results"] if e["check"] == "gpu_memory_errors")
    full_q = next(f for f in memory["files"] if f["what"].startswith("stdout of `nvidia-smi -q`"))
    assert full_q["bytes"] > 16 * 1024 and "GPU 00000000:AB:00.0" in (bundle / full_q["name"]).read_text()
    xid = next(e for e in manifest["results"] if e["check"] == "xid_scan")
    assert any("NVRM: Xid" in (bundle / f["name"]).read_text() and ": 48," in (bundle / f["name"]).read_text()
               for f in xid["files"] if f["name"].endswith(".stdout"))
    assert next(c["label"] for c in manifest["causes"] if c["role"] == "root_cause") == ECC
    assert not (runs / f"{report.run_id}.spool").exists()  # the spool is gone once the bundle is written
    # tampering is detected: a changed output, and a changed manifest
    copy = tmp_path / "copy"
    shutil.copytree(bundle, copy)
    changed = copy / full_q["name"]
    changed.write_text(changed.read_text().replace("Pending                           : Yes", "Pending : No"))
    assert any("changed" in p for p in check_bundle(copy, info.manifest_sha256))
    (copy / MANIFEST).write_text((copy / MANIFEST).read_text().replace('"verdict": "FAIL"', '"verdict": "PASS"'))
    assert any(MANIFEST in p for p in check_bundle(copy, info.manifest_sha256))


def test_bundle_of_a_run_resumed_by_another_diagnoser(tmp_path: Path) -> None:
    """A run that waits for an approval ends its process (the server's workers do); the one that resumes it writes
    the bundle from the outputs the first one spooled to disk."""
    root = tmp_path / "ecc"
    # two independent causes the incident names: ranking them is what the load tests are asked for
    create_scenario(root, [*ECC_FAULT, {"fault": "nvlink.link_down", "gpu": 2}])
    text = ECC_TEXT + " NCCL also logged NVLink errors, Xid 74 on GPU 2."
    options = DiagnoseOptions(hosts=[f"sim:{root}"], data_dir=str(tmp_path / "data"), history=False,
                              knowledge=False, approval="ask")
    first = Diagnoser(options)
    with pytest.raises(RuntimeError, match="stopped for approval"):
        first.run(Incident(text=text, hosts=options.hosts), run_id="waits-1")
    first.close()
    spool = runs_dir(options) / "waits-1.spool"
    assert any(spool.iterdir()) and stat.S_IMODE(spool.stat().st_mode) == 0o700
    second = Diagnoser(options)
    try:
        report = second.resume("waits-1", lambda payload: {c["id"]: False for c in payload.get("checks", [])})
    finally:
        second.close()
    assert ECC in [c.label for c in report.root_causes]
    info = report.evidence_bundle
    assert info is not None and info.results >= 2 and not info.not_kept and not info.error
    assert check_bundle(Path(info.path), info.manifest_sha256) == []
    assert not spool.exists()


def test_ticket_lists_the_bundle(ecc_run: tuple[Path, Path, Report], tmp_path: Path) -> None:
    _, data, report = ecc_run
    result = cli.invoke(app, ["diagnose", "--resume", report.run_id, "--data-dir", str(data), "--ticket",
                              str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    markdown = (tmp_path / "t.md").read_text()
    assert f"`{report.run_id}.evidence`" in markdown and report.evidence_bundle is not None
    assert report.evidence_bundle.manifest_sha256 in markdown
    ticket = json.loads((tmp_path / "t.json").read_text())
    assert ticket["evidence_bundle"]["manifest_sha256"] == report.evidence_bundle.manifest_sha256


# ---- verify after fix: one run, verified in rounds -----------------------------------------------------------
def test_verify_rounds_before_and_after_the_fix(ecc_run: tuple[Path, Path, Report]) -> None:
    root, data, report = ecc_run
    runs = runs_dir(DiagnoseOptions(data_dir=str(data)))

    # 1. nothing was done: the counter is still set; the Xid line that confirmed it predates the window
    code, first = verify(report.run_id, data)
    assert code == 1 and first["status"] == "still failing"
    assert statuses(first)[ECC] == "still failing"
    cause = next(c for c in first["causes"] if c["label"] == ECC)
    assert "gpu_memory_errors:ecc_uncorrectable@GPU5" in cause["why"]
    assert check_status(first, ECC, "xid_scan")["status"] == "cleared"  # an old Xid line is history, not "now"
    assert first["since_from"].startswith("the diagnosis' end") and first["bundle"]["status"] == "intact"

    # 1b. counted from before the incident (--since), the same Xid line is inside the window again
    earlier = (datetime.now(UTC) - timedelta(hours=2)).isoformat(timespec="seconds")
    code, wide = verify(report.run_id, data, "--since", earlier)
    assert code == 1 and check_status(wide, ECC, "xid_scan")["status"] == "still failing"

    # 2. nvidia-smi gone from the host: the counters cannot be read, which is never "cleared"
    tool = root / "bin" / "nvidia-smi"
    saved = tool.read_bytes()
    tool.unlink()
    try:
        code, blind = verify(report.run_id, data)
    finally:
        tool.write_bytes(saved)
        tool.chmod(0o755)
    assert code == 1 and blind["status"] != "cleared"
    remap = next(c for c in blind["causes"] if c["label"] == "GPU.MEMORY.ROW_REMAP_PENDING")
    assert remap["status"] == "could not check" and "nvidia-smi not found" in remap["why"]

    # 3. the host is gone (its scenario removed): could not check, with the reason
    moved = root.with_name("ecc-away")
    root.rename(moved)
    try:
        code, gone = verify(report.run_id, data)
    finally:
        moved.rename(root)
    assert code == 1 and set(statuses(gone).values()) == {"could not check"}
    assert "not among the run's hosts now" in gone["causes"][0]["why"]

    # 4. the fix: the same host, healthy again (the GPU reset applied the remap and cleared the volatile count)
    create_scenario(root)
    code, fixed = verify(report.run_id, data)
    assert code == 0 and fixed["status"] == "cleared", fixed
    assert set(statuses(fixed).values()) == {"cleared"}

    # every round is in verify.jsonl, the audit log and the run's ticket
    rounds = [r["status"] for r in load_rounds(runs, report.run_id)]
    assert len(rounds) == 5 and rounds[:2] == ["still failing"] * 2 and rounds[3:] == ["could not check", "cleared"]
    events, _ = read(runs / f"{report.run_id}.audit.jsonl")
    logged = [e for e in events if e["event"] == "verification"]
    assert len(logged) == 5 and logged[-1]["status"] == "cleared" and logged[-1]["causes"][ECC] == "cleared"
    assert any(e["event"] == "check" and e.get("node") == "verify" and e["exit_code"] == 0 for e in events)
    ticket = (runs / f"{report.run_id}.ticket.md").read_text()
    section = ticket.split("## Verification after fix", 1)[1].split("\n## ", 1)[0]
    assert section.count("\n5. ") == 1 and "**cleared**" in section and "**still failing**" in section
    assert "**could not check**" in section
    data_json = json.loads((runs / f"{report.run_id}.ticket.json").read_text())
    assert [v["status"] for v in data_json["verifications"]][-1] == "cleared"

    # 5. the bundle tampered with: the round says so (and still verifies)
    manifest = Path(report.evidence_bundle.path) / MANIFEST  # type: ignore[union-attr]
    manifest.write_text(manifest.read_text().replace('"verdict": "FAIL"', '"verdict": "PASS"'))
    code, tampered = verify(report.run_id, data)
    assert tampered["bundle"]["status"] == "altered" and tampered["since_from"].endswith("(its audit log)")


def test_verify_bad_input(ecc_run: tuple[Path, Path, Report], tmp_path: Path) -> None:
    _, data, report = ecc_run
    unknown = cli.invoke(app, ["verify", "no-such-run", "--data-dir", str(data)])
    assert unknown.exit_code == 2 and "no run 'no-such-run'" in unknown.output
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    for since in ("yesterday", future):
        bad = cli.invoke(app, ["verify", report.run_id, "--data-dir", str(data), "--since", since])
        assert bad.exit_code == 2 and "--since" in bad.output, bad.output
    # a run that could check nothing confirmed nothing: there is nothing to verify
    from tests.sshd import free_port

    empty = diagnose([f"ssh://nobody@127.0.0.1:{free_port()}"], tmp_path / "data", ssh={"connect_timeout": 3})
    assert not empty.root_causes and empty.evidence_bundle is None
    nothing = cli.invoke(app, ["verify", empty.run_id, "--data-dir", str(tmp_path / "data")])
    assert nothing.exit_code == 2 and "nothing to verify" in nothing.output


# ---- judging, alone ---------------------------------------------------------------------------------------------
def finding(fid: str, severity: str = "FAIL", entity: str = "GPU5") -> Finding:
    return Finding(id=fid, severity=severity, entity=entity, message=fid)


def test_judging_a_check_again() -> None:
    confirmed = [ConfirmingFinding(check="gpu_memory_errors", finding="row_remap_pending", entity="GPU5",
                                   severity="FAIL", host="node-1")]
    rules = ["gpu_memory_errors:row_remap_pending"]

    def again(verdict: Verdict, findings: list[Finding], reason: str = "") -> CheckResult:
        return CheckResult(check="gpu_memory_errors", host="node-1", verdict=verdict, findings=findings, reason=reason)

    assert judge_check(again(Verdict.PASS, []), confirmed, rules).status == "cleared"
    # still pending, only older than the window: the state is there
    dated = judge_check(again(Verdict.PASS, [finding("row_remap_pending_history", "INFO")]), confirmed, rules)
    assert dated.status == "still failing"
    # the leaf's rules match a fresh finding on another GPU: the cause is there
    assert judge_check(again(Verdict.FAIL, [finding("row_remap_pending", entity="GPU2")]), confirmed,
                       rules).status == "still failing"
    # an unrelated finding does not keep the cause
    assert judge_check(again(Verdict.WARN, [finding("ecc_disabled", "WARN")]), confirmed, rules).status == "cleared"
    unknown = judge_check(again(Verdict.UNKNOWN, [], "active check was not approved"), confirmed, rules)
    assert unknown.status == "could not check"
    # a cause is cleared only when every check is; a check that could not run is never taken for cleared
    cleared = judge_check(again(Verdict.PASS, []), confirmed, rules)
    assert judge_cause("X", "root_cause", [cleared, unknown]).status == "could not check"
    assert judge_cause("X", "root_cause", [cleared, dated, unknown]).status == "still failing"
    assert judge_cause("X", "root_cause", [cleared]).status == "cleared"
    assert judge_cause("X", "root_cause", []).status == "could not check"


def test_active_check_runs_again_only_with_approval(tmp_path: Path) -> None:
    """A slow GPU is confirmed by the GEMM probe, an active check: after the fix, verify runs it again only with
    --approve-active; without it the cause is "could not check", never "cleared"."""
    root = tmp_path / "slow"
    create_scenario(root, [{"fault": "gpu.slow", "gpu": 3}])
    options = DiagnoseOptions(hosts=[f"sim:{root}"], data_dir=str(tmp_path / "data"), history=False, knowledge=False,
                              approval="all")
    diagnoser = Diagnoser(options)
    try:
        report = diagnoser.run(Incident(text="Throughput dropped 20%: rank 3 is a straggler, its iterations are "
                                             "slower than the other ranks", hosts=options.hosts))
    finally:
        diagnoser.close()
    assert report.root_causes and report.root_causes[0].label == SLOW, report.explanation
    assert any(e.startswith("gpu_exec:") for e in report.root_causes[0].evidence)
    create_scenario(root)  # the GPU was replaced
    code, asked = verify(report.run_id, tmp_path / "data")
    assert code == 1 and statuses(asked)[SLOW] == "could not check"
    assert check_status(asked, SLOW, "gpu_exec")["result"]["verdict"] == "UNKNOWN"
    assert "approv" in check_status(asked, SLOW, "gpu_exec")["result"]["reason"]
    code, approved = verify(report.run_id, tmp_path / "data", "--approve-active")
    assert code == 0 and statuses(approved)[SLOW] == "cleared", approved
    events, _ = read(runs_dir(options) / f"{report.run_id}.audit.jsonl")
    decisions = [e["decision"] for e in events if e["event"] == "approval" and e.get("node") == "verify"]
    assert decisions == ["declined", "approved"]


# ---- over a real sshd on loopback ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


def test_verify_over_ssh(sshd: Sshd, tmp_path: Path) -> None:
    root = tmp_path / "node"
    create_scenario(root, ECC_FAULT)
    known = sshd.known_hosts(tmp_path / "known_hosts")
    spec = f"ssh://{sshd.user}@127.0.0.1:{sshd.port}?env={root / 'activate'}"
    ssh = {"key_file": str(sshd.client_key), "known_hosts": str(known)}
    report = diagnose([spec], tmp_path / "data", ssh=ssh)
    assert report.resolved and report.root_causes[0].label == ECC
    assert report.evidence_bundle is not None and report.evidence_bundle.results >= 2
    assert not report.evidence_bundle.not_kept  # the whole outputs came back over SSH

    create_scenario(root)  # fixed
    code, fixed = verify(report.run_id, tmp_path / "data")
    assert code == 0 and fixed["status"] == "cleared"

    # the node behind the address is now this GPU-less machine (the sim environment is gone): the checks cannot see
    # a GPU, which says nothing about the fault
    (root / "activate").write_text(": # a plain host\n")
    os.chmod(root / "activate", 0o644)
    code, plain = verify(report.run_id, tmp_path / "data")
    if not Path("/proc/driver/nvidia").exists():
        assert code == 1 and set(statuses(plain).values()) == {"could not check"}, plain
        assert "no NVIDIA GPU and no NVIDIA driver" in plain["causes"][0]["why"]

    sshd.stop()  # unreachable
    code, down = verify(report.run_id, tmp_path / "data")
    assert code == 1 and set(statuses(down).values()) == {"could not check"}
    assert "cannot reach" in down["causes"][0]["why"]
