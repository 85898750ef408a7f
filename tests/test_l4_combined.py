"""L4 on a job given as one launcher output (DeepSpeed/pdsh `host: ` prefixes, `srun --label` task prefixes): the
file is split per node, so the localizer compares nodes as it does for a file per node."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from agent.l4 import combined
from agent.l4.localize import localize
from agent.l4.reader import LogFile
from agent.l4.simulate_ds import DsSpec, simulate_ds_job

PDSH = b"""[2024-05-02 21:14:03,000] [INFO] [runner.py:568:main] cmd = pdsh -S -f 1024 -w gpu01,gpu02
gpu01: [2024-05-02 21:14:05,100] [INFO] [launch.py:146:main] WORLD INFO DICT: {'gpu01': [0], 'gpu02': [0]}
gpu02: [2024-05-02 21:14:05,200] [INFO] [launch.py:146:main] WORLD INFO DICT: {'gpu01': [0], 'gpu02': [0]}
gpu01: Epoch 0:  10%|#         | 10/100 [00:05<00:45, loss=2.31]
gpu02: RuntimeError: CUDA error: an illegal memory access was encountered
"""

SRUN = """srun: job 524549 queued and waiting for resources
  0: > initializing torch distributed ...
  1: > initializing torch distributed ...
  2: > initializing torch distributed ...
{steps}  2: RuntimeError: CUDA error: an illegal memory access was encountered
  0: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=410, OpType=ALLREDUCE) ran for 600042 \
milliseconds before timing out.
  1: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=410, OpType=ALLREDUCE) ran for 600042 \
milliseconds before timing out.
srun: error: nid0042: task 2: Exited with exit code 1
srun: error: nid0040: tasks 0-1: Exited with exit code 1
"""


def _srun_job(path: Path) -> Path:
    steps = "".join(f"  0: iteration {k}/ 1000 | consumed samples: {k * 64} | lm loss: 2.5\n" for k in range(1, 60))
    path.write_text(SRUN.format(steps=steps), encoding="utf-8")
    return path


@pytest.mark.parametrize(("sample", "kind"), [
    (PDSH, "host"),
    (b"  0: hello\n  1: hello\n 12: world\n", "task"),
    (b"gpu01: one\ngpu01: two\n", None),  # one host: a per-node file, not a combined one
    (b"Traceback (most recent call last):\nRuntimeError: CUDA error\nINFO: done\n", None),  # words, not hosts
    (b"step 1 loss 2.3\nstep 2 loss 2.2\nrank0: x\n", None),  # few prefixed lines
    (b"", None),
])
def test_prefix_kind(sample: bytes, kind: str | None) -> None:
    assert combined.prefix_kind(sample) == kind


def test_pdsh_output_splits_per_host_in_order_without_prefixes(tmp_path: Path) -> None:
    src = tmp_path / "deepspeed.out"
    src.write_bytes(PDSH)
    parts = combined.split(LogFile(str(src), "deepspeed"), tmp_path / "parts")
    assert parts is not None
    assert [p.node for p in parts] == ["gpu01", "gpu02"]
    first = Path(parts[0].path).read_text().splitlines()
    assert first[0].startswith("[2024-05-02 21:14:05,100] [INFO] [launch.py")
    assert first[1].startswith("Epoch 0:")
    # the runner's own line belongs to no node
    assert not any("runner.py" in Path(p.path).read_text() for p in parts)


def test_small_flush_gives_the_same_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "deepspeed.out.gz"
    src.write_bytes(gzip.compress(PDSH * 50))
    whole = combined.split(LogFile(str(src), "x"), tmp_path / "a")
    monkeypatch.setattr(combined, "FLUSH_BYTES", 64)
    flushed = combined.split(LogFile(str(src), "x"), tmp_path / "b")
    assert whole and flushed
    assert [Path(p.path).read_bytes() for p in whole] == [Path(p.path).read_bytes() for p in flushed]


def test_a_job_with_a_file_per_node_is_not_split(tmp_path: Path) -> None:
    files = []
    for host in ("gpu01", "gpu02"):
        path = tmp_path / f"{host}.log"
        path.write_bytes(PDSH)
        files.append(LogFile(str(path), host))
    assert combined.expand(files, tmp_path / "parts") is files
    assert not (tmp_path / "parts").exists()


def test_srun_tasks_take_the_host_srun_names(tmp_path: Path) -> None:
    result = localize(_srun_job(tmp_path / "slurm-524549.out"), engine="local")
    assert sorted(n.node for n in result.nodes) == ["nid0040", "nid0042"]
    assert result.nodes[0].node == "nid0042"
    assert result.stage == "training"


def test_unnamed_srun_tasks_keep_their_number(tmp_path: Path) -> None:
    text = _srun_job(tmp_path / "job.out").read_text()
    (tmp_path / "job.out").write_text("\n".join(ln for ln in text.splitlines() if "srun: error" not in ln) + "\n")
    result = localize(tmp_path / "job.out", engine="local")
    assert sorted(n.node for n in result.nodes) == ["task0", "task1", "task2"]
    assert result.nodes[0].node == "task2"


@pytest.mark.parametrize(("fault", "when"), [("gpu", "mid"), ("nic", "end"), ("oom", "init")])
def test_combined_deepspeed_output_localizes_as_the_per_node_files_do(tmp_path: Path, fault: str, when: str) -> None:
    spec = dict(nodes=8, fault=fault, when=when, steps=400, seed=11)
    truth = simulate_ds_job(tmp_path / "split", DsSpec(**spec))
    simulate_ds_job(tmp_path / "one", DsSpec(**spec, combined=True))
    assert [p.name for p in (tmp_path / "one").iterdir()] == ["deepspeed.out"]
    per_node = localize(tmp_path / "split", engine="local")
    one = localize(tmp_path / "one", engine="local")
    assert len(one.nodes) == 8
    assert one.nodes[0].node == per_node.nodes[0].node == truth.faulty_node
    assert one.stage == per_node.stage == truth.stage


def test_a_combined_gzip_cut_short_is_reported_not_split(tmp_path: Path) -> None:
    src = tmp_path / "deepspeed.out.gz"
    src.write_bytes(gzip.compress(PDSH * 20000)[:30000])
    assert combined.split(LogFile(str(src), "deepspeed"), tmp_path / "parts") is None
    assert not list((tmp_path / "parts").glob("*.log"))
    result = localize(src, engine="local")
    assert [s.reason.split(":")[0] for s in result.skipped_files] == ["corrupt or truncated gzip"]


def test_progress_bar_redraws_stay_in_their_prefixed_line(tmp_path: Path) -> None:
    src = tmp_path / "deepspeed.out"
    src.write_bytes(PDSH + b"gpu01: Epoch 0:  20%|##   | 20/100\rEpoch 0:  30%|###  | 30/100\n")
    parts = combined.split(LogFile(str(src), "deepspeed"), tmp_path / "parts")
    assert parts is not None
    assert Path(parts[0].path).read_bytes().endswith(b"20/100\rEpoch 0:  30%|###  | 30/100\n")
