"""The levels a reader sees (confirmed, probable, suspected), one event read as one cause, and the benchmark's
per-level precision and reliability table: end to end through `aidai diagnose` on simulated hosts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.agents import attribution
from agent.cli.main import app
from agent.incident import Incident
from agent.reasoning import text_signals
from agent.reasoning.base import Evidence, LeafJudgement
from agent.reasoning.offline import OfflineReasoner
from agent.sim.scenario import create_scenario
from agent.taxonomy import load_taxonomy
from eval.harness.metrics import claim_levels, reliability
from eval.harness.report import level_tables

runner = CliRunner(env={"COLUMNS": "200"})
ECC = "GPU.MEMORY.UNCORRECTABLE_ECC"


def _diagnose(text: str, root: Path, data: Path, *extra: str) -> Any:
    return runner.invoke(app, ["diagnose", text, "--host", f"sim:{root}", "--data-dir", str(data), *extra])


def test_one_ecc_event_reads_as_one_cause_with_what_followed(tmp_path: Path, data_dir: Path) -> None:
    root = create_scenario(tmp_path / "ecc", faults=[{"fault": "gpu.ecc_uncorrectable", "gpu": 3}]).root
    result = _diagnose("RuntimeError: CUDA error: uncorrectable ECC error encountered on GPU 3", root, data_dir,
                       "--json", "--ticket", str(tmp_path / "ticket"))
    assert result.exit_code == 0, result.output
    contract = json.loads(result.stdout)
    assert [c["label"] for c in contract["root_causes"]] == [ECC]
    assert contract["root_causes"][0]["level"] == "confirmed" and contract["root_causes"][0]["reasons"]
    follows = contract["details"]["follows"]
    assert follows and all(f"followed from {ECC} on gpu3" in c["link"] for c in follows)
    assert not any(c["label"] == ECC for c in follows + contract["details"]["also_found"])
    ticket = (tmp_path / "ticket.md").read_text()
    assert "(confirmed, confidence" in ticket and "what followed from it" in ticket


@pytest.mark.parametrize("view", ["bare-metal", "container"])
def test_a_cause_the_taxonomy_says_brings_the_confirmed_leaf_is_tested_and_named(tmp_path: Path, data_dir: Path,
                                                                                  view: str) -> None:
    # the lines name the container runtime; the node has no NVIDIA software at all, which is why the runtime is
    # missing: the answer is the node, the runtime what followed from it
    root = create_scenario(tmp_path / view, faults=[{"fault": "node.not_provisioned"}], view=view).root
    text = ('pods on the new node pool fail: docker: Error response from daemon: could not select device driver "" '
            "with capabilities: [[gpu]]")
    contract = json.loads(_diagnose(text, root, data_dir, "--json").stdout)
    assert [(c["label"], c["level"]) for c in contract["root_causes"]] == [
        ("OTHER.PLATFORM.NODE_NOT_PROVISIONED", "confirmed")]
    follows = {c["label"]: c["link"] for c in contract["details"]["follows"]}
    runtime = "SYSTEM_SOFTWARE.CONTAINER_TOOLKIT.RUNTIME_NOT_CONFIGURED"
    assert follows[runtime].startswith("followed from OTHER.PLATFORM.NODE_NOT_PROVISIONED")


def test_a_present_state_that_fits_a_vague_report_answers_as_probable(tmp_path: Path, data_dir: Path) -> None:
    root = create_scenario(tmp_path / "nvlink", faults=[{"fault": "nvlink.not_enabled"}]).root
    text = "fine-tuning a 7B model takes 3x longer on this 8-GPU server than on our other one"
    result = _diagnose(text, root, data_dir, "--json")
    assert result.exit_code == 0, result.output  # a probable cause answers the customer
    contract = json.loads(result.stdout)
    cause = contract["root_causes"][0]
    assert contract["resolved"] is True
    assert (cause["label"], cause["level"]) == ("INTERCONNECT_NETWORKING.NVLINK.NVLINK_NOT_ENABLED", "probable")
    assert 0.5 <= cause["confidence"] < 1.0 and "fails jobs the way the incident says" in cause["reasons"]
    shown = _diagnose(text, root, data_dir)
    words = " ".join(shown.stdout.split())
    assert "probable" in words and "nothing ties it to the incident's own lines" in words


def test_a_stack_dump_of_the_hung_job_ties_its_cause_to_the_incident(tmp_path: Path, data_dir: Path) -> None:
    # the dump is of the incident's own ranks as they hang, not a state the host carried before: it ties like a
    # dated event, so the cause is confirmed even though the report names no line, device or time
    root = create_scenario(tmp_path / "hang", faults=[{"fault": "user.error_path_hang", "rank": 1}]).root
    text = ("Training jobs with more than one GPU can get stuck when a DDP process fails: one process fails with an "
            "error but training does not terminate, rank 0 keeps waiting")
    contract = json.loads(_diagnose(text, root, data_dir, "--json").stdout)
    cause = contract["root_causes"][0]
    assert (cause["label"], cause["level"]) == ("USER_APPLICATION.CODE.ERROR_PATH_TEARDOWN_HANG", "confirmed")
    assert "the incident's own job shows it (stack_dump)" in cause["reasons"]


def _judgement(label: str, *matched: str) -> LeafJudgement:
    return LeafJudgement(label=label, status="confirmed", confidence=0.9, why="",
                         evidence=Evidence(strength="strong", matched=list(matched)))


def test_a_lone_state_the_incident_neither_reads_like_nor_shows_is_not_probable() -> None:
    taxonomy = load_taxonomy()
    reader = OfflineReasoner(taxonomy)
    summary = reader.summarize(Incident(text='Ollama will not use the GPU, fails with "cudart init failure: 3"'))
    nvlink = _judgement("INTERCONNECT_NETWORKING.NVLINK.LINK_HARDWARE_FAULT",
                        "nvlink_status:nvlink_inactive@GPU0 (FAIL)")
    far = {nvlink.label: 20}  # far down the incident's reading, and NVLink never stops a GPU being used
    found = attribution.attribute(taxonomy, summary, [nvlink], [nvlink], far, weights={"bias": 3.0})
    assert found.claims[nvlink.label] > attribution.PROBABLE  # alone on the host, the model alone would name it
    assert found.primary == [] and found.also_found == [nvlink]
    assert "the incident neither reads like it nor shows its symptoms" in found.links[nvlink.label]
    # the same state, when the incident reads like it, is the probable cause
    near = attribution.attribute(taxonomy, summary, [nvlink], [nvlink], {nvlink.label: 3}, weights={"bias": 3.0})
    assert near.primary == [nvlink] and near.levels[nvlink.label] == "probable"


def test_a_job_on_one_host_is_not_blamed_on_the_traffic_between_hosts(tmp_path: Path, data_dir: Path) -> None:
    # both are real on the host; NCCL's channels via SHM say the job never left it, so GPUDirect RDMA (GPU to NIC,
    # for traffic between hosts) cannot have stalled it: the ACS redirect of GPU peer traffic is the answer
    root = create_scenario(tmp_path / "one", faults=[{"fault": "gdr.peermem_missing"},
                                                    {"fault": "pcie.acs_enabled"}]).root
    text = ("vLLM with tensor parallel 2 on this server stalls after the first request. "
            "NCCL INFO Channel 00 : 1[1] -> 0[0] via SHM/direct/direct")
    contract = json.loads(_diagnose(text, root, data_dir, "--json").stdout)
    assert [c["label"] for c in contract["root_causes"]] == ["INTERCONNECT_NETWORKING.PCIE.ACS_P2P_HANG"]
    also = {c["label"]: c["link"] for c in contract["details"]["also_found"]}
    assert "the job runs on one host (via SHM/)" in also["INTERCONNECT_NETWORKING.GDR.GPUDIRECT_RDMA_DISABLED"]


@pytest.mark.parametrize(("text", "one"), [
    ("NCCL INFO Channel 00/02 : 0[0] -> 1[1] via P2P/IPC", "via P2P/"),
    ("single node, 8 GPUs, torchrun --nproc_per_node 8", "single node"),
    ("torchrun --nnodes=1 --nproc_per_node=4 train.py", "--nnodes=1"),
    ("NCCL INFO comm 0x55d0 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0", "nNodes 1"),
    ("hangs across two nodes; NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC", None),  # and between them
    ("NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA", None),
    ("a multi-node job; each node is a single node of 8 GPUs", None),
    ("the allreduce hangs", None),  # nothing says
])
def test_the_job_shape_is_read_from_the_incident_words(text: str, one: str | None) -> None:
    assert text_signals.one_host(text) == one


def test_a_between_hosts_cause_stays_a_candidate_unless_one_host_is_all_the_job_used() -> None:
    taxonomy = load_taxonomy()
    reader = OfflineReasoner(taxonomy)
    gdr = _judgement("INTERCONNECT_NETWORKING.GDR.GPUDIRECT_RDMA_DISABLED", "gdr_status:peermem_missing@host (FAIL)")
    ranks = {gdr.label: 1}
    for text, hosts, candidate in [
            ("allreduce is slow; NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct", 1, False),
            ("allreduce is slow; NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct", 2, True),  # given two
            ("allreduce between the two nodes is slow", 1, True),
            # the incident's own lines name it: they tie it, whatever the shape
            ("via SHM/direct/direct ... NCCL INFO GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)", 1, True)]:
        summary = reader.summarize(Incident(text=text))
        found = attribution.attribute(taxonomy, summary, [gdr], [gdr], ranks, hosts=hosts)
        assert (found.claims[gdr.label] > 0) == candidate, (text, hosts, found)
        if not candidate:
            assert found.also_found == [gdr] and "breaks only traffic between hosts" in found.links[gdr.label]


def test_a_container_that_cannot_see_the_cause_names_it_suspected_with_commands(tmp_path: Path,
                                                                                 data_dir: Path) -> None:
    root = create_scenario(tmp_path / "acs", faults=[{"fault": "pcie.acs_enabled"}], view="container").root
    text = ("NCCL all_reduce hangs between the GPUs of one server; with NCCL_P2P_DISABLE=1 it works, so peer-to-peer "
            "over the PCIe switch is broken")
    result = _diagnose(text, root, data_dir, "--json", "--ticket", str(tmp_path / "ticket"))
    contract = json.loads(result.stdout)
    assert contract["resolved"] is False and contract["root_causes"] == []
    suspected = {s["label"]: s for s in contract["suspected"]}
    assert "INTERCONNECT_NETWORKING.PCIE.ACS_P2P_HANG" in suspected
    assert all(s["level"] == "suspected" and s["commands"] for s in suspected.values())
    assert any("system_config" in c for c in suspected["INTERCONNECT_NETWORKING.PCIE.ACS_P2P_HANG"]["commands"])
    ticket = (tmp_path / "ticket.md").read_text()
    assert "Suspected (not checked" in ticket and "ACS_P2P_HANG" in ticket


def test_a_check_only_not_given_its_input_is_no_suspicion(tmp_path: Path, data_dir: Path) -> None:
    # a healthy host can see everything: the checkpoint check is UNKNOWN only for want of the checkpoint's directory
    root = create_scenario(tmp_path / "healthy", faults=[]).root
    text = "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory"
    contract = json.loads(_diagnose(text, root, data_dir, "--json").stdout)
    checkpoint = [r for r in contract["details"]["results"] if r["check"] == "checkpoint_load"]
    assert checkpoint and all(r["verdict"] == "UNKNOWN" and r["needs"] == "checkpoint_dir" for r in checkpoint)
    assert "OTHER.STORAGE.CHECKPOINT_CORRUPTED" not in {s["label"] for s in contract["suspected"]}


def _row(label: str, predicted: str | None, level: str | None = None, confidence: float | None = None,
         control: bool = False, suspected: list[str] | None = None) -> dict[str, Any]:
    return {"label": label, "predicted": predicted, "level": level, "confidence": confidence, "control": control,
            "suspected": suspected or []}


def test_precision_per_level_and_the_reliability_table() -> None:
    rows = [_row("A", "A", "confirmed", 0.95), _row("B", "B", "confirmed", 0.91), _row("C", "X", "probable", 0.62),
            _row("D", "D", "probable", 0.67), _row("E", "Y", "probable", 0.55, control=True),
            _row("F", None, suspected=["G", "F"]), _row("H", None, suspected=["H"])]
    levels = claim_levels(rows)
    assert levels["confirmed"] == {"claims": 2, "right": 2, "precision": 1.0, "controls": 0}
    # a claim on a control is never right
    assert levels["probable"] == {"claims": 3, "right": 1, "precision": pytest.approx(1 / 3, abs=1e-4), "controls": 1}
    assert levels["suspected"] == {"escalations": 2, "right_first": 1, "right_any": 2}
    table = {(c["level"], c["decile"]): c for c in reliability(rows)}
    assert table[("confirmed", 9)]["claims"] == 2 and table[("confirmed", 9)]["right"] == 2
    assert table[("probable", 6)]["claims"] == 2 and table[("probable", 6)]["right"] == 1
    assert table[("probable", 5)] == {"level": "probable", "decile": 5, "claims": 1, "right": 0,
                                      "mean_confidence": 0.55}
    text = "\n".join(level_tables({"aidai": {"levels": levels, "reliability": reliability(rows)}}))
    assert "| aidai | probable | 0.6-0.7 | 0.65 | 2 | 1 | 0.50 |" in text
    # a method that chooses rather than attributes (CVD, the one-shot baselines) has no levels and no table row
    chooser = [_row("A", "A"), _row("B", "X")]
    assert claim_levels(chooser) is None and reliability(chooser) == []
    assert level_tables({"cvd": {"levels": None, "reliability": []}}) == []


class _Run:
    """A traced run as the claim model's fit sees it: each confirmed leaf's features and whether it is the cause."""

    def __init__(self, examples: list[tuple[dict[str, float], bool]]):
        self._examples = examples

    def examples(self, taxonomy: Any) -> list[tuple[dict[str, float], bool]]:
        return self._examples


def test_the_claim_model_learns_what_ties_a_cause_and_what_a_latent_problem_looks_like() -> None:
    from eval.attribution_fit import fit

    cause, latent = {"text": 1.0, "reading": 0.5}, {"text": 0.0, "reading": 0.05}
    runs = [_Run([(cause, True), (latent, False)]) for _ in range(20)]
    runs += [_Run([(latent, False)]) for _ in range(20)]  # controls: only an old problem, the right answer is none
    weights = fit(runs, None)  # type: ignore[arg-type]
    assert weights["text"] > 1.0 and weights["bias"] < 0
    # the fitted weights, used by the attribution: the tied cause takes most of the probability, the latent little
    found = attribution.claims({"cause": attribution.Features(text=True, reading=0.5),
                                "latent": attribution.Features(reading=0.05)}, weights)
    assert found["cause"] > 0.8 > 0.1 > found["latent"]
