"""Acceptance: every FAULTS.md fault is seen by a passive check attached to its leaf (or a parent);
healthy hosts of every profile and each noise id alone make no check FAIL."""

from __future__ import annotations

import pytest

from agent.checks.manifest import load_manifest, load_profiles
from agent.models import Verdict
from agent.sim.faults import REGISTRY
from agent.sim.selftest import documented_ids, fault_scenario, run_scenario

DOCUMENTED = documented_ids()
FAULT_IDS = sorted(k for k, leaf in DOCUMENTED.items() if leaf is not None)
NOISE_IDS = sorted(k for k, leaf in DOCUMENTED.items() if leaf is None)
NODES = {c.id: c.nodes for c in load_manifest().checks}


def describe(results: list) -> str:
    return "\n".join(f"  {r.check}: {r.verdict.value} {r.summary}" for r in results if r.verdict != Verdict.PASS)


def test_faults_doc_is_fully_registered() -> None:
    assert len(FAULT_IDS) >= 60 and len(NOISE_IDS) == 6
    for fid, leaf in DOCUMENTED.items():
        assert fid in REGISTRY, f"{fid} from FAULTS.md is not registered"
        assert REGISTRY[fid].leaf == leaf, f"{fid}: leaf {REGISTRY[fid].leaf} != FAULTS.md {leaf}"


@pytest.mark.parametrize("fid", FAULT_IDS)
def test_fault_is_seen_on_its_leaf(fid: str) -> None:
    faults, hosts = fault_scenario(fid)
    row = run_scenario(fid, faults, [], hosts=hosts)
    assert row.on_leaf(NODES), f"{fid} ({row.leaf}) not seen by a check on its leaf or parents:\n" + describe(
        row.results)


@pytest.mark.parametrize("profile", sorted(load_profiles()))
def test_healthy_host_has_no_fail(profile: str) -> None:
    row = run_scenario(f"healthy-{profile}", [], [], profile=profile)
    assert not row.flagged(Verdict.FAIL), describe(row.results)


@pytest.mark.parametrize("nid", NOISE_IDS)
def test_noise_alone_has_no_fail(nid: str) -> None:
    row = run_scenario(nid, [], [{"fault": nid}])
    assert not row.flagged(Verdict.FAIL), describe(row.results)
