"""L4 on real fault-lab jobs (tests/fixtures/l4_lab: our own `make lab` output, gloo on CPU under torchrun,
`accelerate launch` and the DeepSpeed launcher, one real fault each; v2-* are the three-launcher lab), and the lab's
job drawing. The lab itself (namespaces, launchers) is not run here: it is `make lab`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.l4.localize import localize
from agent.l4.verdicts import timestamp
from eval.lab.run import KINDS, LAUNCHERS, draw, launcher_of, pasted_text

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


def test_partition_is_where_the_gloo_ring_stalled() -> None:
    """v2-205-039 (eight nodes, DeepSpeed launcher) and v2-206-025 (two nodes of two ranks, Accelerate): one node's
    address dropped; every rank's gloo collective times out, none names a peer. In rank order the receiving
    timeouts run up to a rank of the partitioned node and the sending ones start after it."""
    for job in ("v2-205-039", "v2-206-025"):
        top = localize(LAB / job / "logs", engine="local").nodes[0]
        assert top.node == _truth(job)["faulty_node"]
        assert top.events[0].startswith("the ring stalled here")


def test_a_hung_rank_is_not_a_stalled_ring() -> None:
    """v2-9-017: one rank stops calling collectives; its peers time out, it does not: no ring verdict."""
    nodes = localize(LAB / "v2-9-017" / "logs", engine="local").nodes
    assert nodes[0].node == _truth("v2-9-017")["faulty_node"]
    assert not any(event.startswith("the ring stalled") for node in nodes for event in node.events)


def test_a_killed_node_whose_log_ends_mid_start_up_is_lost() -> None:
    """v2-206-030: SIGKILL of one node's process group under the DeepSpeed launcher; its buffered step lines died
    with it, so its log ends on a start-up line, which says nothing failed."""
    top = localize(LAB / "v2-206-030" / "logs", engine="local").nodes[0]
    assert top.node == _truth("v2-206-030")["faulty_node"]
    assert top.events[0].startswith("lost")


def test_a_node_still_waiting_is_not_lost() -> None:
    """v2-201-024: the head node cannot listen on the rendezvous port; the other waits, logs nothing and is stopped:
    nobody noticed a peer go, so no node is "lost" and the head's own error names it."""
    nodes = localize(LAB / "v2-201-024" / "logs", engine="local").nodes
    assert nodes[0].node == _truth("v2-201-024")["faulty_node"]
    assert not any(event.startswith("lost") for node in nodes for event in node.events)


def test_torchrun_is_known_by_its_entry_point_when_the_rendezvous_logged_nothing() -> None:
    """v2-212-009: a wrong GLOO_SOCKET_IFNAME on one node of two; its ranks fail at once, the other node's time out
    12 s later. torchrun's rendezvous logged nothing, its agent's traceback names torch/distributed/run.py: the
    agents' reports are read, and the first names the node."""
    top = localize(LAB / "v2-212-009" / "logs", engine="local").nodes[0]
    assert top.node == _truth("v2-212-009")["faulty_node"]
    assert top.events[0].startswith("first to fail")


def test_a_starved_node_is_the_one_that_missed_its_heartbeat() -> None:
    """v2-208-012: one node of six under a CPU quota of 1 ms a second; nothing fails until the lab stops the job,
    and only that node's torchrun agent missed its keep-alive heartbeat to the rendezvous, 35 s before."""
    top = localize(LAB / "v2-208-012" / "logs", engine="local").nodes[0]
    assert top.node == _truth("v2-208-012")["faulty_node"]
    assert top.events[0].startswith("starved or cut off")


def test_heartbeats_missed_after_a_failure_are_no_verdict() -> None:
    """v2-201-004: a NaN guard ends one node's worker; afterwards another node's agent misses its heartbeat (the
    store's host is going away): the first to fail is still named."""
    nodes = localize(LAB / "v2-201-004" / "logs", engine="local").nodes
    assert nodes[0].node == _truth("v2-201-004")["faulty_node"]
    assert not any(event.startswith("starved") for node in nodes for event in node.events)


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


def test_pasted_text_is_the_failing_ranks_own() -> None:
    """A hang: the faulty node says nothing, so the paste is the first node that reports (not the hung one), with
    DeepSpeed's return-code summary; a crash: the paste is the crashing node's own traceback."""
    hang = _truth("v2-9-031")
    text = pasted_text(LAB / "v2-9-031", faulty=hang["faulty_node"])
    assert "exits with return code" in text and "Timed out waiting" in text
    skew = _truth("v2-9-041")  # the node with the older model code: its own DDP shape error, not a peer's
    text = pasted_text(LAB / "v2-9-041", faulty=skew["faulty_node"])
    assert "with sizes [192, 32] appears not to match" in text
    assert "exits with return code" in text


def test_every_fault_under_every_launcher_each_seed() -> None:
    combos = {(launcher_of(k, KINDS, LAUNCHERS), draw(7, k, KINDS, launcher_of(k, KINDS, LAUNCHERS))["fault"]["kind"])
              for k in range(len(KINDS) * len(LAUNCHERS))}
    assert combos == {(launcher, kind) for launcher in LAUNCHERS for kind in KINDS}


@pytest.mark.parametrize(("job", "launcher"), [("v2-9-015", "accelerate"), ("v2-9-041", "deepspeed")])
def test_first_to_fail_from_each_launchers_own_report(job: str, launcher: str) -> None:
    """Accelerate runs torch's elastic agent with a static rendezvous (no rendezvous lines: its own frames in the
    agent's traceback say the reports are there); the DeepSpeed launcher logs `exits with return code`."""
    truth = _truth(job)
    assert truth["launcher"] == launcher
    top = localize(LAB / job / "logs", engine="local").nodes[0]
    assert top.node == truth["faulty_node"]
    assert top.events[0].startswith("first to fail")
