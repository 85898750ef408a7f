"""L4 on real fault-lab jobs (tests/fixtures/l4_lab: our own `make lab` output, torchrun + gloo on CPU, one real
fault each), and the lab's job drawing. The lab itself (namespaces, torchrun) is not run here: it is `make lab`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.l4.localize import localize
from agent.l4.verdicts import timestamp
from eval.lab.run import KINDS, draw, pasted_text

LAB = Path(__file__).parent / "fixtures" / "l4_lab"
JOBS = sorted(p.name for p in LAB.iterdir() if (p / "truth.json").exists())


def _truth(job: str) -> dict:
    return json.loads((LAB / job / "truth.json").read_text())


@pytest.mark.parametrize("job", JOBS)
def test_faulty_node_and_stage_per_node_files(job: str) -> None:
    truth = _truth(job)
    result = localize(LAB / job / "logs", engine="local")
    assert result.nodes[0].node == truth["faulty_node"], (truth["fault"], [n.node for n in result.nodes])
    assert result.stage == truth["stage"]


@pytest.mark.parametrize("job", [j for j in JOBS if (LAB / j / "combined.out").exists()])
def test_combined_output_judges_the_same(job: str) -> None:
    truth = _truth(job)
    result = localize(LAB / job / "combined.out", engine="local")
    assert result.nodes[0].node == truth["faulty_node"]
    assert result.stage == truth["stage"]


def test_silent_exit_outranks_the_loud_survivor() -> None:
    """9-001: a rank exits without a traceback; the survivor's log is full of store and peer errors."""
    top = localize(LAB / "9-001" / "logs", engine="local").nodes[0]
    assert top.node == _truth("9-001")["faulty_node"]
    assert top.events[0].startswith("first to fail")


def test_hung_node_is_the_silent_one() -> None:
    top = localize(LAB / "9-003" / "logs", engine="local").nodes[0]
    assert top.node == _truth("9-003")["faulty_node"]
    assert top.events[0].startswith("silent")


def test_timestamps() -> None:
    glog = timestamp("E1127 12:41:11.722000 13 torch/distributed/elastic/multiprocessing/api.py:1002] failed")
    iso = timestamp("2026-11-27 12:41:12,222 INFO train: step 3/40 | loss 0.5")
    assert glog is not None and iso is not None and iso - glog == pytest.approx(0.5)
    assert timestamp("no stamp here") is None


def test_lab_draws_are_reproducible_and_cover_every_kind() -> None:
    specs = [draw(5, k, KINDS, "torchrun") for k in range(len(KINDS))]
    assert specs == [draw(5, k, KINDS, "torchrun") for k in range(len(KINDS))]
    assert {s["fault"]["kind"] for s in specs} == set(KINDS)
    for s in specs:
        assert 2 <= len(s["nodes"]) <= 8
        assert len({n["addr"] for n in s["nodes"]}) == len(s["nodes"])
        assert all(n["addr"].startswith("127.") for n in s["nodes"])  # loopback only


def test_pasted_text_holds_the_launcher_summary() -> None:
    text = pasted_text(LAB / "9-001")
    assert "ChildFailedError" in text and "Root Cause" in text
