"""Slurm against a real cluster on 127.0.0.1 (tests/slurm_cluster.py: munged, slurmctld, four slurmd with GPU GRES):
`--host slurm:JOBID` resolves the job's nodes and GPUs and checks them over real SSH (tests/sshd.py); `aidai
drain` / `aidai resume` change the node in Slurm only with approval, behind the circuit breaker, in the audit log.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.audit import AuditLog, audit_path, read
from agent.audit_records import RunRecord
from agent.checks.manifest import load_manifest
from agent.checks.runner import CheckRunner
from agent.cli.main import app
from agent.executors.hosts import HostSpecError, SshOptions, executors_for
from agent.models import to_result
from agent.sim.scenario import create_scenario
from agent.slurm.drain import allowed_out, breakers, slurm_reason
from agent.slurm.jobs import SlurmJob, indices, job_note, parse_indices
from agent.slurm.scontrol import SlurmError, SlurmNode, parse_node
from tests.slurm_cluster import SlurmCluster, start_slurm
from tests.sshd import Sshd, start_sshd

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    started = start_slurm(tmp_path_factory.mktemp("slurm"))
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def slurm(cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """The cluster as aidai's own scontrol calls see it (SLURM_CONF), clean before and after each test."""
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    cluster.reset()
    yield cluster
    cluster.reset()


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


def ssh_query(sshd: Sshd, known: Path, **extra: str) -> str:
    return "&".join(f"{k}={v}" for k, v in {"user": sshd.user, "port": sshd.port, "key": sshd.client_key,
                                            "known_hosts": known, **extra}.items())


# ---- a job's nodes as hosts ---------------------------------------------------------------------------------
def test_job_nodes_are_checked_over_ssh(slurm: SlurmCluster, sshd: Sshd, tmp_path: Path) -> None:
    job = slurm.submit("-N", "2", "--gres=gpu:2")
    nodelist = slurm.wait_running(job)
    known = sshd.known_hosts(tmp_path / "known_hosts")
    options = SshOptions(key_file=str(sshd.client_key), known_hosts=str(known), user=sshd.user, port=sshd.port)
    executors = executors_for([f"slurm:{job}"], options)
    try:
        names = [e.name for e in executors]
        assert names == slurm.run("scontrol", "show", "hostnames", nodelist).split()  # Slurm node names
        for executor in executors:
            assert (executor.target.host, executor.target.port) == ("127.0.0.1", sshd.port)  # NodeAddr, SSH port
            job_seen = executor.slurm_job
            assert job_seen is not None and job_seen.job_id == job and job_seen.state == "RUNNING"
            assert [n.gpus for n in job_seen.nodes] == [[0, 1], [0, 1]]  # GRES=gpu:2(IDX:0-1) on each node
        checks = CheckRunner(executors)
        taken = checks.take_inventory()
        # the nodes were reached over SSH and looked at: this VM has no GPU, which is what they must say
        assert set(taken) == set(names)
        if not Path("/proc/driver/nvidia").exists():
            for found in taken.values():
                assert "no NVIDIA GPU and no NVIDIA driver" in found.cannot_check
        for name in names:
            assert checks.inventories[name].error == ""
            assert checks.inventories[name].hostname == os.uname().nodename
        spec = load_manifest().get("host_memory")  # a passive check, run on each node over SSH regardless
        for executor in executors:
            result = to_result(spec, executor.name, executor.run_script(spec.script_path, {}, spec.timeout_s))
            assert result.host == executor.name and "ssh" not in result.reason, result
    finally:
        for executor in executors:
            executor.close()


