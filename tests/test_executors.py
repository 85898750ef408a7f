"""Executors and the runner: local, simulated and real SSH (sshd on 127.0.0.1), timeouts, approval,
cache, bad output and cross-host comparison."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from agent.checks.manifest import LIB_SCRIPTS, CheckSpec, Manifest, load_manifest
from agent.checks.runner import CheckRunner
from agent.executors.hosts import HostSpecError, SshOptions, executors_for, parse_ssh
from agent.executors.local import LocalExecutor
from agent.executors.ssh import SshExecutor, SshTarget
from agent.inventory import HostInventory, PciGpu
from agent.models import Verdict
from agent.paths import SCRIPTS_DIR
from agent.sim.scenario import create_scenario
from tests.sshd import Sshd, keygen, start_sshd

PROBE = '''
import checklib

def body(c):
    cmd = c.run(["lsmod"])
    if cmd.missing:
        c.unknown(cmd.why())
    c.metrics["nvidia_loaded"] = any(l.split()[0] == "nvidia" for l in cmd.out.splitlines()[1:] if l.strip())
    c.metrics["sysroot_version"] = (c.read("/proc/driver/nvidia/version") or "").strip()[:40]
    if not c.metrics["nvidia_loaded"]:
        c.fail("module", "nvidia", "nvidia kernel module not loaded")

checklib.main(CHECK_NAME, body)
'''
HANG = 'import time\ntime.sleep(60)\n'
GARBAGE = 'print("this is not json")\n'
MISLABELLED = 'import checklib\ncheck = checklib.Check("other_name")\ncheck.finish()\n'


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scripts")
    for lib in LIB_SCRIPTS:
        shutil.copy(SCRIPTS_DIR / lib, root / lib)
    for name, text in (("probe_modules.py", PROBE.replace("CHECK_NAME", '"probe_modules"')),
                       ("bench.py", PROBE.replace("CHECK_NAME", '"bench"')),
                       ("hang.py", HANG), ("garbage.py", GARBAGE), ("mislabelled.py", MISLABELLED)):
        (root / name).write_text(text)
    return root


def spec(scripts: Path, cid: str, script: str, tier: str = "passive", timeout: float = 30,
         compare: list[str] | None = None) -> CheckSpec:
    return CheckSpec(id=cid, script=str(scripts / script), description=f"test check {cid}", nodes=["GPU"],
                     tier=tier, timeout_s=timeout, compare=compare or [])


@pytest.fixture(scope="module")
def manifest(scripts: Path) -> Manifest:
    return Manifest(checks=[spec(scripts, "probe_modules", "probe_modules.py", compare=["nvidia_loaded"]),
                            spec(scripts, "hang", "hang.py", timeout=2),
                            spec(scripts, "garbage", "garbage.py"),
                            spec(scripts, "mislabelled", "mislabelled.py"),
                            spec(scripts, "bench", "bench.py", tier="active")])


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sim") / "two"
    create_scenario(root, [{"fault": "driver.module_not_loaded", "host": "node-2"}], [],
                    hosts=["node-1", "node-2"])
    return root


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


def ssh_target(sshd: Sshd, known_hosts: Path, **kw: object) -> SshTarget:
    return SshTarget(user=sshd.user, host="127.0.0.1", port=sshd.port, key_file=str(sshd.client_key),
                     known_hosts=str(known_hosts), connect_timeout=5, **kw)  # type: ignore[arg-type]


# ---- simulated hosts and the runner ------------------------------------------------------------
def test_sim_hosts_fan_out_and_compare(scenario: Path, manifest: Manifest) -> None:
    runner = CheckRunner(executors_for([f"sim:{scenario}"]), manifest=manifest)
    results = {r.host: r for r in runner.run(["probe_modules"])}
    assert set(results) == {"node-1", "node-2"}
    assert results["node-1"].metrics["nvidia_loaded"] is True
    assert results["node-2"].verdict == Verdict.FAIL
    # the runner's cross-host comparison marks the odd host out (no majority with two hosts: both)
    assert any(f.id == "cross_host_nvidia_loaded" for f in results["node-1"].findings)
    assert results["node-1"].verdict == Verdict.FAIL
    assert len(results["node-1"].output_sha256) == 64


def test_cache_and_approval(scenario: Path, manifest: Manifest) -> None:
    asked: list[str] = []

    def approve(check: CheckSpec, host: str) -> bool:
        asked.append(f"{host}:{check.id}")
        return host == "node-1"

    runner = CheckRunner(executors_for([f"sim:{scenario}"]), manifest=manifest, approve=approve)
    first = {r.host: r for r in runner.run(["bench"])}
    assert sorted(asked) == ["node-1:bench", "node-2:bench"]
    assert first["node-1"].verdict == Verdict.PASS and first["node-1"].tier == "active"
    refused = first["node-2"]
    assert refused.verdict == Verdict.UNKNOWN and "approv" in refused.reason
    again = runner.run(["bench"], hosts=["node-1"])[0]
    assert again.cached and len(asked) == 2

    no_approval = CheckRunner(executors_for([f"sim:{scenario}"]), manifest=manifest)
    for result in no_approval.run(["bench"]):
        assert result.verdict == Verdict.UNKNOWN and "not approved" in result.reason


def gpu_box(runner: CheckRunner, host: str = "local") -> CheckRunner:
    """These tests are about the runner, the executors and scripts, not the host: take this machine for a GPU node
    (its real inventory would say it cannot be checked, and nothing would run)."""
    runner.adopt(HostInventory(host=host, pci_source="sysfs", driver_loaded=True,
                               gpus_pci=[PciGpu(bus_id="0000:18:00.0", device_id="2330")]))
    return runner


def test_bad_script_output_is_unknown(manifest: Manifest) -> None:
    runner = gpu_box(CheckRunner([LocalExecutor()], manifest=manifest))
    garbage, mislabelled = runner.run(["garbage", "mislabelled"])
    assert garbage.verdict == Verdict.UNKNOWN and "evidence object" in garbage.reason
    assert mislabelled.verdict == Verdict.UNKNOWN and "other_name" in mislabelled.reason


def test_local_hung_script_times_out(manifest: Manifest) -> None:
    start = time.monotonic()
    result = gpu_box(CheckRunner([LocalExecutor()], manifest=manifest)).run(["hang"])[0]
    assert time.monotonic() - start < 10
    assert result.verdict == Verdict.UNKNOWN and "timed out" in result.reason


def test_real_manifest_is_consistent() -> None:
    manifest = load_manifest()
    assert len(manifest.checks) >= 22
    assert len(set(manifest.ids())) == len(manifest.ids())
    for check in manifest.checks:
        assert check.script_path.exists(), f"{check.id}: missing script {check.script}"
        assert check.nodes, check.id


# ---- host specs ----------------------------------------------------------------------------------
def test_host_spec_parsing(scenario: Path) -> None:
    target = parse_ssh("ssh://ops@gpu-7:2222?env=/opt/sim/activate", SshOptions(key_file="/k"))
    assert (target.user, target.host, target.port, target.key_file, target.remote_env) == (
        "ops", "gpu-7", 2222, "/k", "/opt/sim/activate")
    assert target.trust_new_host_keys is False
    for bad in ("ftp://x", "gpu-7", "ssh://x?foo=1", "sim:/nonexistent"):
        with pytest.raises(HostSpecError):
            executors_for([bad])
    with pytest.raises(HostSpecError):
        executors_for([f"sim:{scenario}", f"sim:{scenario}"])


# ---- real SSH -------------------------------------------------------------------------------------
def test_ssh_runs_checks_on_simulated_host(sshd: Sshd, scenario: Path, manifest: Manifest, tmp_path: Path) -> None:
    known = sshd.known_hosts(tmp_path / "known_hosts")
    over_ssh = SshExecutor(ssh_target(sshd, known, remote_env=str(scenario / "node-2" / "activate")))
    try:
        result = CheckRunner([over_ssh], manifest=manifest).run(["probe_modules"])[0]
    finally:
        over_ssh.close()
    assert result.host == f"ssh://{sshd.user}@127.0.0.1:{sshd.port}"
    assert result.verdict == Verdict.FAIL, result
    assert result.metrics["nvidia_loaded"] is False
    local = CheckRunner(executors_for([f"sim:{scenario}/node-2"]), manifest=manifest).run(["probe_modules"])[0]
    assert (local.verdict, local.findings[0].message) == (result.verdict, result.findings[0].message)


def test_ssh_inventory_learns_the_remote_host(sshd: Sshd, scenario: Path, tmp_path: Path) -> None:
    known = sshd.known_hosts(tmp_path / "known_hosts")
    gpu_node = SshExecutor(ssh_target(sshd, known, remote_env=str(scenario / "node-1" / "activate")))
    this_machine = SshExecutor(ssh_target(sshd, known))
    try:
        [found] = CheckRunner([gpu_node]).take_inventory().values()
        runner = CheckRunner([this_machine])
        [plain] = runner.take_inventory().values()
        [result] = runner.run(["gpu_inventory"])
    finally:
        gpu_node.close()
        this_machine.close()
    assert (found.profile, found.values["gpu_count"], found.cannot_check) == ("H100-SXM-8", 8, "")
    if not Path("/proc/driver/nvidia").exists():  # this machine over SSH: a real host without a GPU
        assert "no NVIDIA GPU and no NVIDIA driver" in plain.cannot_check
        assert result.verdict == Verdict.UNKNOWN and result.reason.startswith("could not check ssh://")


def test_ssh_host_key_mismatch_is_refused(sshd: Sshd, manifest: Manifest, tmp_path: Path) -> None:
    keygen(tmp_path / "other")
    other = " ".join((tmp_path / "other.pub").read_text().split()[:2])
    known = sshd.known_hosts(tmp_path / "known_hosts", other)
    executor = SshExecutor(ssh_target(sshd, known, trust_new_host_keys=True))
    result = CheckRunner([executor], manifest=manifest).run(["probe_modules"])[0]
    assert result.verdict == Verdict.UNKNOWN
    assert "host key mismatch" in result.reason


def test_ssh_unknown_host_key_needs_explicit_trust(sshd: Sshd, manifest: Manifest, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    refused = CheckRunner([SshExecutor(ssh_target(sshd, known))], manifest=manifest).run(["probe_modules"])[0]
    assert refused.verdict == Verdict.UNKNOWN and "--trust-new-host-keys" in refused.reason
    trusting = SshExecutor(ssh_target(sshd, known, trust_new_host_keys=True))
    try:
        accepted = gpu_box(CheckRunner([trusting], manifest=manifest), trusting.name).run(["probe_modules"])[0]
    finally:
        trusting.close()
    assert accepted.verdict != Verdict.UNKNOWN or "lsmod" in accepted.reason
    assert sshd.host_pub.split()[1] in known.read_text()


def test_ssh_unreachable_host_is_unknown_within_timeout(manifest: Manifest, tmp_path: Path) -> None:
    from tests.sshd import free_port

    target = SshTarget(user="nobody", host="127.0.0.1", port=free_port(), known_hosts=str(tmp_path / "kh"),
                       connect_timeout=3)
    start = time.monotonic()
    results = CheckRunner([SshExecutor(target)], manifest=manifest).run(["probe_modules", "garbage"])
    assert time.monotonic() - start < 8
    for result in results:
        assert result.verdict == Verdict.UNKNOWN and "cannot reach" in result.reason


def test_ssh_hung_script_is_unknown_within_timeout(sshd: Sshd, manifest: Manifest, tmp_path: Path) -> None:
    executor = SshExecutor(ssh_target(sshd, sshd.known_hosts(tmp_path / "known_hosts")))
    start = time.monotonic()
    try:
        result = gpu_box(CheckRunner([executor], manifest=manifest), executor.name).run(["hang"])[0]
    finally:
        executor.close()
    assert time.monotonic() - start < 15
    assert result.verdict == Verdict.UNKNOWN and "timed out" in result.reason
