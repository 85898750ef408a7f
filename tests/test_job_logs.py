"""The job_logs check on real fault-lab jobs (tests/fixtures/l4_lab and job_logs: `make lab` output, torchrun,
Accelerate and DeepSpeed gloo jobs on CPU; truth.json says which fault was injected on which node), its UNKNOWN
without logs, the taxonomy leaves its findings confirm, and how the runner hands it the attached logs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent.checks.joblogs import read_job_logs
from agent.checks.manifest import SCRIPTS_DIR, load_manifest
from agent.checks.runner import CheckRunner
from agent.evidence import assess, rule_matches
from agent.executors.base import Executor, ScriptRun
from agent.inventory import HostInventory
from agent.l4.simulate import JobSpec, simulate_job
from agent.models import CheckResult, Verdict
from agent.taxonomy import load_taxonomy

LAB = Path(__file__).parent / "fixtures" / "l4_lab"
MORE = Path(__file__).parent / "fixtures" / "job_logs"  # lab jobs L4's tests do not use (a partition: no one node)
SCRIPT = SCRIPTS_DIR / "job_logs.py"
# what the logs of each injected fault must show on the faulty node: (finding id, severity)
EXPECTED = {
    "exception": ("python_exception", "FAIL"),
    "exit": ("exit_without_traceback", "FAIL"),
    "hang": ("rank_left_collective", "FAIL"),
    "nan": ("non_finite_loss", "FAIL"),
    "oom_rlimit": ("host_oom", "FAIL"),
    "oom_cgroup": ("rank_sigkilled", "WARN"),
    "ifname": ("socket_ifname", "FAIL"),
    "port_taken": ("port_in_use", "FAIL"),
    "sigkill": ("node_vanished", "FAIL"),
    "disk_full": ("disk_full", "WARN"),  # torch.save's short write, without the errno
    "partition": ("collective_timeout_all", "FAIL"),
}
# the finding ids that name a cause: no other may appear on a job
CAUSES = {"python_exception", "exit_without_traceback", "rank_left_collective", "non_finite_loss", "host_oom",
          "rank_sigkilled", "socket_ifname", "port_in_use", "node_vanished", "disk_full", "collective_timeout_all",
          "data_file_missing", "param_shape_mismatch", "peer_unreachable"}


def run_check(params: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, str(SCRIPT)], input=json.dumps(params), capture_output=True, text=True,
                          cwd=SCRIPTS_DIR, timeout=60, check=True)
    return json.loads(proc.stdout)


def jobs() -> list[Path]:
    out = []
    for job in sorted([*LAB.iterdir(), *MORE.iterdir()]):
        truth = json.loads((job / "truth.json").read_text())
        if truth["fault"] == "port_taken" and truth["launcher"] == "torchrun":
            continue  # nothing in its logs (test_port_taken_before_the_store_listens_is_not_judged)
        if truth["fault"] in EXPECTED or truth["fault"] == "code_skew":
            out.append(job)
    return out


@pytest.mark.parametrize("job", jobs(), ids=lambda p: p.name)
def test_the_faulty_nodes_own_failure_is_found(job: Path) -> None:
    truth = json.loads((job / "truth.json").read_text())
    result = run_check({"job_logs": read_job_logs(str(job / "logs"))})
    found = {(f["id"], f["severity"], f["entity"]) for f in result["findings"]}
    ids = {f["id"] for f in result["findings"]}
    if truth["fault"] == "code_skew":  # the ranks that see the other shapes report it, wherever the old code is
        assert ids == {"param_shape_mismatch"}, found
        return
    kind, severity = EXPECTED[truth["fault"]]
    if kind == "collective_timeout_all":  # every node timed out: each says so
        assert (kind, severity, truth["faulty_node"]) in found
    else:
        assert {(f, s, e) for f, s, e in found if f in CAUSES} == {(kind, severity, truth["faulty_node"])}, found
    assert result["verdict"] == severity


def test_port_taken_before_the_store_listens_is_not_judged() -> None:
    """torchrun's port taken on the rendezvous host: every node waits at rendezvous and prints nothing but a
    hostname warning; nothing in the logs names a cause, so nothing is claimed."""
    result = run_check({"job_logs": read_job_logs(str(LAB / "9-010" / "logs"))})
    assert result["verdict"] == "PASS" and not result["findings"]


def test_on_a_host_the_logs_name_it_reports_that_nodes_findings() -> None:
    job = LAB / "9-000"
    logs = read_job_logs(str(job / "logs"))
    faulty = json.loads((job / "truth.json").read_text())["faulty_node"]
    other = next(item["name"] for item in logs if item["name"] != faulty)
    assert [f["entity"] for f in run_check({"job_logs": logs, "host": faulty})["findings"]] == [faulty]
    clean = run_check({"job_logs": logs, "host": other})
    assert clean["verdict"] == "PASS" and clean["metrics"]["elsewhere"] == [f"python_exception@{faulty}"]


@pytest.mark.parametrize("params", [{}, {"job_logs": []}, {"job_logs": [{"name": "n1.log", "text": ""}]},
                                    {"job_logs": "not a list"}])
def test_without_logs_it_is_unknown_never_pass(params: dict[str, Any]) -> None:
    result = run_check(params)
    assert result["verdict"] == "UNKNOWN" and not result["findings"]


def test_peer_errors_alone_are_not_a_cause() -> None:
    """A rank whose only error is its peer's disappearance ('Connection closed by peer') failed because of another:
    with every node reporting only that, no node's own failure is claimed."""
    line = ("[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
            "[10.0.0.2]:4000")
    logs = [{"name": f"n{i}.log", "text": f"[rank {i}] step 5/30\n{line.replace('rank0', f'rank{i}')}\n"}
            for i in range(2)]
    result = run_check({"job_logs": logs})
    assert not {f["id"] for f in result["findings"]} & (CAUSES - {"exit_without_traceback"}), result["findings"]


