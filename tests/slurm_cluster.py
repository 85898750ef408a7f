"""A real Slurm cluster on 127.0.0.1 for the tests: Debian's munged, slurmctld and one slurmd per node (`slurmd -N`,
each on its own port), all with their sockets, ports, state and logs in a temp dir; nothing under /etc is used.

Each node has four GPUs in Slurm's GRES accounting (gres.conf points at empty files: Slurm only counts the devices
and hands out their indices), so `scontrol show job -d` reports the GPU indices a job holds, as on a GPU cluster.
slurmd runs as root (it starts jobs as their users); the tests run as root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.processes import stop
from tests.sshd import free_port

BINARIES = ("munged", "slurmctld", "slurmd", "scontrol", "sinfo", "squeue", "sbatch", "scancel")
READY_S = 90.0  # generous: four slurmd registering on a loaded two-core machine


class SlurmUnavailable(RuntimeError):
    """Slurm did not come up; the message carries the daemons' logs."""


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    nodes: list[str]
    gpus_per_node: int
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    path: str = field(default_factory=lambda: os.environ.get("PATH", ""))  # a test may empty PATH for aidai

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": self.path}

    def run(self, *args: str, timeout: float = 30, check: bool = True) -> str:
        tool = shutil.which(args[0], path=self.path) or args[0]
        proc = subprocess.run([tool, *args[1:]], capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}\n{self.logs()}")
        return proc.stdout

    def submit(self, *args: str) -> str:
        """sbatch a `sleep` job (extra sbatch options in ARGS); its id."""
        out = self.run("sbatch", "--parsable", f"--chdir={self.root}", "--output=/dev/null", *args,
                       "--wrap", "sleep 600")
        return out.strip().split(";")[0]

    def job_state(self, job_id: str) -> tuple[str, str]:
        """(state, nodelist) as squeue says it."""
        out = self.run("squeue", "-h", "-j", job_id, "-o", "%T|%N", check=False).strip()
        state, _, nodes = out.partition("|")
        return state, nodes

    def wait_running(self, job_id: str, timeout: float = READY_S) -> str:
        """The job's nodelist once it runs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state, nodes = self.job_state(job_id)
            if state == "RUNNING":
                return nodes
            time.sleep(0.3)
        raise SlurmUnavailable(f"job {job_id} is not running after {timeout:.0f} s ({self.job_state(job_id)})\n"
                               f"{self.logs()}")

    def node_line(self, node: str) -> str:
        return self.run("scontrol", "show", "node", "-o", node).strip()

    def states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        return dict(line.split(None, 1) for line in out.splitlines() if line.strip())

    def reset(self) -> None:
        """Every job cancelled and every node back in service (between tests)."""
        self.cancel_all()
        for node in self.nodes:
            if "DRAIN" in self.node_line(node) or "DOWN" in self.node_line(node):
                self.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
        self.wait_idle()

    def cancel_all(self, timeout: float = 60) -> None:
        jobs = self.run("squeue", "-h", "-o", "%A", check=False).split()
        if jobs:
            self.run("scancel", *jobs, check=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.run("squeue", "-h", "-o", "%A", check=False).strip():
            time.sleep(0.3)

    def wait_idle(self, timeout: float = READY_S) -> None:
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.states()
            if len(states) == len(self.nodes) and all(s == "idle" for s in states.values()):
                return
            time.sleep(0.3)
        raise SlurmUnavailable(f"nodes not idle after {timeout:.0f} s: {states}\n{self.logs()}")

    def logs(self, lines: int = 30) -> str:
        parts = []
        for path in sorted(self.root.glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name} (last {len(tail)} lines)\n" + "\n".join(tail))
        return "\n".join(parts)

    def stop(self) -> None:
        """Jobs cancelled first (slurmstepd outlives slurmd), then slurmd, slurmctld and munged."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            with contextlib.suppress(OSError, subprocess.SubprocessError, RuntimeError):
                self.cancel_all(timeout=30)
        for name in [*(n for n in self.procs if n.startswith("slurmd")), "slurmctld", "munged"]:
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            stop(proc, grace_s=15)


