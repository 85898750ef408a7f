"""A Slurm job as the hosts to check: its nodes, each node's address, and the GPUs the job held on it.

`scontrol show job -d -o JOBID` gives the job's NodeList and, per group of nodes, the GPU indices it was given
(`Nodes=node[1-2] CPU_IDs=0-3 Mem=0 GRES=gpu:a100:2(IDX:0-1)`); `scontrol show node -o` gives each node's NodeAddr.
The job, its nodes and GPUs go on the incident and into the report and ticket, so a fault found on GPU 2 of a
node reads against the job that ran there.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from pydantic import BaseModel, Field

from agent.slurm.scontrol import JOB_ID, SlurmError, fields, hostnames, present, run, show_nodes

# GPU GRES with its indices: gpu:2(IDX:0-1), gpu:a100:2(IDX:0,2), gpu(IDX:0-1) (older GRES_IDX=)
GPU_IDX = re.compile(r"gpu(?::[^:(),]+)?(?::\d+)?\(IDX:([^)]*)\)")


class JobNode(BaseModel):
    node: str  # the Slurm node name: how the host is named in the report
    address: str = ""  # NodeAddr: where SSH connects
    gpus: list[int] = Field(default_factory=list)  # GPU indices the job held on the node (empty: not known)


class SlurmJob(BaseModel):
    job_id: str
    state: str = ""  # RUNNING, FAILED, COMPLETED ... when aidai looked
    partition: str = ""
    nodes: list[JobNode] = Field(default_factory=list)

    def on(self, node: str) -> JobNode | None:
        return next((n for n in self.nodes if n.node == node), None)

    def line(self) -> str:
        """'Slurm job 1234 (RUNNING, partition gpu): node1 GPUs 0-1; node2 GPUs 0-1'."""
        head = ", ".join(part for part in (self.state, f"partition {self.partition}" if self.partition else "")
                         if part)
        nodes = "; ".join(f"{n.node} GPUs {indices(n.gpus)}" if n.gpus else n.node for n in self.nodes)
        return f"Slurm job {self.job_id}" + (f" ({head})" if head else "") + f": {nodes}"


def indices(gpus: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    ranges: list[list[int]] = []
    for gpu in sorted(set(gpus)):
        if ranges and gpu == ranges[-1][1] + 1:
            ranges[-1][1] = gpu
        else:
            ranges.append([gpu, gpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def parse_indices(text: str) -> list[int]:
    """'0-1,3' -> [0, 1, 3]; anything else (N/A) -> []."""
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            out.extend(range(int(low), int(high or low) + 1))
    return out


def _gpus_by_node(pairs: list[tuple[str, str]]) -> dict[str, list[int]]:
    """The per-node detail of `show job -d`: each Nodes= group, then its GRES= (or GRES_IDX=) with GPU indices."""
    found: dict[str, list[int]] = {}
    group: list[str] = []
    for key, value in pairs:
        if key == "Nodes":
            group = hostnames(value) if present(value) else []
        elif key in ("GRES", "GRES_IDX") and group:
            gpus = [i for match in GPU_IDX.finditer(value) for i in parse_indices(match.group(1))]
            for name in group:
                found[name] = sorted({*found.get(name, []), *gpus})
    return found


def resolve_job(job_id: str) -> SlurmJob:
    """The job's nodes with their addresses and GPUs. An array or heterogeneous job's parts are merged."""
    if not JOB_ID.fullmatch(job_id):
        raise SlurmError(f"{job_id!r} is not a Slurm job id (digits, with an optional _N array index or +N "
                         "heterogeneous offset: 1234, 1234_7, 1234+1)")
    try:
        out = run("scontrol", ["show", "job", "-d", "-o", job_id])
    except SlurmError as exc:
        if "invalid job id" in str(exc).lower():
            raise SlurmError(f"Slurm does not know job {job_id} (a finished job is forgotten after MinJobAge, "
                             f"300 s by default; name its nodes with --host ssh://... instead): {exc}") from None
        raise
    records = [fields(line) for line in out.splitlines() if line.startswith("JobId=")]
    if not records:
        raise SlurmError(f"Slurm does not know job {job_id}")
    states: list[str] = []
    partitions: list[str] = []
    names: list[str] = []
    gpus: dict[str, list[int]] = {}
    waiting: list[str] = []
    for pairs in records:
        values = dict(pairs)
        state = values.get("JobState", "")
        nodelist = present(values.get("NodeList"))
        if not nodelist:
            waiting.append(f"{values.get('JobId', job_id)} {state or 'without state'}"
                           + (f" ({values['Reason']})" if present(values.get("Reason")) else ""))
            continue
        states.append(state)
        partitions.append(values.get("Partition", ""))
        names += hostnames(nodelist)
        for name, held in _gpus_by_node(pairs).items():
            gpus[name] = sorted({*gpus.get(name, []), *held})
    if not names:
        raise SlurmError(f"job {job_id} has no nodes yet: {'; '.join(waiting)}")
    names = list(dict.fromkeys(names))
    described = {n.name: n for n in show_nodes(",".join(names))}
    nodes: list[JobNode] = []
    for name in names:
        node = described.get(name)
        if node is None or not node.address:
            raise SlurmError(f"Slurm node {name} (job {job_id}) has no address (NodeAddr unset): name it with "
                             "--host ssh://user@ADDRESS instead")
        nodes.append(JobNode(node=name, address=node.address, gpus=gpus.get(name, [])))
    return SlurmJob(job_id=job_id, state="/".join(dict.fromkeys(states)),
                    partition=",".join(dict.fromkeys(p for p in partitions if p)), nodes=nodes)


def jobs_of(executors: Iterable[object]) -> list[SlurmJob]:
    """The Slurm jobs the hosts were resolved from (`--host slurm:JOBID`), once each."""
    jobs: dict[str, SlurmJob] = {}
    for executor in executors:
        job = getattr(executor, "slurm_job", None)
        if isinstance(job, SlurmJob):
            jobs.setdefault(job.job_id, job)
    return list(jobs.values())


def job_note(jobs: list[SlurmJob], host: str, gpu: int | None) -> str:
    """How a finding on HOST (GPU index GPU, if any) relates to the jobs: 'GPU 2 of Slurm job 1234', 'not one
    of Slurm job 1234's GPUs (0-1)', 'a node of Slurm job 1234'; '' when no job ran there."""
    notes = []
    for job in jobs:
        node = job.on(host)
        if node is None:
            continue
        if gpu is None or not node.gpus:
            notes.append(f"a node of Slurm job {job.job_id}")
        elif gpu in node.gpus:
            notes.append(f"GPU {gpu} of Slurm job {job.job_id}")
        else:
            notes.append(f"not one of Slurm job {job.job_id}'s GPUs ({indices(node.gpus)})")
    return "; ".join(notes)


def drain_command(node: str, reason: str, run_id: str = "") -> str:
    """The `aidai drain` command an operator may run (it asks for approval and checks the circuit breaker)."""
    return shlex.join(["aidai", "drain", node, "--reason", reason, *(["--run", run_id] if run_id else [])])