def test_a_store_that_falls_back_to_ipv4_is_no_port_conflict() -> None:
    warning = ("[W1127 15:01:16.994908806 socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 "
               "(errno: 98 - Address already in use).")
    logs = [{"name": "n0.log", "text": warning + "\n[rank 0] process group ready on n0\n"}]
    assert run_check({"job_logs": logs})["verdict"] == "PASS"
    failed = ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
              "address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")
    logs = [{"name": "n0.log", "text": warning + "\n" + failed + "\n"}]
    assert [f["id"] for f in run_check({"job_logs": logs})["findings"]] == ["port_in_use"]


@pytest.mark.parametrize("error", [
    "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, unhandled system error",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
])
def test_a_gpu_or_nccl_error_is_not_the_scripts(error: str) -> None:
    """What the GPU, its driver or NCCL raised in a rank is for their checks to judge: never blamed on the script."""
    logs = [{"name": "n0.log", "text": f"[rank0]: Traceback (most recent call last):\n[rank0]: {error}\n"},
            {"name": "n1.log", "text": "[rank1]: RuntimeError: [pair.cc:553] Connection closed by peer [10.0.0.1]:1\n"}]
    assert "python_exception" not in {f["id"] for f in run_check({"job_logs": logs})["findings"]}


def test_a_lost_node_explains_its_peers_timeouts() -> None:
    """A node whose log stops while its peers lose it: the peers that then time out waited for it, not for one of
    their own (no rank is said to have stopped calling collectives)."""
    closed = "[rank{r}]: RuntimeError: [pair.cc:553] Connection closed by peer [10.0.0.3]:1"
    timeout = "[rank{r}]: RuntimeError: [unbound_buffer.cc:78] Timed out waiting 10000ms for recv operation to complete"
    logs = [{"name": "a.log", "text": "[rank 0] step 9/30\n"},
            {"name": "b.log", "text": "[rank 1] step 9/30\n" + closed.format(r=1) + "\nChildFailedError\n"},
            {"name": "c.log", "text": "[rank 2] step 9/30\n" + timeout.format(r=2) + "\nChildFailedError\n"},
            {"name": "d.log", "text": "[rank 3] step 9/30\n" + timeout.format(r=3) + "\nChildFailedError\n"}]
    found = {(f["id"], f["entity"]) for f in run_check({"job_logs": logs})["findings"]}
    assert found == {("node_vanished", "a")}


def test_as_many_quiet_ranks_as_timed_out_ones_name_no_one() -> None:
    timeout = "[rank{r}]: RuntimeError: [unbound_buffer.cc:78] Timed out waiting 10000ms for recv operation to complete"
    logs = [{"name": f"n{r}.log", "text": f"[rank {r}] step 3/30\n" + (timeout.format(r=r) if r < 2 else "") + "\n"}
            for r in range(4)]
    assert not run_check({"job_logs": logs})["findings"]
    logs[2]["text"] += timeout.format(r=2) + "\n"
    found = {(f["id"], f["entity"]) for f in run_check({"job_logs": logs})["findings"]}
    assert found == {("rank_left_collective", "n3")}


def test_every_finding_confirms_exactly_one_leaf() -> None:
    tax = load_taxonomy()
    for finding in CAUSES:
        leaves = [leaf.label for leaf in tax.leaves() if rule_matches(leaf.evidence, "job_logs", finding)]
        assert len(leaves) == 1, (finding, leaves)
    spec = load_manifest().get("job_logs")
    assert spec.needs == ["logs"] and spec.reads_attachments and spec.events and spec.tier == "passive"


