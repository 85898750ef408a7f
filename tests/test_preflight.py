"""Preflight against simulated hosts: every known-bad combination is flagged with its taxonomy label, a clean
profile gives nothing, signatures hide values but compare equal for equal environments."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from agent.incident import Incident
from agent.preflight import rules, run, signature
from agent.preflight.collect import HostEnv
from agent.preflight.tool import preflight_pretriage
from agent.sim.scenario import create_scenario
from agent.sim.tools import _versions
from agent.taxonomy import load_taxonomy

CASES = {
    "fw.nccl_regression": "FRAMEWORK_LIBRARY.NCCL.VERSION_REGRESSION",
    "driver.cuda_too_old": "SYSTEM_SOFTWARE.DRIVER.CUDA_DRIVER_MISMATCH",
    "cuda.arch_unsupported": "SYSTEM_SOFTWARE.CUDA.TOOLKIT_TOO_OLD_FOR_GPU_ARCH",
    "cuda.host_vm_mismatch": "SYSTEM_SOFTWARE.CUDA.HOST_VM_VERSION_MISMATCH",
    "netstack.ofed_hpcx_mismatch": "SYSTEM_SOFTWARE.NETWORK_STACK.OFED_HPCX_VERSION_MISMATCH",
    "driver.known_bug": "SYSTEM_SOFTWARE.DRIVER.DRIVER_BUG",
    "driver.gsp_bug": "SYSTEM_SOFTWARE.DRIVER.GSP_FIRMWARE_BUG",
    "container.toolkit_regression": "SYSTEM_SOFTWARE.CONTAINER_TOOLKIT.VERSION_REGRESSION",
    "fw.deepspeed_bug": "FRAMEWORK_LIBRARY.DEEPSPEED.BUG",
    "fw.accelerate_bug": "FRAMEWORK_LIBRARY.ACCELERATE.BUG",
}


@pytest.fixture(autouse=True)
def _salt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(signature.SALT_ENV, "test-salt")  # never create a salt file in the user's home


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("pre")
    out = {"clean": f"sim:{create_scenario(root / 'clean', []).root}"}
    for fault in CASES:
        out[fault] = f"sim:{create_scenario(root / fault, [{'fault': fault}]).root}"
    skew = create_scenario(root / "skew", [{"fault": "fw.nccl_version_skew"}], hosts=["node-1", "node-2", "node-3"])
    out["skew"] = f"sim:{skew.root}"
    return out


def test_clean_profile_flags_nothing(sims: dict[str, str]) -> None:
    report = run.run([sims["clean"]], salt=b"t")
    assert report.findings == [] and report.unavailable == {}
    env = report.hosts[0]
    assert env.gpu_count == 8 and "H100" in (env.gpu_model or "") and env.nccl and env.driver and env.ofed


@pytest.mark.parametrize("fault", sorted(CASES))
def test_each_known_bad_combination_is_flagged(sims: dict[str, str], fault: str) -> None:
    report = run.run([sims[fault]], salt=b"t")
    assert {f.label for f in report.findings} == {CASES[fault]}, report.findings
    assert all(f.severity in ("FAIL", "WARN") for f in report.findings)


def test_skew_names_the_odd_host(sims: dict[str, str]) -> None:
    report = run.run([sims["skew"]], salt=b"t")
    skew = {f.id: f for f in report.findings}
    assert skew["skew_nccl"].hosts == ["node-3"] and skew["skew_nccl"].severity == "WARN"
    assert skew["skew_nccl"].label == "FRAMEWORK_LIBRARY.NCCL.VERSION_MISMATCH_ACROSS_NODES"


def test_rule_labels_exist_and_tables_match_the_checks() -> None:
    data = rules.load_rules()
    labels = set(load_taxonomy().labels())
    used = [*data["version_labels"].values(), *(c["label"] for c in data["combinations"].values()),
            *data["skew"].values()]
    assert set(used) <= labels
    table = {str(k): v for k, v in data["min_driver_for_cuda"].items()}
    assert table == {".".join(map(str, k)): v for k, v in _versions.MIN_DRIVER}
    assert {int(k): v for k, v in data["driver_max_cuda"].items()} == dict(_versions.DRIVER_CUDA)
    assert data["versions"] and set(data["version_labels"]) <= set(data["versions"])


def test_arch_rule_accepts_ptx_and_same_major_sass() -> None:
    base = {"host": "h", "gpu_model": "NVIDIA H100 80GB HBM3"}
    assert rules.check_host(HostEnv(**base, arch_list=["sm_80", "compute_90"])) == []
    assert rules.check_host(HostEnv(**base, arch_list=["sm_90"])) == []
    assert [f.id for f in rules.check_host(HostEnv(**base, arch_list=["sm_80", "sm_86"]))] == ["arch_unsupported"]


def test_signature_hides_values_and_is_stable() -> None:
    env = HostEnv(host="gpu-node-17.customer.example", driver="535.161.08", nccl="2.18.5", torch="2.1.2",
                  nccl_env={"NCCL_SOCKET_IFNAME": "eth7"})
    a, b = signature.sign(env, b"salt-1"), signature.sign(env.model_copy(), b"salt-1")
    other = signature.sign(env.model_copy(update={"nccl": "2.20.5"}), b"salt-1")
    assert a == b and a.full != other.full and a.hardware == other.hardware
    assert signature.sign(env, b"salt-2").full != a.full
    text = a.model_dump_json()
    for secret in ("535.161", "2.18.5", "customer", "eth7"):
        assert secret not in text
    assert all(re.fullmatch(r"[0-9a-f]{16}|", v) for v in a.components.values())


def test_pretriage_tool_gives_findings_and_priors(sims: dict[str, str]) -> None:
    result = preflight_pretriage(Incident(text="NCCL hang", hosts=[sims["fw.nccl_regression"]]))
    assert result.status == "ok" and result.hosts == ["node-1"]
    assert result.priors == {"FRAMEWORK_LIBRARY.NCCL.VERSION_REGRESSION": 0.8}
    assert [f.severity for f in result.findings] == ["FAIL"]
    bad = preflight_pretriage(Incident(text="x", hosts=["ftp://nope"]))
    assert bad.status == "error" and "unknown host spec" in bad.reason


def test_cli_exit_codes(sims: dict[str, str]) -> None:
    import typer

    from agent.cli.preflight_cmd import preflight

    app = typer.Typer()
    app.command()(preflight)
    runner = CliRunner()
    clean = runner.invoke(app, ["--host", sims["clean"], "--json"])
    assert clean.exit_code == 0 and '"findings": []' in clean.stdout
    bad = runner.invoke(app, ["--host", sims["driver.cuda_too_old"]])
    assert bad.exit_code == 1 and "driver_too_old_for_cuda" in bad.stdout
    assert runner.invoke(app, ["--host", "ftp://x"]).exit_code == 2
