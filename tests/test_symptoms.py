"""Symptom classes of a customer's report, and the offline reasoner's use of them (agent/reasoning/symptoms.py)."""

from __future__ import annotations

import numpy as np
import pytest

from agent.incident import Incident
from agent.reasoning import offline
from agent.reasoning.base import NodeInfo
from agent.reasoning.offline import OfflineReasoner
from agent.reasoning.symptoms import SYMPTOMS, shown
from agent.taxonomy import load_taxonomy

TAXONOMY = load_taxonomy()


@pytest.mark.parametrize(("text", "symptom"), [
    ("Fine-tuning is very slow on the new nodes", "slow"),
    ("all_reduce_perf shows low busbw between the two nodes", "slow"),
    ("the epoch now takes much longer than on the old cluster", "slow"),
    ("training projects 20 hours -> 5 expected", "slow"),
    ("the job hangs at the first allreduce", "hang"),
    ("ranks are stuck in barrier()", "hang"),
    ("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)", "hang"),
    ("after 2k steps the loss becomes NaN", "wrong_results"),
    ("multi-node allreduce returns wrong results", "wrong_results"),
    ("RuntimeError: No CUDA GPUs are available", "no_gpu"),
    ("torch.cuda.is_available() returns False inside the container", "no_gpu"),
    ("nvidia-smi: No devices were found", "no_gpu"),
    ("after the error the GPU becomes unusable until a reboot", "no_gpu"),
    ("after the maintenance window node-7 lost one GPU", "no_gpu"),
    ("nvidia-smi lists only 7 GPUs on the 8-GPU box", "no_gpu"),
    ("torch.cuda.device_count() returns 1 although the node has four cards", "no_gpu"),
    ("the container toolkit fails to communicate with the GPU devices", "no_gpu"),
    ("validator log: No pre-installed driver detected on the host: exit status 14", "no_gpu"),
    ("nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown", "no_gpu"),
    ("nvidia-cuda-validator-x7k2p   0/1   Init:CrashLoopBackOff   5 (2m ago)   9m", "no_gpu"),
    ("the driver-validation was unable to pass", "no_gpu"),
    ("the server stalls and then the RPC call to the worker timed out", "hang"),
    ("tensor parallel runs once, then every later run stalls", "hang"),
    ("the node became unresponsive during the second epoch", "hang"),
    ("after resume nvidia-smi works but ollama runs on the CPU instead", "no_gpu"),
    ("the model falls back to the CPU after the upgrade", "no_gpu"),
    ("Ollama will not use the GPU on the new card", "no_gpu"),
    ("the workstation reboots during training", "reboot"),
    ("the machine shuts down without any log", "reboot"),
    ("it crashes the whole system", "reboot"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom"),
    ("the trainer was killed with exit code 137", "killed"),
    ("FileNotFoundError: [Errno 2] No such file or directory: '/scratch/shard-0001.bin'", "data_missing"),
    ("the checkpoint is corrupted after the restart", "data_missing"),
    ("NCCL WARN Call to connect returned Connection refused", "cannot_connect"),
    ("ncclUnhandledCudaError / unhandled system error during init", "cannot_connect"),
    ("dso-a100-03:2330:2658 [2] NCCL INFO bootstrap.cc:270 -> 2", "cannot_connect"),
    ("ubuntu:39964:40075 [0] NCCL INFO misc/socket.cc:564 -> 2", "cannot_connect"),
    ("Training is stuck or core dump", "crash"),
    ("Fatal Python error: Segmentation fault", "crash"),
    ("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory", "crash"),
    ("the python process died after two epochs", "crash"),
])
def test_each_class_is_read_from_its_usual_wording(text: str, symptom: str) -> None:
    assert symptom in shown(text), shown(text)


@pytest.mark.parametrize("text", [
    "iteration 1200/5000 | lm loss 2.314 | grad norm 0.92 | 512 samples/s",
    "NCCL INFO Channel 00/32 : 0[0] -> 1[1] via P2P/IPC",
    "deployed in the Nanjing region with a finance workload",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "we schedule only 4 GPUs per node for this job",
    "torchrun --nproc_per_node 8 train.py --save-dumps core_dumpster/",
    "nvidia-cuda-validator-44rfx   0/1   Completed   0   14m",
    # an NCCL trace of another error (5: invalid usage) from elsewhere in its code
    "node1:41213:41402 [2] NCCL INFO group.cc:73 -> 5",
    "the data loader workers use 100% CPU while the GPUs wait",
])
def test_ordinary_lines_show_no_symptom(text: str) -> None:
    assert shown(text) == {}


def test_every_class_is_produced_by_some_leaf_and_only_leaves_carry_them() -> None:
    produced = {name for leaf in TAXONOMY.leaves() for name in leaf.symptoms}
    assert produced == set(SYMPTOMS)
    assert all(not node.symptoms for node in TAXONOMY.root.descendants if node.children)


def flat_embed(texts: list[str]) -> np.ndarray:
    """Every text the same vector: similarity says nothing, so only the incident's signals rank."""
    return np.ones((len(texts), 4)) / 2.0


def test_a_vague_report_ranks_the_causes_that_fail_jobs_that_way_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offline, "WORDS", 0.0)  # the symptom signal alone: the documentation's words are their own test
    reasoner = OfflineReasoner(TAXONOMY, embed=flat_embed)
    summary = reasoner.summarize(Incident(text="Our fine-tuning run became 4x slower after the move to the new rack"))
    leaves = [NodeInfo(label=leaf.label, description=leaf.description) for leaf in TAXONOMY.leaves()]
    ranked = reasoner.rank_children(summary, NodeInfo(label="", description="all"), leaves, [], {})
    slow = {leaf.label for leaf in TAXONOMY.leaves() if "slow" in leaf.symptoms}
    assert {c.label for c in ranked[:len(slow)]} == slow
    top = ranked[0]
    assert top.score == pytest.approx(ranked[len(slow)].score + offline.SYMPTOM)
    assert "it fails jobs as the incident describes (slow: 'slower')" in top.why


def test_a_category_gets_no_symptom_score() -> None:
    reasoner = OfflineReasoner(TAXONOMY, embed=flat_embed)
    summary = reasoner.summarize(Incident(text="the node reboots under load"))
    assert reasoner.symptom_hit(summary, "OTHER") == {}
    assert reasoner.symptom_hit(summary, "OTHER.PLATFORM.POWER_EVENT") == {"reboot": "reboots"}