def test_read_job_logs_keeps_each_nodes_tail(tmp_path: Path) -> None:
    (tmp_path / "node-a").mkdir()
    (tmp_path / "node-a" / "rank0.log").write_text("a0 first\n")
    (tmp_path / "node-a" / "rank1.log").write_text("a1 first\n")
    (tmp_path / "node-b.log").write_text("".join(f"line {i}\n" for i in range(300000)))
    (tmp_path / "core.bin").write_bytes(b"\x00" * 100)
    logs = {item["name"]: item["text"] for item in read_job_logs(str(tmp_path))}
    assert set(logs) == {"node-a", "node-b"}
    assert logs["node-a"] == "a0 first\na1 first\n"
    assert logs["node-b"].endswith("line 299999\n") and logs["node-b"].startswith("line ")
    assert len(logs["node-b"]) < 300000 * 7
    assert read_job_logs(str(tmp_path / "missing")) == []


class Local(Executor):
    """Runs the scripts here, recording the params each got; its host has no GPU (the inventory says so)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: dict[str, dict[str, Any]] = {}

    def run_script(self, script: Path, params: dict[str, Any], timeout: float) -> ScriptRun:
        self.seen[script.stem] = params
        proc = subprocess.run([sys.executable, str(script)], input=json.dumps(params), capture_output=True,
                              text=True, cwd=script.parent, timeout=timeout)
        return ScriptRun(stdout=proc.stdout, stderr=proc.stderr, rc=proc.returncode, duration_s=0.1)


def test_the_runner_gives_the_logs_to_their_check_only_and_runs_it_without_a_gpu() -> None:
    host = Local("compute-6")
    runner = CheckRunner([host])
    runner.adopt(HostInventory(host="compute-6", error="no NVIDIA GPU and no NVIDIA driver"))
    assert runner.expectations["compute-6"].cannot_check
    runner.attach_logs(str(LAB / "9-000" / "logs"))
    results = {r.check: r for r in runner.run(["job_logs", "gpu_inventory"], ["compute-6"])}
    logs = results["job_logs"]
    assert logs.verdict.value == "FAIL" and [f.id for f in logs.findings] == ["python_exception"]
    gpu = results["gpu_inventory"]
    assert gpu.verdict.value == "UNKNOWN" and "could not check" in gpu.summary
    assert set(host.seen) == {"job_logs"} and host.seen["job_logs"]["job_logs"]


def test_without_attached_logs_the_runner_passes_none() -> None:
    host = Local("n1")
    runner = CheckRunner([host])
    runner.adopt(HostInventory(host="n1", error="no NVIDIA GPU and no NVIDIA driver"))
    runner.attach_logs(None)
    (result,) = runner.run(["job_logs"], ["n1"])
    assert result.verdict.value == "UNKNOWN" and "no job logs attached" in result.summary
    assert "job_logs" not in host.seen["job_logs"]


def test_without_logs_the_leafs_other_checks_decide() -> None:
    """job_logs with nothing attached is UNKNOWN, and a leaf whose other check ran clean is rejected as it was
    before the check existed; a leaf it alone checks stays undecided (UNKNOWN never rejects)."""
    rules = load_taxonomy().node("INTERCONNECT_NETWORKING.SOCKET.IFNAME_MISCONFIG").evidence
    nothing = run_check({})
    assert nothing["needs"] == "logs"  # not given its input: no view hid anything
    unattached = CheckResult(check="job_logs", host="n1", verdict=Verdict.UNKNOWN, summary=nothing["summary"],
                             needs=nothing["needs"])
    clean = CheckResult(check="nccl_env", host="n1", verdict=Verdict.PASS)
    assert assess(rules, [unattached, clean]).strength == "none"
    assert assess(rules, [unattached, clean]).unknown == []
    alone = assess(["job_logs:python_exception"], [unattached])
    # open, but nothing was hidden: not given its input is no view's blind spot
    assert alone.strength == "unknown" and alone.unasked and alone.unknown == []
    refused = unattached.model_copy(update={"needs": ""})  # UNKNOWN for another reason: it still holds it open
    assert assess(rules, [refused, clean]).unknown


def test_a_rank_whose_gpu_failed_failed_first_its_peers_timeouts_say_nothing_of_the_network(tmp_path: Path) -> None:
    # the L4 generator's GPU fault: Xid 79 and a CUDA error on one rank, NCCL watchdog timeouts on every other
    truth = simulate_job(tmp_path / "logs", JobSpec(ranks=32, fault="gpu", seed=4))
    out = run_check({"job_logs": read_job_logs(str(tmp_path / "logs"))})
    found = {(f["id"], f["severity"], f["entity"]) for f in out["findings"]}
    assert ("device_failure", "INFO", truth.faulty_nodes[0]) in found
    assert not {fid for fid, _, _ in found} & {"collective_timeout_all", "rank_left_collective", "python_exception"}
