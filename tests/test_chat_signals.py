"""What the chat reads from the customer's words: host names (not model, stage or package names), statements about
versions and changes that re-rank the taxonomy, the ranking of pipeline 3's suggestions, the one approval question
per step, and who should act on the report."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from agent.cli.chat_cmd import who_acts
from agent.cli.render import ask_approval, parse_selection
from agent.incident import Incident
from agent.models import CheckResult, Verdict
from agent.reasoning.base import Evidence, KBPassage, LeafJudgement, NodeInfo
from agent.reasoning.offline import OfflineReasoner
from agent.reasoning.statements import stated_leaves
from agent.reasoning.text_signals import entities
from agent.report import Report, RootCause
from agent.taxonomy import load_taxonomy
from tests.hashed_words import word_embed

TAXONOMY = load_taxonomy()


# ---- host names ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "hosts"), [
    ("training of llama3-70B with ZeRO-3 on hosts gpu-node-07 crashes", ["gpu-node-07"]),
    ("node-1: NCCL WARN Connect to 10.0.0.2 failed", ["node-1"]),
    ("Xid 79 on gpu-a17, then node-2 lost its link", ["gpu-a17", "node-2"]),
    ("ssh ops@trn-a-17 shows nothing", ["trn-a-17"]),
    ("hosts prod-a1, prod-b2 and prod-c3 hang in all_reduce", ["prod-a1", "prod-b2", "prod-c3"]),
    ("[worker7-x2] watchdog timeout", ["worker7-x2"]),
    ("node12 and c001-12 drained", ["node12", "c001-12"]),
])
def test_host_names_are_found_in_host_contexts_and_shapes(text: str, hosts: list[str]) -> None:
    assert entities(text).hosts == hosts


@pytest.mark.parametrize("text", [
    "fine-tuning llama3-70B and Llama-3-8B with mixtral-8x7b weights",  # model sizes
    "ZeRO-3 and zero-2 and stage-3 all hang",  # optimizer stages
    "A100-SXM-8 profile, H100-SXM5-80GB cards, ConnectX-7 NICs",  # SKUs and products
    "pip shows nvidia-nccl-cu12 and nvidia-fabricmanager-535",  # packages
    "see pytorch-43281 and gpt-4 output in utf-8 with fp8-e4m3",  # issue numbers, models, encodings, formats
    "deepspeed-0.16 and qwen2-72b-instruct",
])
def test_model_stage_and_package_names_are_not_hosts(text: str) -> None:
    assert entities(text).hosts == []


def test_a_host_context_does_not_make_a_model_size_a_host() -> None:
    assert entities("hosts llama3-70B, gpu-node-07").hosts == ["gpu-node-07"]


# ---- the customer's statements re-rank the taxonomy --------------------------------------------------------
@pytest.mark.parametrize(("text", "leaf"), [
    ("deepspeed 0.15.3 works, 0.16.4 fails", "FRAMEWORK_LIBRARY.DEEPSPEED.BUG"),
    ("DeepSpeed was upgraded to 0.16.4 last week", "FRAMEWORK_LIBRARY.DEEPSPEED.BUG"),
    ("It broke after upgrading NCCL.", "FRAMEWORK_LIBRARY.NCCL.VERSION_REGRESSION"),
    ("hangs since the driver update", "SYSTEM_SOFTWARE.DRIVER.DRIVER_BUG"),
    ("torch 2.4 is fine but torch 2.5 hangs", "FRAMEWORK_LIBRARY.PYTORCH.NCCL_LIBRARY_CONFLICT"),
    ("NCCL 2.18.3 works but 2.19.3 hangs", "FRAMEWORK_LIBRARY.NCCL.VERSION_REGRESSION"),
    ("nccl 2.18.3 -> 2.19.3: all_reduce hangs", "FRAMEWORK_LIBRARY.NCCL.VERSION_REGRESSION"),
    ("with NCCL 2.19.3 the all_reduce hangs", "FRAMEWORK_LIBRARY.NCCL.VERSION_REGRESSION"),
])
def test_version_and_change_statements_point_at_the_library_leaves(text: str, leaf: str) -> None:
    assert leaf in stated_leaves(TAXONOMY, text)


@pytest.mark.parametrize("text", [
    "we use deepspeed ZeRO-3 and it crashes", "NCCL version 2.18.3 on all nodes", "GPU memory is 80 GB",
    # an environment line lists several libraries' versions; it says nothing about any one of them
    "Ubuntu 22.04, kernel 5.15.0-25, driver 535.86.10, CUDA 12.2, MLNX OFED 5.8-1.1.2.1, HPC-X 2.17.1, NCCL 2.19.3",
    "deps: transformers==4.35.2, torch==2.0.0+cu118, flash-attn==2.3.6; training hangs forever",
])
def test_naming_a_library_is_not_a_statement_about_its_versions(text: str) -> None:
    assert stated_leaves(TAXONOMY, text) == {}


def _summary(reasoner: OfflineReasoner, text: str):  # type: ignore[no-untyped-def]
    return reasoner.summarize(Incident(text=text))


def _rank(reasoner: OfflineReasoner, text: str, parent: str) -> list[str]:
    children = [NodeInfo(label=c.label, description=c.description) for c in TAXONOMY.children(parent)]
    info = NodeInfo(label=parent, description="") if parent else NodeInfo(label="", description="all incidents")
    return [c.label for c in reasoner.rank_children(_summary(reasoner, text), info, children, [], {}) if c.keep]


def test_a_version_statement_in_the_answer_raises_the_library_leaves() -> None:
    reasoner = OfflineReasoner(TAXONOMY, embed=word_embed)
    incident = "training crashed: RuntimeError: CUDA error: an illegal memory access was encountered"
    before = _rank(reasoner, incident, "")
    after = _rank(reasoner, f"{incident}\n\n[user feedback 1]\ndeepspeed 0.15.3 works, 0.16.4 fails", "")
    assert after[0] == "FRAMEWORK_LIBRARY" and before[0] != "FRAMEWORK_LIBRARY"
    assert _rank(reasoner, "deepspeed 0.15.3 works, 0.16.4 fails", "FRAMEWORK_LIBRARY")[0] == \
        "FRAMEWORK_LIBRARY.DEEPSPEED"
    upgraded = _rank(reasoner, f"{incident}\nit started after upgrading NCCL", "FRAMEWORK_LIBRARY")
    assert upgraded[0] == "FRAMEWORK_LIBRARY.NCCL"


# ---- pipeline 3's suggestions, most relevant first ----------------------------------------------------------
def _undecided(label: str) -> LeafJudgement:
    return LeafJudgement(label=label, status="inconclusive", confidence=0.1, why="its checks could not decide",
                         evidence=Evidence(strength="none", unknown=["checkpoint_load@node-1"]))


def test_an_undecided_leaf_the_incident_does_not_point_at_is_not_the_first_suggestion() -> None:
    reasoner = OfflineReasoner(TAXONOMY, embed=word_embed)
    summary = _summary(reasoner, "NCCL all_reduce hangs after 30 minutes on 16 nodes, watchdog timeout")
    passages = [KBPassage(doc="nccl.md", title="TSG: NCCL hangs", text="- check NCCL_DEBUG=INFO", score=0.55)]
    got = reasoner.explore(summary, [], passages, [_undecided("OTHER.STORAGE.CHECKPOINT_CORRUPTED")])
    assert [h.title for h in got] == ["TSG: NCCL hangs", "Unverified: OTHER.STORAGE.CHECKPOINT_CORRUPTED"]


def test_an_undecided_leaf_the_incident_names_comes_first() -> None:
    reasoner = OfflineReasoner(TAXONOMY, embed=word_embed)
    summary = _summary(reasoner, "torch.load: PytorchStreamReader failed reading zip archive: failed finding "
                                 "central directory")
    passages = [KBPassage(doc="nccl.md", title="TSG: NCCL hangs", text="- check NCCL_DEBUG=INFO", score=0.55)]
    warned = CheckResult(check="system_config", host="node-1", verdict=Verdict.WARN, summary="governor powersave")
    from agent.reasoning.base import Observation

    got = reasoner.explore(summary, [Observation(node="OTHER", result=warned)], passages,
                           [_undecided("OTHER.STORAGE.CHECKPOINT_CORRUPTED")])
    assert got[0].title == "Unverified: OTHER.STORAGE.CHECKPOINT_CORRUPTED"
    assert {h.title for h in got} == {"Unverified: OTHER.STORAGE.CHECKPOINT_CORRUPTED", "TSG: NCCL hangs",
                                      "Follow up the warning of system_config on node-1"}


# ---- one approval question per step -------------------------------------------------------------------------
CHECKS = [{"id": "p2p_bw", "tier": "active", "description": "nvbandwidth", "expected_cost_s": 60},
          {"id": "nccl_intranode", "tier": "active", "description": "all_reduce_perf", "expected_cost_s": 120}]


@pytest.mark.parametrize(("answer", "approved"), [
    ("a", {"p2p_bw": True, "nccl_intranode": True}), ("yes", {"p2p_bw": True, "nccl_intranode": True}),
    ("", {"p2p_bw": False, "nccl_intranode": False}), ("none", {"p2p_bw": False, "nccl_intranode": False}),
    ("2", {"p2p_bw": False, "nccl_intranode": True}), ("1, 2", {"p2p_bw": True, "nccl_intranode": True}),
    ("p2p_bw", {"p2p_bw": True, "nccl_intranode": False}), ("3", None), ("maybe", None),
])
def test_approval_answers(answer: str, approved: dict[str, bool] | None) -> None:
    assert parse_selection(answer, ["p2p_bw", "nccl_intranode"]) == approved


def test_one_question_lists_every_check_with_its_cost_and_hypothesis(monkeypatch: pytest.MonkeyPatch) -> None:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    asked: list[str] = []
    answers = iter(["maybe", "2"])

    def fake_input(prompt: str = "", **_: object) -> str:
        asked.append(prompt)
        return next(answers)

    monkeypatch.setattr(console, "input", fake_input)
    got = ask_approval(console, {"kind": "approval", "node": "INTERCONNECT_NETWORKING.NVLINK", "checks": CHECKS})
    assert got == {"p2p_bw": False, "nccl_intranode": True}
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "1. p2p_bw about 60 s, tests LINK_HARDWARE_FAULT" in out and "2. nccl_intranode about 120 s" in out
    assert "180 s in all" in out
    assert len(asked) == 2 and all("Run them?" in q for q in asked)  # re-asked once after a bad answer
    assert "the read-only checks did not decide it" in out


def test_the_question_says_what_the_answer_would_change(monkeypatch: pytest.MonkeyPatch) -> None:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    monkeypatch.setattr(console, "input", lambda prompt="", **_: "n")
    purpose = "A and B are each confirmed and tied to the incident: the tests decide which of them comes first"
    ask_approval(console, {"kind": "approval", "node": "corroborate", "purpose": purpose, "checks": CHECKS})
    out = " ".join(console.file.getvalue().split())  # type: ignore[attr-defined]
    assert f"corroborate: {purpose}." in out and "did not decide" not in out


# ---- who acts -----------------------------------------------------------------------------------------------
def _report(label: str, resolved: bool = True) -> Report:
    causes = [RootCause(label=label, confidence=0.7, evidence=[], why="checks confirm it",
                        runbook="Pin the last DeepSpeed release that worked.")] if resolved else []
    return Report.model_construct(run_id="r", resolved=resolved, root_causes=causes)


def test_a_customer_side_cause_says_what_the_customer_does() -> None:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    assert who_acts(console, _report("FRAMEWORK_LIBRARY.DEEPSPEED.BUG")) is False
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "yours to fix" in out and "Pin the last DeepSpeed release that worked." in out
    assert "goes to the provider" not in out


@pytest.mark.parametrize(("label", "resolved"), [("GPU.MEMORY.UNCORRECTABLE_ECC", True), ("", False)])
def test_a_machine_cause_or_no_cause_goes_to_the_provider(label: str, resolved: bool) -> None:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    assert who_acts(console, _report(label, resolved)) is True
    assert "provider" in console.file.getvalue()  # type: ignore[attr-defined]
