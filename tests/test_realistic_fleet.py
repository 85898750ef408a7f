"""A realistic fleet (FAULTS.md, last section): the incident's time `at`, latent faults with their age, and a
diagnosis that judges events against the incident's time and names the cause that explains the incident."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.agents import attribution
from agent.agents.attribution import PROBABLE, attribute
from agent.checks.runner import CheckRunner
from agent.executors.hosts import executors_for
from agent.graph.build import DiagnosisGraph
from agent.graph.state import DiagnosisState
from agent.incident import Incident, IncidentSummary
from agent.models import Verdict
from agent.reasoning.base import Evidence, LeafJudgement
from agent.reasoning.text_signals import entities
from agent.sim.faults import FaultError
from agent.sim.scenario import create_scenario
from agent.sim.state import HostState
from agent.taxonomy import load_taxonomy

ECC = "GPU.MEMORY.UNCORRECTABLE_ECC"
PORT_DOWN = "INTERCONNECT_NETWORKING.IB.PORT_DOWN"
REMAP = "GPU.MEMORY.ROW_REMAP_PENDING"


def iso(when: datetime) -> str:
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def sh(host_dir: Path, command: str) -> str:
    env = {k: v.strip("'") for line in (host_dir / "activate").read_text().splitlines()
           for k, v in [line.removeprefix("export ").split("=", 1)]}
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, timeout=60).stdout


def run_check(root: Path, check: str, incident_at: datetime | None = None):  # type: ignore[no-untyped-def]
    params = {"incident_at": incident_at.timestamp()} if incident_at else {}
    runner = CheckRunner(executors_for([f"sim:{root}"]), params=params)
    runner.take_inventory()
    return runner.run([check])[0]


# ---- the simulator ---------------------------------------------------------------------------------------------
def test_a_latent_fault_older_than_the_boot_keeps_its_persistent_counters_only(tmp_path: Path) -> None:
    root = create_scenario(tmp_path / "s", latent=[{"fault": "gpu.ecc_uncorrectable", "gpu": 2, "age_h": 400}]).root
    state = HostState.load(root / "host.json")
    gpu = state.gpu(2)
    assert state.uptime_s < 400 * 3600
    assert gpu.ecc_aggregate_dram_uncorrected >= 1  # persists across reboots
    assert gpu.ecc_volatile_dram_uncorrected == 0  # reset with the driver since
    assert "Xid" not in sh(root, "dmesg")  # its kernel lines were in an earlier boot
    assert json.loads((root / "scenario.json").read_text())["latent"][0]["age_h"] == 400


def test_a_recent_latent_fault_leaves_its_lines_hours_before_the_incident(tmp_path: Path) -> None:
    at = datetime.now(UTC) - timedelta(hours=3)
    root = create_scenario(tmp_path / "s", [{"fault": "ib.port_down", "hca": "mlx5_3"}], at=iso(at),
                           latent=[{"fault": "gpu.row_remap_pending", "gpu": 5, "age_h": 30}]).root
    state = HostState.load(root / "host.json")
    remap = next(line for line in state.journal if "): 63," in line.text)
    unplug = next(line for line in state.journal if "Cable unplugged" in line.text)
    assert 33 * 3600 - 60 < remap.age_s < 33 * 3600 + 3600  # 30 h before an incident 3 h ago
    assert 3 * 3600 - 60 < unplug.age_s < 3 * 3600 + 3600  # the cause: minutes before the incident
    assert state.gpu(5).remap_pending  # a state: it simply is
    assert json.loads((root / "scenario.json").read_text())["at"] == iso(at)


def test_a_cause_reboot_moves_with_the_incident_time(tmp_path: Path) -> None:
    at = datetime.now(UTC) - timedelta(hours=10)
    state = HostState.load(create_scenario(tmp_path / "s", [{"fault": "host.power_event"}], at=iso(at)).root
                           / "host.json")
    assert 10 * 3600 < state.uptime_s < 12 * 3600


def test_bad_times_and_ages_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="ISO 8601"):
        create_scenario(tmp_path / "a", at="yesterday")
    with pytest.raises(ValueError, match="future"):
        create_scenario(tmp_path / "b", at=iso(datetime.now(UTC) + timedelta(days=1)))
    with pytest.raises(FaultError, match="age_h"):
        create_scenario(tmp_path / "c", latent=[{"fault": "driver.persistence_off", "age_h": -3}])
    with pytest.raises(FaultError, match="unknown fault id"):
        create_scenario(tmp_path / "d", latent=[{"fault": "gpu.no_such_thing"}])


def test_a_version_nobody_catalogued_still_renders(tmp_path: Path) -> None:
    root = create_scenario(tmp_path / "s", [{"fault": "fw.deepspeed_bug", "version": "0.9.3"}]).root
    assert HostState.load(root / "host.json").software.python_packages["deepspeed"] == "0.9.3"


# ---- checks judge events against the incident's time ------------------------------------------------------------
def test_events_are_judged_against_the_incident_time_not_the_check_time(tmp_path: Path) -> None:
    at = datetime.now(UTC) - timedelta(hours=30)
    root = create_scenario(tmp_path / "s", [{"fault": "gpu.ecc_uncorrectable", "gpu": 3}], at=iso(at)).root
    now = run_check(root, "xid_scan")
    assert not any(f.id.startswith("xid_48") for f in now.findings)  # 30 h before the check: outside "now - 2 h"
    then = run_check(root, "xid_scan", at)
    assert then.verdict == Verdict.FAIL
    assert any(f.id == "xid_48" and f.entity == "GPU3" for f in then.findings)


def test_an_old_event_is_history_not_evidence(tmp_path: Path) -> None:
    root = create_scenario(tmp_path / "s", latent=[{"fault": "gpu.ecc_uncorrectable", "gpu": 1, "age_h": 20}]).root
    result = run_check(root, "xid_scan", datetime.now(UTC))
    assert result.verdict != Verdict.FAIL
    assert not any(f.id == "xid_48" for f in result.findings)


def test_a_diagnosis_hours_after_the_incident_still_sees_its_events(tmp_path: Path, data_dir: Path) -> None:
    from agent.diagnosis import Diagnoser
    from agent.options import DiagnoseOptions

    at = datetime.now(UTC) - timedelta(hours=30)
    root = create_scenario(tmp_path / "s", [{"fault": "gpu.ecc_uncorrectable", "gpu": 3}], at=iso(at)).root
    text = "RuntimeError: CUDA error: uncorrectable ECC error encountered on GPU 3"
    diagnoser = Diagnoser(DiagnoseOptions(hosts=[f"sim:{root}"], data_dir=str(data_dir), history=False,
                                          knowledge=False, checkpoint=False), taxonomy=TAXONOMY)
    try:
        report = diagnoser.run(Incident(text=text, at=at))
    finally:
        diagnoser.close()
    assert report.root_causes[0].label == ECC
    assert any(line.startswith("xid_scan:xid_48@GPU3") for line in report.root_causes[0].evidence)
    assert any("GPU 3 (PCI " in where and "GPU-" in where for where in report.root_causes[0].where)
    assert any("Xid" in line for line in report.root_causes[0].lines)


def test_the_incident_time_is_validated() -> None:
    incident = Incident(text="job died", at="2026-11-25T08:00:00Z")
    assert incident.at == datetime(2026, 11, 25, 8, tzinfo=UTC)
    assert Incident(text="x", at="2026-11-25T08:00:00").at.tzinfo is not None  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="future"):
        Incident(text="x", at=datetime.now(UTC) + timedelta(days=2))


# ---- attribution: the cause that explains the incident ---------------------------------------------------------
def judgement(label: str, entries: list[str], strength: str = "strong", confidence: float = 0.7) -> LeafJudgement:
    return LeafJudgement(label=label, status="confirmed", confidence=confidence, why="checks confirm it",
                         evidence=Evidence(strength=strength, matched=entries))


def summary(text: str) -> IncidentSummary:
    return IncidentSummary(title=text[:40], text=text, query=text, entities=entities(text))


TAXONOMY = load_taxonomy()


def test_the_primary_cause_is_the_one_the_incident_names_not_the_most_corroborated() -> None:
    text = "NCCL WARN NET/IB : port mlx5_3 is down; rank 5 timed out in ncclAllReduce"
    latent = judgement(REMAP, ["gpu_memory_errors:row_remap_pending@GPU5 (FAIL)", "dcgm_health:memory@GPU5 (FAIL)"],
                       confidence=0.9)
    cause = judgement(PORT_DOWN, ["nic_config:port_down@mlx5_3 (FAIL)"], confidence=0.6)
    found = attribute(TAXONOMY, summary(text), [latent, cause], [latent, cause])
    assert [j.label for j in found.primary] == [PORT_DOWN]
    assert [j.label for j in found.also_found] == [REMAP]
    assert "mlx5_3" in found.links[PORT_DOWN]


def test_a_finding_on_another_gpu_than_the_incident_names_is_not_its_cause() -> None:
    text = "RuntimeError: CUDA error: uncorrectable ECC error encountered on GPU 3"
    other = judgement(REMAP, ["gpu_memory_errors:row_remap_pending@GPU6 (FAIL)"], confidence=0.9)
    cause = judgement(ECC, ["gpu_memory_errors:ecc_uncorrectable@GPU3 (FAIL)"], confidence=0.6)
    found = attribute(TAXONOMY, summary(text), [other, cause], [other, cause])
    assert found.primary[0].label == ECC
    assert REMAP in [j.label for j in found.also_found]


def test_nothing_is_claimed_when_the_named_cause_left_no_evidence() -> None:
    text = "RuntimeError: CUDA error: uncorrectable ECC error encountered; Xid 48 in dmesg"
    latent = judgement(PORT_DOWN, ["nic_config:port_down@mlx5_7 (FAIL)"])
    ruled_out = LeafJudgement(label=ECC, status="rejected", confidence=0.0, why="its checks ran and found nothing",
                              evidence=Evidence(strength="none", rejected_by=["gpu_memory_errors@node-1"]))
    found = attribute(TAXONOMY, summary(text), [latent], [latent, ruled_out])
    assert found.primary == []
    assert [j.label for j in found.also_found] == [PORT_DOWN]
    assert ECC in found.links[PORT_DOWN]


def test_a_vague_incident_claims_a_confirmed_leaf_as_probable_only_when_it_fits() -> None:
    latent = judgement(PORT_DOWN, ["nic_config:port_down@mlx5_7 (FAIL)"])
    vague = summary("the training job stopped overnight")
    # a port found down that nothing ties to the incident and that it does not read like: reported, not claimed
    unread = attribute(TAXONOMY, vague, [latent], [latent], {PORT_DOWN: 30})
    assert unread.primary == [] and [j.label for j in unread.also_found] == [PORT_DOWN]
    assert "a state the hosts are in" in unread.links[PORT_DOWN] and unread.claims[PORT_DOWN] < PROBABLE
    # the incident's likeliest cause before any check, found on the hosts: probable, never confirmed
    read = attribute(TAXONOMY, vague, [latent], [latent], {PORT_DOWN: 2})
    assert [j.label for j in read.primary] == [PORT_DOWN] and "reads like it" in read.links[PORT_DOWN]
    assert read.levels == {PORT_DOWN: "probable"} and read.claims[PORT_DOWN] >= PROBABLE


def test_a_present_state_that_fails_jobs_the_way_the_incident_says_is_probable() -> None:
    psu = judgement("GPU.POWER.PSU_INSUFFICIENT", ["clocks_thermal_power:power_brake@GPU2 (FAIL)"])
    # "reboots" is shown by few leaves: a power brake the hosts show explains it, with nothing better found
    rebooting = attribute(TAXONOMY, summary("whole machine reboots a few minutes into training"), [psu], [psu],
                          {"GPU.POWER.PSU_INSUFFICIENT": 12})
    assert rebooting.levels == {"GPU.POWER.PSU_INSUFFICIENT": "probable"}
    assert "fails jobs the way the incident says (reboots)" in rebooting.links["GPU.POWER.PSU_INSUFFICIENT"]
    # the same state, for an incident its symptoms do not fit, has a weaker claim
    oom = attribute(TAXONOMY, summary("CUDA out of memory at step 10"), [psu], [psu],
                    {"GPU.POWER.PSU_INSUFFICIENT": 12})
    assert oom.claims["GPU.POWER.PSU_INSUFFICIENT"] < rebooting.claims["GPU.POWER.PSU_INSUFFICIENT"] - 0.15


def test_leaves_the_lines_point_to_lower_a_claim_elsewhere_and_raise_one_beside_them() -> None:
    text = "NCCL INFO NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open shared object file"
    plugin = "INTERCONNECT_NETWORKING.NCCL.NET_PLUGIN_NOT_LOADED"
    hca = judgement("INTERCONNECT_NETWORKING.NCCL.IB_HCA_MISCONFIG", ["nccl_env:ib_hca_ethernet@mlx5_1 (FAIL)"])
    remap = judgement(REMAP, ["gpu_memory_errors:row_remap_pending@GPU5 (FAIL)"])
    # the plugin leaf the line names was checked and found nothing
    named = LeafJudgement(label=plugin, status="rejected", confidence=0.0, why="found nothing",
                          evidence=Evidence(strength="none", rejected_by=["nccl_env@node-1"]))
    ranks = {"INTERCONNECT_NETWORKING.NCCL.IB_HCA_MISCONFIG": 8, REMAP: 8}
    found = attribute(TAXONOMY, summary(text), [hca, remap], [hca, remap, named], ranks)
    features = {j.label: attribution.features(TAXONOMY, summary(text), j, [hca, remap, named], [hca, remap],
                                              ranks, 1)[0] for j in (hca, remap)}
    # the HCA setting is in the NCCL sub-category the line points to; the remapped GPU row is elsewhere
    assert features["INTERCONNECT_NETWORKING.NCCL.IB_HCA_MISCONFIG"].named_sub
    assert features[REMAP].named_elsewhere and not features[REMAP].named_sub
    assert found.claims[REMAP] < found.claims["INTERCONNECT_NETWORKING.NCCL.IB_HCA_MISCONFIG"]
    assert plugin in found.links[REMAP]


def test_an_event_in_the_incident_window_ties_a_cause_to_it() -> None:
    text = "the job was gone this morning"
    kill = judgement("OTHER.SCHEDULER.JOB_KILLED_BY_POLICY_TOOL", ["scheduler_events:policy_kill@job 4711 (FAIL)"],
                     confidence=0.6)
    old = judgement(ECC, ["gpu_memory_errors:ecc_uncorrectable@GPU2 (FAIL)", "cuda_exec:ecc_uncorrectable@GPU2 "
                          "(FAIL)", "dcgm_diag:diag_gpu_memory@GPU2 (FAIL)"], confidence=0.9)
    found = attribute(TAXONOMY, summary(text), [old, kill], [old, kill])
    assert [j.label for j in found.primary] == ["OTHER.SCHEDULER.JOB_KILLED_BY_POLICY_TOOL"]
    assert "window" in found.links["OTHER.SCHEDULER.JOB_KILLED_BY_POLICY_TOOL"]


def test_unrelated_problems_are_reported_and_what_shares_the_causes_gpu_joins_it() -> None:
    port = judgement(PORT_DOWN, ["nic_config:port_down@mlx5_7 (FAIL)"])
    gpu = judgement(ECC, ["gpu_memory_errors:ecc_uncorrectable@GPU1 (FAIL)"])
    same_gpu = judgement("GPU.HARDWARE.FAULTY_GPU", ["dcgm_diag:diag_gpu_memory@GPU1 (FAIL)"])
    vague = summary("the training job stopped overnight")
    far = {PORT_DOWN: 40, ECC: 41, "GPU.HARDWARE.FAULTY_GPU": 42}
    assert attribute(TAXONOMY, vague, [port, gpu, same_gpu], [port, gpu, same_gpu], far).primary == []
    # one problem seen by two leaves (the same GPU) is one cause and what followed from it; the port elsewhere is
    # reported
    found = attribute(TAXONOMY, vague, [port, gpu, same_gpu], [port, gpu, same_gpu], {**far, ECC: 1})
    assert [j.label for j in found.primary] == [ECC]
    assert [j.label for j in found.follows] == ["GPU.HARDWARE.FAULTY_GPU"]
    assert "followed from GPU.MEMORY.UNCORRECTABLE_ECC on gpu1" in found.links["GPU.HARDWARE.FAULTY_GPU"]
    assert [j.label for j in found.also_found] == [PORT_DOWN]


def test_one_ecc_event_and_its_consequences_are_one_cause() -> None:
    text = "RuntimeError: CUDA error: uncorrectable ECC error encountered on GPU 3; Xid 48"
    ecc = judgement(ECC, ["gpu_memory_errors:ecc_uncorrectable@GPU3 (FAIL)", "xid_scan:xid_48@GPU3 (FAIL)"])
    contained = judgement("GPU.MEMORY.CONTAINED_ECC_ERROR", ["xid_scan:xid_94@GPU3 (FAIL)"])
    remap = judgement(REMAP, ["gpu_memory_errors:row_remap_pending@GPU3 (FAIL)", "xid_scan:xid_63@GPU3 (FAIL)"])
    found = attribute(TAXONOMY, summary(text), [remap, contained, ecc], [remap, contained, ecc])
    assert [j.label for j in found.primary] == [ECC] and found.levels == {ECC: "confirmed"}
    assert {j.label for j in found.follows} == {"GPU.MEMORY.CONTAINED_ECC_ERROR", REMAP}
    assert found.also_found == []


def test_a_host_ties_a_cause_only_on_a_job_of_several_hosts() -> None:
    missing = judgement("GPU.AVAILABILITY.MISSING_GPU", ["gpu_inventory:missing_gpu@gpu-node-3 (FAIL)"])
    text = "the job on gpu-node-3 died overnight"
    far = {"GPU.AVAILABILITY.MISSING_GPU": 40}
    # on a one-host job every finding is on the host the incident names: that ties nothing
    assert attribute(TAXONOMY, summary(text), [missing], [missing], far, hosts=1).primary == []
    several = attribute(TAXONOMY, summary(text), [missing], [missing], far, hosts=4)
    assert [j.label for j in several.primary] == ["GPU.AVAILABILITY.MISSING_GPU"]
    # a host that pre-triage suspects is the hosts' state, not the incident's words
    suspected = summary("the job died overnight")
    suspected.entities.hosts = ["gpu-node-3"]
    assert attribute(TAXONOMY, suspected, [missing], [missing], far, hosts=4).primary == []


def test_when_nothing_confirmed_ties_to_the_incident_its_likeliest_untested_causes_are_tested() -> None:
    graph = DiagnosisGraph.without_hosts(TAXONOMY)
    text = "RuntimeError: CUDA error: uncorrectable ECC error encountered; Xid 48"
    port = judgement(PORT_DOWN, ["nic_config:port_down@mlx5_7 (FAIL)"])
    state = DiagnosisState(judgements=[port], incident=Incident(text=text), summary=summary(text))
    assert graph.after_dfs(state) == "follow_reading"
    update = graph.reflection.follow_reading(state)
    tested = [step.node for step in update["path"] if step.action in ("confirmed", "rejected", "inconclusive")]
    assert ECC in tested and PORT_DOWN not in tested  # the leaf the incident reads as, not what was confirmed
    assert graph.after_dfs(state.merged(update)) == "corroborate"  # once: then the run concludes (and escalates)


def test_a_cause_history_found_that_nothing_ties_does_not_end_the_search() -> None:
    """Pipeline 1 confirmed a past incident's cause; nothing ties it to this one: the incident's likeliest untested
    causes are tested first, as after the walk. A tied one goes straight to corroboration."""
    graph = DiagnosisGraph.without_hosts(TAXONOMY)
    text = "RuntimeError: CUDA error: uncorrectable ECC error encountered; Xid 48"
    port = judgement(PORT_DOWN, ["nic_config:port_down@mlx5_7 (FAIL)"])
    state = DiagnosisState(judgements=[port], incident=Incident(text=text), summary=summary(text), pipeline=1)
    assert graph.after_historical(state) == "follow_reading"
    assert graph.after_historical(state.merged({"read_followed": True})) == "corroborate"
    ecc = judgement(ECC, ["gpu_memory_errors:ecc_uncorrectable@GPU1 (FAIL)", "xid_scan:xid_48@GPU1 (FAIL)"])
    tied = DiagnosisState(judgements=[ecc], incident=Incident(text=text), summary=summary(text), pipeline=1)
    assert graph.after_historical(tied) == "corroborate"
    assert graph.after_historical(state.merged({"pipeline": 0})) == "dfs_init"


def test_only_confirmed_causes_tied_to_the_incident_are_corroborated(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = DiagnosisGraph.without_hosts(TAXONOMY)
    text = "RuntimeError: CUDA error: uncorrectable ECC error encountered on GPU 1; Xid 48"
    ecc = judgement(ECC, ["gpu_memory_errors:ecc_uncorrectable@GPU1 (FAIL)"])
    port = judgement(PORT_DOWN, ["nic_config:port_down@mlx5_7 (FAIL)"])
    remap = judgement(REMAP, ["gpu_memory_errors:row_remap_pending@GPU1 (FAIL)"])
    corroborated: list[str] = []

    purposes: list[str] = []

    def execute(state: Any, label: str, costly_too: bool = False) -> tuple[list[Any], dict[str, Any]]:
        corroborated.append(label)
        return [], {}

    def decide(state: Any, node: str, checks: list[str], purpose: str) -> tuple[dict, dict]:
        purposes.append(purpose)
        return {c: True for c in checks}, {c: "test" for c in checks}

    monkeypatch.setattr(graph.execution, "execute", execute)
    monkeypatch.setattr(graph.execution, "decide", decide)

    def state(*found: LeafJudgement, said: str = text) -> DiagnosisState:
        return DiagnosisState(judgements=list(found), incident=Incident(text=said), summary=summary(said))

    # a port down that nothing ties to an ECC incident is reported as found: no minutes of load to rank it
    assert graph.reflection.corroborate(state(ecc, port)) == {} and corroborated == []
    # the row remap the ECC error left on its GPU followed from it: one cause, nothing to rank with a load test
    assert graph.reflection.corroborate(state(ecc, port, remap)) == {} and corroborated == []
    # two independent causes tied to the incident: the load test decides which comes first, and says so
    nvlink = judgement("INTERCONNECT_NETWORKING.NVLINK.LINK_HARDWARE_FAULT", ["nvlink_status:link_down@GPU5 (FAIL)"])
    both = "RuntimeError: CUDA error: uncorrectable ECC error encountered on GPU 1 and GPU 5; Xid 48; Xid 74"
    graph.reflection.corroborate(state(ecc, nvlink, said=both))
    assert sorted(corroborated) == sorted([ECC, "INTERCONNECT_NETWORKING.NVLINK.LINK_HARDWARE_FAULT"])
    assert len(purposes) == 1 and "decide which of them comes first" in purposes[0]  # one question for both