def test_job_spec_errors_are_clear(slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    held = slurm.submit("--hold")
    cases = {"slurm:12;rm": "not a Slurm job id", "slurm:999999": "does not know job 999999",
             f"slurm:{held}": "has no nodes yet", f"slurm:{held}?colour=red": "unknown option",
             f"slurm:{held}?port=99999": "bad port"}
    for spec, message in cases.items():
        with pytest.raises(HostSpecError, match=message):
            executors_for([spec])
    running = slurm.submit()
    node = slurm.wait_running(running)
    with monkeypatch.context() as patch:  # Slurm always fills NodeAddr (it defaults to the name); a broken one:
        patch.setattr("agent.slurm.jobs.show_nodes", lambda expression: [SlurmNode(node, address="")])
        with pytest.raises(HostSpecError, match=f"Slurm node {node} .* has no address"):
            executors_for([f"slurm:{running}"])
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol here
    with pytest.raises(HostSpecError, match="scontrol not found on PATH"):
        executors_for([f"slurm:{held}"])


def test_array_tasks_resolve_alone_and_together(slurm: SlurmCluster, sshd: Sshd) -> None:
    array = slurm.submit("--array=1-2", "--gres=gpu:1")
    options = SshOptions(port=sshd.port)
    held: dict[str, set[int]] = {}
    for task in (f"{array}_1", f"{array}_2"):
        slurm.wait_running(task)
        [executor] = executors_for([f"slurm:{task}"], options)
        job = executor.slurm_job
        assert job is not None and job.job_id == task and len(job.nodes[0].gpus) == 1
        held.setdefault(executor.name, set()).update(job.nodes[0].gpus)
    whole = executors_for([f"slurm:{array}"], options)  # the array job: every task's node, GPUs merged per node
    assert {e.name: set(e.slurm_job.on(e.name).gpus) for e in whole} == held


def test_diagnosis_on_a_job_links_the_fault_to_it(slurm: SlurmCluster, sshd: Sshd, tmp_path: Path) -> None:
    """A job's node whose GPU 1 has an uncorrectable ECC error (a simulated GPU host, reached over real SSH): the
    report says which job held that GPU, and suggests the drain (never does it)."""
    scenario = create_scenario(tmp_path / "sim", faults=[{"fault": "gpu.ecc_uncorrectable", "gpu": 1}],
                               hosts=["node-1"])
    job = slurm.submit("-N", "1", "--gres=gpu:2")
    node = slurm.wait_running(job)
    known = sshd.known_hosts(tmp_path / "known_hosts")
    spec = f"slurm:{job}?" + ssh_query(sshd, known, env=str(scenario.host_dir("node-1") / "activate"))
    data = tmp_path / "data"
    result = runner.invoke(app, ["diagnose", "Training crashed: CUDA error: uncorrectable ECC error encountered on "
                                 "local rank 1", "--host", spec, "--no-history", "--json", "--data-dir", str(data),
                                 "--ticket", str(tmp_path / "ticket")])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    details = report["details"]
    assert details["hosts"] == [node]
    assert details["slurm_jobs"] == [{"job_id": job, "state": "RUNNING", "partition": "gpu",
                                      "nodes": [{"node": node, "address": "127.0.0.1", "gpus": [0, 1]}]}]
    cause = details["root_causes"][0]
    assert cause["label"] == "GPU.MEMORY.UNCORRECTABLE_ECC"
    # "node-1 (node1): GPU 1 (PCI ..., GPU-..., serial ...), GPU 1 of Slurm job 5": the simulated GPU host names
    # itself node-1; the Slurm node is node1
    assert any(f"({node}): GPU 1 (" in w and w.endswith(f"GPU 1 of Slurm job {job}") for w in cause["where"]), \
        cause["where"]
    assert cause["drain"] == [f"aidai drain {node} --reason 'GPU.MEMORY.UNCORRECTABLE_ECC (run {report['run_id']})' "
                              f"--run {report['run_id']}"]
    assert "DRAIN" not in slurm.node_line(node)  # suggested, not done
    ticket = (tmp_path / "ticket.md").read_text()
    assert f"Slurm job {job} (RUNNING, partition gpu)" in ticket and "GPUs 0-1" in ticket
    assert "drain it in Slurm (asks for approval): `aidai drain" in ticket
    events, _ = read(audit_path(data / "runs", report["run_id"]))
    assert events[0]["slurm_jobs"] == [f"Slurm job {job} (RUNNING, partition gpu): {node} GPUs 0-1"]


# ---- drain and resume ---------------------------------------------------------------------------------------
def aidai(*args: str, data: Path, stdin: str | None = None):
    return runner.invoke(app, [*args, "--data-dir", str(data)], input=stdin)


def fleet_log(data: Path) -> list[dict]:
    return read(audit_path(data / "runs", "fleet-actions"))[0]


def test_drain_needs_approval_and_is_audited(slurm: SlurmCluster, tmp_path: Path) -> None:
    data = tmp_path / "data"
    declined = aidai("drain", "node4", "--reason", "Xid 79 on GPU 2", data=data, stdin="node3\n")
    assert declined.exit_code == 1, declined.output
    assert "DRAIN" not in slurm.node_line("node4")
    last = fleet_log(data)[-1]
    assert (last["event"], last["decision"], last["node"]) == ("approval", "declined", "node4")
    assert "'node3', not 'node4'" in last["via"]

    approved = aidai("drain", "node4", "--reason", "Xid 79 on GPU 2", data=data, stdin="node4\n")
    assert approved.exit_code == 0, approved.output
    line = slurm.node_line("node4")
    assert "+DRAIN" in line and "Reason=aidai: Xid 79 on GPU 2 [root@" in line
    approval, action = fleet_log(data)[-2:]
    assert (approval["event"], approval["decision"], approval["via"]) == ("approval", "approved", "typed the node name")
    assert (action["event"], action["action"], action["result"]) == ("slurm", "drain", "done")
    assert action["reason"] == "aidai: Xid 79 on GPU 2" and "DRAIN" in action["state_after"]

    again = aidai("drain", "node4", "--reason", "other", "--yes", data=data)  # ours already: nothing to do
    assert again.exit_code == 0 and "already drained" in again.stdout
    assert "Reason=aidai: Xid 79 on GPU 2" in slurm.node_line("node4")


def test_circuit_breaker_refuses_then_force_overrides(slurm: SlurmCluster, tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert aidai("drain", "node1", "--reason", "first", "--yes", data=data).exit_code == 0
    refused = aidai("drain", "node2", "--reason", "second", "--yes", data=data)  # 2 of 4 > 10 % (and > 1 node)
    assert refused.exit_code == 1
    assert "refused by the circuit breaker" in refused.stdout and "1 of 4 nodes already out" in refused.stdout
    assert "DRAIN" not in slurm.node_line("node2")
    record = fleet_log(data)[-1]
    assert (record["result"], record["breaker"][0]["out"], record["breaker"][0]["allowed"]) == ("refused",
                                                                                                 ["node1"], 1)
    wider = aidai("drain", "node2", "--reason", "second", "--yes", "--max-drained-share", "0.5", data=data)
    assert wider.exit_code == 0, wider.output
    forced = aidai("drain", "node3", "--reason", "third", "--yes", "--force", "--max-drained-share", "0.5", data=data)
    assert forced.exit_code == 0, forced.output
    assert "DRAIN" in slurm.node_line("node3")
    assert fleet_log(data)[-1]["forced"] is True and fleet_log(data)[-1]["breaker"][0]["trips"] is True
    bad = aidai("drain", "node4", "--reason", "x", "--yes", "--max-drained-share", "1.5", data=data)
    assert bad.exit_code == 2 and "DRAIN" not in slurm.node_line("node4")


def test_resume_tells_whose_drain_it_was(slurm: SlurmCluster, tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert aidai("drain", "node1", "--reason", "ECC on GPU 5", "--yes", data=data).exit_code == 0
    resumed = aidai("resume", "node1", "--yes", data=data)
    assert resumed.exit_code == 0, resumed.output
    assert "drained by aidai" in resumed.stdout and "ECC on GPU 5" in resumed.stdout
    assert "DRAIN" not in slurm.node_line("node1")
    slurm.run("scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=PSU replaced, burn-in pending")
    theirs = aidai("resume", "node2", "--yes", data=data)
    assert theirs.exit_code == 1 and "another reason" in theirs.stdout and "PSU replaced" in theirs.stdout
    assert "DRAIN" in slurm.node_line("node2")
    forced = aidai("resume", "node2", "--yes", "--force", data=data)
    assert forced.exit_code == 0 and "DRAIN" not in slurm.node_line("node2")
    assert [e.get("result") for e in fleet_log(data) if e["event"] == "slurm"] == ["done", "done", "refused", "done"]
    assert aidai("resume", "node3", "--yes", data=data).stdout.count("nothing to resume") == 1


def test_drain_in_a_runs_audit_log_and_bad_input(slurm: SlurmCluster, tmp_path: Path) -> None:
    data = tmp_path / "data"
    AuditLog(audit_path(data / "runs", "run-1"), "run-1").append(RunRecord(operator="alice", hosts=[], approval="none"))
    done = aidai("drain", "node2", "--reason", "Xid 48", "--yes", "--run", "run-1", data=data)
    assert done.exit_code == 0, done.output
    assert "Reason=aidai: Xid 48 (run run-1) [" in slurm.node_line("node2")
    assert [e["event"] for e in read(audit_path(data / "runs", "run-1"))[0]] == ["run", "approval", "slurm"]
    for args, message in ((["drain", "node3", "--reason", "x", "--run", "no-such-run"], "no run 'no-such-run'"),
                          (["drain", "node9", "--reason", "x", "--yes"], "Slurm has no node 'node9'"),
                          (["drain", "node[1-2]", "--reason", "x", "--yes"], "not a Slurm node name"),
                          (["drain", "node3", "--reason", "  ", "--yes"], "--reason is empty")):
        bad = aidai(*args, data=data)
        assert bad.exit_code == 2 and message in bad.output, bad.output
    assert "DRAIN" not in slurm.node_line("node3")


# ---- parsing and arithmetic (no cluster) ----------------------------------------------------------------------
def test_node_reason_with_spaces_and_equals_signs() -> None:
    line = ("NodeName=gpu7 Arch=x86_64 NodeAddr=10.0.0.7 NodeHostName=gpu7 OS=Linux 6.1.0 #1 SMP State=MIXED+DRAIN "
            "Partitions=gpu,long Reason=Xid=79 on GPU 2 [see INC-1] [ops@2026-11-26T10:00:00] Comment=(null)")
    node = parse_node(line)
    assert (node.name, node.address, node.partitions) == ("gpu7", "10.0.0.7", ["gpu", "long"])
    assert (node.reason, node.reason_by, node.drained) == ("Xid=79 on GPU 2 [see INC-1]", "ops@2026-11-26T10:00:00",
                                                           True)
    assert parse_node("NodeName=n1 NodeAddr=(null) State=DOWN*").address == ""
    assert parse_node("NodeName=n1 State=DOWN*").out_of_service


def test_breaker_arithmetic_and_reason_rules() -> None:
    assert [allowed_out(n, 0.1) for n in (1, 4, 10, 19, 100)] == [1, 1, 1, 1, 10]
    assert allowed_out(100, 0.29) == 29 and allowed_out(10, 0.3) == 3
    nodes = [SlurmNode(f"n{i}", "a", state=s, partitions=["p"]) for i, s in enumerate(
        ["IDLE", "DOWN*", "IDLE+DRAIN", "MIXED", "IDLE"] + ["IDLE"] * 15)]
    [breaker] = breakers(nodes[0], nodes, 0.1)
    assert (breaker.total, breaker.out, breaker.allowed, breaker.after, breaker.trips) == (20, ["n1", "n2"], 2, 3,
                                                                                          True)
    [already_down] = breakers(nodes[1], nodes, 0.1)  # draining a down node takes nothing more out of service
    assert not already_down.trips
    assert slurm_reason("Xid 79\n on GPU 2", "r1") == "aidai: Xid 79 on GPU 2 (run r1)"
    for bad in ("", "x" * 201, "bell\x07"):
        with pytest.raises(SlurmError):
            slurm_reason(bad)


def test_job_gpu_links() -> None:
    assert parse_indices("0-2,5") == [0, 1, 2, 5] and parse_indices("N/A") == [] and indices([5, 0, 1, 2]) == "0-2,5"
    job = SlurmJob.model_validate({"job_id": "7", "nodes": [{"node": "a", "gpus": [0, 1]}, {"node": "b"}]})
    assert job_note([job], "a", 1) == "GPU 1 of Slurm job 7"
    assert job_note([job], "a", 3) == "not one of Slurm job 7's GPUs (0-1)"
    assert job_note([job], "b", 3) == "a node of Slurm job 7" and job_note([job], "c", 0) == ""
