"""L4 on logs shaped unlike our simulator's: role asymmetry, long healthy runs, the stage when errors began, and a
job of the second, independent generator (simulate_ds)."""

from __future__ import annotations

from pathlib import Path

from agent.l4.localize import localize
from agent.l4.reader import LogFile
from agent.l4.scan import scan_bytes, scan_chunks
from agent.l4.simulate_ds import DsSpec, simulate_ds_job

INIT = ["NCCL version 2.21.5+cuda12.4", "> initializing torch distributed ...",
        "host:1:2 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.{n}<0>",
        "host:1:2 [0] NCCL INFO comm 0x7f rank {n} - Init COMPLETE"]


def _job(root: Path, nodes: int, faulty: int, steps: int, error_at_init: bool = False) -> Path:
    """rank 0 (node00) alone prints progress and launcher lines; the faulty node crashes with a CUDA error, the
    others then time out."""
    root.mkdir()
    for n in range(nodes):
        lines = [x.format(n=n) for x in (INIT if n == 0 else INIT[2:])]
        if n == 0:
            lines += ["[launch.py:146:main] WORLD INFO DICT: {'node00': [0, 1]}", "training ..."]
            lines += [f"step {s} loss {2.5 - s / 10_000:.4f} lr 3.0e-04" for s in range(1 if not error_at_init else 0,
                                                                                      steps)]
        if n == faulty:
            lines += ["Traceback (most recent call last):", '  File "/w/train.py", line 9, in <module>',
                      "RuntimeError: CUDA error: an illegal memory access was encountered"]
        else:
            lines.append(f"[Rank {n}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=77, "
                         "OpType=ALLREDUCE) ran for 600042 milliseconds before timing out.")
        if n == 0:
            lines.append("pdsh@node00: node03: ssh exited with exit code 1")
        (root / f"node{n:02d}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_rank0_only_progress_does_not_rank_rank0_first(tmp_path: Path) -> None:
    result = localize(_job(tmp_path / "j", nodes=8, faulty=5, steps=400), engine="local")
    assert result.nodes[0].node == "node05"
    assert result.nodes[0].node != "node00"


def test_progress_lines_are_never_failure_events_and_stage_is_when_errors_began(tmp_path: Path) -> None:
    result = localize(_job(tmp_path / "j", nodes=4, faulty=2, steps=3000), engine="local")
    assert not [e for e in result.events if "loss" in e.template]
    assert any("illegal memory access" in e.template for e in result.events)
    assert result.stage == "training"  # init lines exist, but the errors began while it trained


def test_init_failure_is_init(tmp_path: Path) -> None:
    result = localize(_job(tmp_path / "j", nodes=4, faulty=3, steps=0, error_at_init=True), engine="local")
    assert result.stage == "init"
    assert result.nodes[0].node == "node03"


def test_streamed_blocks_scan_like_one_block() -> None:
    data = "".join(f"step {i} loss {i / 7:.3f}\n" if i % 5 else f"[INFO] saving {i}\n" for i in range(400)).encode()
    whole = scan_bytes(LogFile("x.log", "n"), data)
    cuts = [0, 1000, 1001, 5000, len(data)]
    # blocks end at line ends (as reader.read_chunks yields them): move each cut to the next newline
    fixed, start = [], 0
    for c in cuts[1:-1]:
        end = data.index(b"\n", c) + 1
        fixed.append(data[start:end])
        start = end
    fixed.append(data[start:])
    streamed = scan_chunks(LogFile("x.log", "n"), fixed)
    assert len(fixed) == 4
    assert (streamed.shapes, streamed.counts, streamed.first, streamed.last, streamed.examples) == \
        (whole.shapes, whole.counts, whole.first, whole.last, whole.examples)
    assert streamed.tail_start == whole.tail_start and streamed.progress == whole.progress


def test_second_generator_job_localized(tmp_path: Path) -> None:
    for seed, (fault, when) in enumerate([("oom", "mid"), ("nic", "end"), ("gpu", "init")]):
        d = tmp_path / f"ds{seed}"
        truth = simulate_ds_job(d, DsSpec(nodes=8, fault=fault, when=when, steps=1000, seed=seed))
        result = localize(d, engine="local")
        assert result.nodes[0].node == truth.faulty_node, (fault, when)
        assert result.stage == truth.stage, (fault, when)


def _node_loss_job(root: Path, nodes: int, lost: int, victim_errors: bool = False) -> Path:
    """Every rank trains; `lost` stops logging mid-run without a word (the host died); the others report their
    connection to it closed, then a long stack dump. With `victim_errors`, the node they name timed out first
    (it logged errors of its own): it is not the lost one."""
    root.mkdir()
    frames = [f"frame #{i}: c10d::ProcessGroupNCCL::watchdogHandler() + 0x22b (0x7a{i:04x} in libtorch_cuda.so)"
              for i in range(40)]
    for n in range(nodes):
        host = f"gpu-host-{n:02d}"
        lines = [f"# heartbeat rank={n * 8} node={host} iter={i} elapsed={i * 1.2:.1f}s" for i in range(5, 90, 5)]
        if n == lost and not victim_errors:
            (root / f"{host}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
            continue
        if n == lost:
            lines.append(f"[Rank {n * 8}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9) ran for "
                         "90000 milliseconds before timing out.")
        lines.append("NCCL version 2.22.3+cuda12.6")  # printed when the communicator was created, lazily
        if n != lost:
            lines.append(f"{host}:110:697 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by "
                         f"remote peer gpu-host-{lost:02d}.c.lab.internal<55912>")
        lines += ["terminate called after throwing an instance of 'c10::DistBackendError'",
                  "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting", *frames]
        (root / f"{host}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_a_node_that_died_silently_is_found_through_the_peers_that_lost_it(tmp_path: Path) -> None:
    result = localize(_node_loss_job(tmp_path / "j", nodes=4, lost=2), engine="local")
    assert result.nodes[0].node == "gpu-host-02"
    assert result.nodes[0].events[0].startswith("lost: its log ends without an error of its own while 3 node(s)")
    # heartbeats before the errors are progress however long the stack dump after them; the NCCL version line
    # printed after them is a communicator being created, not the job going back to init
    assert result.stage == "training"


def test_a_named_peer_with_errors_of_its_own_is_not_the_lost_node(tmp_path: Path) -> None:
    result = localize(_node_loss_job(tmp_path / "j", nodes=4, lost=2, victim_errors=True), engine="local")
    assert not [e for n in result.nodes for e in n.events if e.startswith("lost:")]