def _missing() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def _wait(what: str, ready: object, cluster: SlurmCluster, timeout: float = READY_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, proc in cluster.procs.items():
            if proc.poll() is not None:
                cluster.stop()
                raise SlurmUnavailable(f"{name} exited ({proc.returncode}) before {what}\n{cluster.logs()}")
        if ready():  # type: ignore[operator]
            return
        time.sleep(0.2)
    cluster.stop()
    raise SlurmUnavailable(f"{what} not within {timeout:.0f} s\n{cluster.logs()}")


def _start(cluster: SlurmCluster, name: str, args: list[str]) -> None:
    out = open(cluster.root / f"{name}.out.log", "wb")  # noqa: SIM115 - lives as long as the daemon
    binary = shutil.which(args[0]) or f"/usr/sbin/{args[0]}"  # root's daemons, wherever PATH leaves /usr/sbin
    cluster.procs[name] = subprocess.Popen([binary, *args[1:]], stdout=out, stderr=subprocess.STDOUT, env=cluster.env,
                                           cwd=cluster.root)


def start_slurm(root: Path, nodes: int = 4, gpus_per_node: int = 4) -> SlurmCluster:
    if os.geteuid() != 0:
        raise SlurmUnavailable("the Slurm tests start slurmd, which must run as root; run them as root")
    missing = _missing()
    if missing:
        raise SlurmUnavailable(f"{', '.join(missing)} not installed: `make slurm` installs Debian's slurmctld, "
                               "slurmd, slurm-client and munge")
    root.mkdir(parents=True, exist_ok=True)
    names = [f"node{i}" for i in range(1, nodes + 1)]
    for sub in ("state", "gpu", *(f"spool/{n}" for n in names)):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for i in range(gpus_per_node):
        (root / "gpu" / f"nvidia{i}").touch()
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    sock = root / "munge.sock"
    conf = root / "slurm.conf"
    host = socket.gethostname().split(".")[0]  # slurmctld insists on running on the host SlurmctldHost names
    node_lines = [f"NodeName={n} NodeAddr=127.0.0.1 NodeHostName={host} Port={free_port()} CPUs=2 RealMemory=1000 "
                  f"Gres=gpu:{gpus_per_node} State=UNKNOWN" for n in names]
    conf.write_text("\n".join([
        "ClusterName=aidaitest", f"SlurmctldHost={host}(127.0.0.1)", f"SlurmctldPort={free_port()}",
        f"SlurmdPort={free_port()}", "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={sock}",
        "SlurmUser=root", "SlurmdUser=root", f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}/%n", f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd-%n.pid'}", f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd-%n.log'}", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobCompType=jobcomp/none", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "ReturnToService=2", "MpiDefault=none",
        # the config, not this machine's cores, says what a node has: four nodes share one small VM
        "SlurmdParameters=config_overrides", "GresTypes=gpu", "MailProg=/bin/true", "SlurmctldDebug=info",
        "SlurmdDebug=info", *node_lines,
        f"PartitionName=gpu Nodes=node[1-{nodes}] Default=YES MaxTime=INFINITE State=UP", ""]))
    (root / "gres.conf").write_text(f"AutoDetect=off\nName=gpu File={root / 'gpu'}/nvidia[0-{gpus_per_node - 1}]\n")
    cluster = SlurmCluster(root, conf, names, gpus_per_node)
    _start(cluster, "munged", ["munged", "--foreground", "--force", f"--key-file={key}", f"--socket={sock}",
                               f"--pid-file={root / 'munged.pid'}", f"--log-file={root / 'munged.log'}",
                               f"--seed-file={root / 'munged.seed'}"])
    _wait("munged's socket", sock.exists, cluster)
    _start(cluster, "slurmctld", ["slurmctld", "-D", "-f", str(conf)])
    _wait("slurmctld answering", lambda: "is UP" in cluster.run("scontrol", "ping", check=False), cluster)
    for name in names:
        _start(cluster, f"slurmd-{name}", ["slurmd", "-D", "-N", name, "-f", str(conf)])
    _wait("every node idle", lambda: set(cluster.states().values()) == {"idle"}
          and len(cluster.states()) == nodes, cluster)
    return cluster
