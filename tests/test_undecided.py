"""A version the known-bad list does not name clears nothing: the version-bug leaf stays open (inconclusive, with
the reason), it is neither confirmed nor rejected."""

from __future__ import annotations

import pytest

from agent.agents.reading import node_info
from agent.evidence import assess
from agent.incident import Incident
from agent.models import CheckResult, Finding, Verdict
from agent.reasoning.base import Evidence, LeafJudgement
from agent.reasoning.offline import OfflineReasoner
from agent.taxonomy import load_taxonomy

LEAF = "FRAMEWORK_LIBRARY.DEEPSPEED.BUG"
UNLISTED = Finding(id="unlisted_deepspeed", severity="INFO", entity="DeepSpeed 0.6.1",
                   message="DeepSpeed 0.6.1 is not in the known-bad list: a bug of this release is neither confirmed "
                           "nor ruled out")


def versions(host: str, *findings: Finding) -> CheckResult:
    verdict = Verdict.FAIL if any(f.severity == "FAIL" for f in findings) else Verdict.PASS
    return CheckResult(check="framework_versions", host=host, verdict=verdict, findings=list(findings))


@pytest.fixture(scope="module")
def taxonomy():
    return load_taxonomy()


def test_an_unlisted_release_leaves_the_leaf_open(taxonomy):
    leaf = taxonomy.node(LEAF)
    assert leaf.undecided == ["framework_versions:unlisted_deepspeed"]
    evidence = assess(leaf.evidence, [versions("n1", UNLISTED)], leaf.undecided)
    assert (evidence.strength, evidence.rejected_by) == ("unknown", [])
    assert evidence.open and "not in the known-bad list" in evidence.open[0]
    # a host without DeepSpeed says nothing about the one that runs it
    assert assess(leaf.evidence, [versions("n1", UNLISTED), versions("n2")], leaf.undecided).strength == "unknown"
    # without the rule (another leaf of the same check) the finding rejects nothing and decides nothing
    assert assess(leaf.evidence, [versions("n1", UNLISTED)]).strength == "none"


def test_a_listed_release_still_confirms_and_no_deepspeed_still_rejects(taxonomy):
    leaf = taxonomy.node(LEAF)
    bad = Finding(id="known_bad_deepspeed", severity="FAIL", entity="DeepSpeed 0.13.2")
    assert assess(leaf.evidence, [versions("n1", bad)], leaf.undecided).strength == "strong"
    assert assess(leaf.evidence, [versions("n1")], leaf.undecided).strength == "none"


def test_the_judgement_says_why_it_is_open(taxonomy):
    reader = OfflineReasoner(taxonomy)
    leaf = taxonomy.node(LEAF)
    results = [versions("n1", UNLISTED)]
    summary = reader.summarize(Incident(text="ZeRO stage 3 with offloading crashes in deepspeed/runtime/zero/"
                                             "stage3.py; DeepSpeed 0.5.8 works, 0.6.1 fails"))
    judgement = reader.validate_leaf(summary, node_info(taxonomy, LEAF),
                                     assess(leaf.evidence, results, leaf.undecided), results)
    assert judgement.status == "inconclusive"
    assert "DeepSpeed 0.6.1 is not in the known-bad list" in judgement.why


def test_an_open_release_is_a_lead_only_when_the_incident_points_at_it(taxonomy):
    reader = OfflineReasoner(taxonomy)
    leaf = taxonomy.node(LEAF)
    results = [versions("n1", UNLISTED)]
    evidence = assess(leaf.evidence, results, leaf.undecided)
    titles = []
    for text in ("ZeRO stage 3 offload crashes in deepspeed/runtime/zero/stage3.py", "NCCL all_reduce hangs on IB"):
        summary = reader.summarize(Incident(text=text))
        judgement = reader.validate_leaf(summary, node_info(taxonomy, LEAF), evidence, results)
        titles.append([h.title for h in reader.explore(summary, [], [], [judgement])])
    assert titles == [[f"Unverified: {LEAF}"], []]


def test_a_leaf_only_an_unattached_log_could_decide_is_no_lead_and_no_blind_spot(taxonomy):
    """job_logs without --logs is UNKNOWN for want of its input: the leaf stays open, but nothing was hidden from
    this view (no suspicion, no 'could not be checked here'), and it is suggested only when the incident points
    at it."""
    reader = OfflineReasoner(taxonomy)
    leaf = "OTHER.STORAGE.DISK_FULL"
    unattached = CheckResult(check="job_logs", host="n1", verdict=Verdict.UNKNOWN, needs="logs",
                             summary="no job logs attached to the incident (aidai diagnose --logs DIR)")
    evidence = assess(taxonomy.node(leaf).evidence, [unattached], taxonomy.node(leaf).undecided)
    assert (evidence.strength, evidence.unknown) == ("unknown", []) and evidence.unasked
    summary = reader.summarize(Incident(text="NCCL all_reduce hangs on IB after 30 minutes"))
    judgement = reader.validate_leaf(summary, node_info(taxonomy, leaf), evidence, [unattached])
    assert judgement.status == "inconclusive" and "no job logs attached" in judgement.why
    assert reader.explore(summary, [], [], [judgement]) == []


def test_a_weak_finding_stays_a_lead(taxonomy):
    reader = OfflineReasoner(taxonomy)
    leaf = "SYSTEM_SOFTWARE.DRIVER.PERSISTENCE_MODE_DISABLED"
    weak = LeafJudgement(label=leaf, status="inconclusive", confidence=0.3, why="weak check evidence only",
                         evidence=Evidence(strength="weak", matched=["driver_health:persistence_off@GPU0 (WARN)"]))
    summary = reader.summarize(Incident(text="NCCL all_reduce hangs on IB after 30 minutes"))
    assert [h.title for h in reader.explore(summary, [], [], [weak])] == [f"Unverified: {leaf}"]
