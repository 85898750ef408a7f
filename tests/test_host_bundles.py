"""Hosts recorded once, diagnosed anywhere: the one-file collector (agent/collect) records what the passive checks see
on a host; `bundle:FILE` replays it. A bundle of a simulated host gives every check the verdict the live run gives,
on every shipped profile; what the recording lacks is UNKNOWN "not in the bundle"; secrets never leave the host."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from agent.checks.manifest import load_profiles
from agent.checks.runner import CheckRunner
from agent.collect.bundle import BundleError, load
from agent.collect.package import build_script
from agent.executors.base import Executor
from agent.executors.hosts import HostSpecError, executors_for
from agent.executors.recorded import RecordedExecutor
from agent.executors.sim import sim_executors
from agent.sim.scenario import create_scenario

# one scenario per profile, a fault each where the profile has what it breaks (or noise), in the three views
SCENARIOS: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]], str]] = {
    "H100-SXM-8": ([{"fault": "nvlink.link_down", "gpu": 2, "links": [0, 1]}], [], "vm"),
    "H200-SXM-8": ([{"fault": "gpu.ecc_uncorrectable", "gpu": 3}], [], "bare-metal"),
    "A100-SXM-8": ([{"fault": "fabricmanager.down"}], [], "bare-metal"),
    "B200-SXM-8": ([{"fault": "gpu.fallen_off_bus", "gpu": 1}], [], "bare-metal"),
    "H100-PCIe": ([{"fault": "pcie.link_degraded", "gpu": 0}], [], "bare-metal"),
    "A100-PCIe-40": ([{"fault": "driver.module_not_loaded"}], [], "bare-metal"),
    "A100-PCIe-80": ([{"fault": "user.illegal_memory_access", "xid": 31, "gpu": 0}], [], "vm"),
    "L40S": ([{"fault": "gpu.thermal_throttle", "gpu": 0}], [], "bare-metal"),
    "L4": ([], [], "vm"),
    "A10G": ([{"fault": "driver.persistence_off"}], [], "bare-metal"),
    "RTX-6000-Ada": ([], [{"fault": "noise.old_xid13"}], "container"),
}


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_script(tmp_path_factory.mktemp("collector") / "aidai_collect.py")


def collect(executor: Executor, collector: Path, check_params: dict[str, Any] | None = None,
            redact: bool = True) -> bytes:
    params: dict[str, Any] = {"encoding": "base64", "redact": redact}
    if check_params is not None:
        params["check_params"] = check_params
    run = executor.run_script(collector, params, 300)
    assert run.rc == 0 and not run.error, run.stderr[-3000:]
    return base64.b64decode(run.stdout)


def verdicts(executor: Executor) -> tuple[dict[str, tuple[str, str]], CheckRunner]:
    runner = CheckRunner([executor])
    runner.take_inventory()
    return {r.check: (r.verdict.value, r.summary) for r in runner.run(runner.passive_ids())}, runner


def test_every_profile_is_in_the_table() -> None:
    assert set(SCENARIOS) == set(load_profiles())


@pytest.mark.parametrize("profile", sorted(SCENARIOS))
def test_a_replayed_bundle_gives_the_live_verdict_of_every_check(tmp_path: Path, collector: Path,
                                                                   profile: str) -> None:
    faults, noise, view = SCENARIOS[profile]
    create_scenario(tmp_path / "s", faults, noise, profile, view=view)
    (host,) = sim_executors(tmp_path / "s")
    live, runner = verdicts(host)
    # half the profiles as a customer collects (the standalone file, no expectations: every profile value null), half
    # as `aidai collect --host` does (each check gets the params aidai would give it there)
    standalone = sorted(SCENARIOS).index(profile) % 2 == 0
    params = None if standalone else {c: runner._params(host.name) for c in runner.passive_ids()}
    bundle = tmp_path / "host.tar.gz"
    bundle.write_bytes(collect(host, collector, params))
    replay = RecordedExecutor(bundle)
    try:
        assert replay.name == host.name
        replayed, _ = verdicts(replay)
    finally:
        replay.close()
    differ = {c: (live[c], replayed.get(c)) for c in live if replayed.get(c, ("",))[0] != live[c][0]}
    assert not differ, differ
    assert len(live) >= 25
    if faults:  # the scenario's fault is seen (so the agreement covers a finding, not only "no problem")
        assert {v for v, _ in live.values()} & {"FAIL", "WARN"}, live


def test_the_bundle_holds_argv_outputs_files_and_sha256s(tmp_path: Path, collector: Path) -> None:
    create_scenario(tmp_path / "s", [{"fault": "gpu.ecc_uncorrectable", "gpu": 3}], [], "H100-SXM-8")
    (host,) = sim_executors(tmp_path / "s")
    data = collect(host, collector)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        recording = json.load(tar.extractfile("recording.json"))  # type: ignore[arg-type]
        sums = tar.extractfile("SHA256SUMS").read().decode()  # type: ignore[union-attr]
    assert {"manifest.json", "recording.json", "SHA256SUMS", "results/host_inventory.json",
            "results/xid_scan.json"} <= set(names)
    assert {m["name"] for m in manifest["members"]} == set(names) - {"manifest.json", "SHA256SUMS"}
    assert all(f"  {n}" in sums for n in names if n != "SHA256SUMS")
    run = next(r for r in recording["runs"] if r["run"][:2] == ["nvidia-smi", "-q"])
    assert run["rc"] == 0 and "Attached GPUs" in run["stdout"] and isinstance(run["run"], list)
    assert recording["hostname"] == host.name and recording["files"]
    assert {c["id"] for c in manifest["checks"]} >= {"host_inventory", "xid_scan", "gpu_memory_errors"}
    # standalone (no aidai params): the host's own verdicts are kept, the fault is seen on the host
    assert manifest["checks"] and next(c for c in manifest["checks"] if c["id"] == "gpu_memory_errors")["verdict"] \
        == "FAIL"


def test_a_tampered_bundle_is_refused(tmp_path: Path, collector: Path) -> None:
    create_scenario(tmp_path / "s", [], [], "L4")
    (host,) = sim_executors(tmp_path / "s")
    data = collect(host, collector)
    members = []
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            blob = tar.extractfile(member).read()  # type: ignore[union-attr]
            if member.name == "recording.json":
                blob = blob.replace(b'"rc": 0', b'"rc": 1', 1)
            members.append((member, blob))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for member, blob in members:
            member.size = len(blob)
            tar.addfile(member, io.BytesIO(blob))
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(out.getvalue())
    with pytest.raises(BundleError, match="sha256"):
        load(bad)
    with pytest.raises(HostSpecError, match="sha256"):
        executors_for([f"bundle:{bad}"])
    (tmp_path / "not.txt").write_text("hello\n")
    with pytest.raises(HostSpecError, match="neither an aidai host bundle"):
        executors_for([f"bundle:{tmp_path / 'not.txt'}"])


def test_what_the_bundle_lacks_is_unknown_not_in_the_bundle(tmp_path: Path, collector: Path) -> None:
    create_scenario(tmp_path / "s", [], [], "H100-SXM-8")
    (host,) = sim_executors(tmp_path / "s")
    bundle = tmp_path / "host.tar.gz"
    # a collection that ran only the inventory and xid_scan
    runner = CheckRunner([host])
    runner.take_inventory()
    bundle.write_bytes(collect(host, collector, {"xid_scan": runner._params(host.name)}))
    (replay,) = executors_for([f"bundle:{bundle}"])
    try:
        replayed, _ = verdicts(replay)
    finally:
        replay.close()
    assert replayed["xid_scan"][0] == "PASS"
    for check in ("gpu_memory_errors", "nvlink_status", "topology"):
        verdict, summary = replayed[check]
        assert verdict == "UNKNOWN" and "not in the bundle" in summary, (check, summary)


def test_secrets_are_redacted_on_the_host_unless_asked_not_to(tmp_path: Path, collector: Path) -> None:
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    create_scenario(tmp_path / "s", [], [], "H100-SXM-8")
    (host,) = sim_executors(tmp_path / "s")
    host._env = {**(host._env or {}), "NCCL_DEBUG_FILE": f"/tmp/x?token={token}",  # type: ignore[attr-defined]
                 "CUDA_CACHE_PATH": f"password={token}"}
    kept = collect(host, collector, redact=False)
    assert token.encode() in gzip_text(kept)
    redacted = collect(host, collector)
    assert token.encode() not in gzip_text(redacted)
    with tarfile.open(fileobj=io.BytesIO(redacted)) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
    assert manifest["redacted"] is True and manifest["secrets_redacted"] >= 1


def gzip_text(data: bytes) -> bytes:
    import gzip

    return gzip.decompress(data)


def test_collect_on_this_gpu_less_machine_is_bounded_and_the_replay_could_not_check(tmp_path: Path,
                                                                                     collector: Path) -> None:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(collector), "--out", str(tmp_path / "here.tar.gz")],
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
    wall = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert wall < 120  # the issue asks <= 30 s; generous here: the CI machine is shared
    (local,) = executors_for(["local"])
    (replay,) = executors_for([f"bundle:{tmp_path / 'here.tar.gz'}"])
    try:
        live = CheckRunner([local])
        again = CheckRunner([replay])
        assert bool(live.take_inventory()["local"].cannot_check) == bool(
            again.take_inventory()[replay.name].cannot_check)
        if live.expectations["local"].cannot_check:  # no NVIDIA GPU here: both say they could not check, and why
            assert again.expectations[replay.name].cannot_check == live.expectations["local"].cannot_check
    finally:
        replay.close()


# ---- the command line: collect once, diagnose anywhere ------------------------------------------------------------
def test_collect_then_checks_and_diagnose_from_the_bundle(tmp_path: Path, data_dir: Path) -> None:
    from typer.testing import CliRunner

    from agent.cli.main import app

    cli = CliRunner(env={"COLUMNS": "200"})
    create_scenario(tmp_path / "s", [{"fault": "gpu.ecc_uncorrectable", "gpu": 3}], [], "H100-SXM-8")
    bundle = tmp_path / "node.tar.gz"
    made = cli.invoke(app, ["collect", "--host", f"sim:{tmp_path / 's'}", "--out", str(bundle)])
    assert made.exit_code == 0, made.output
    checks = cli.invoke(app, ["checks", "run", "gpu_memory_errors", "topology", "--host", f"bundle:{bundle}",
                              "--json"])
    assert checks.exit_code in (0, 1), checks.output
    by_id = {r["check"]: r for r in json.loads(checks.stdout)}
    assert by_id["gpu_memory_errors"]["verdict"] == "FAIL" and by_id["topology"]["verdict"] == "PASS"
    found = cli.invoke(app, ["diagnose", "the job died: CUDA error: uncorrectable ECC error encountered", "--host",
                             f"bundle:{bundle}", "--json", "--data-dir", str(data_dir)])
    assert found.exit_code == 0, found.output
    contract = json.loads(found.stdout)
    assert contract["resolved"] is True
    assert contract["root_causes"][0]["label"] == "GPU.MEMORY.UNCORRECTABLE_ECC"


def test_the_standalone_script_is_written_and_runs_without_aidai(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agent.cli.main import app

    script = tmp_path / "aidai_collect.py"
    made = CliRunner().invoke(app, ["collect", "--script", str(script)])
    assert made.exit_code == 0, made.output
    # a python3 with nothing of aidai's on its path (-S -I: no site-packages, no cwd, no PYTHON* variables)
    proc = subprocess.run([sys.executable, "-S", "-I", str(script), "--help"], capture_output=True, timeout=60,
                          cwd=tmp_path)
    assert proc.returncode == 0 and b"--no-redact" in proc.stdout


def test_collect_over_ssh_uploads_one_file_and_agrees_with_the_host(tmp_path: Path) -> None:
    from agent.collect.remote import collect_hosts
    from agent.executors.ssh import SshExecutor, SshTarget
    from tests.sshd import start_sshd

    create_scenario(tmp_path / "s", [{"fault": "driver.module_not_loaded"}], [], "A100-SXM-8")
    (sim,) = sim_executors(tmp_path / "s")
    live, _ = verdicts(sim)
    sshd = start_sshd(tmp_path / "sshd")
    try:
        known = sshd.known_hosts(tmp_path / "known_hosts")
        node = SshExecutor(SshTarget(user=sshd.user, host="127.0.0.1", port=sshd.port, key_file=str(sshd.client_key),
                                     known_hosts=str(known), connect_timeout=5,
                                     remote_env=str(tmp_path / "s" / "activate")))
        try:
            (done,) = collect_hosts([node])
        finally:
            node.close()
    finally:
        sshd.stop()
    assert not done.error and done.data[:2] == b"\x1f\x8b", done.error
    bundle = tmp_path / "over-ssh.tar.gz"
    bundle.write_bytes(done.data)
    replay = RecordedExecutor(bundle)
    try:
        replayed, _ = verdicts(replay)
    finally:
        replay.close()
    assert {c: v for c, (v, _) in replayed.items()} == {c: v for c, (v, _) in live.items()}
    assert live["driver_health"][0] == "FAIL"
