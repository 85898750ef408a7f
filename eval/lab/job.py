"""One lab job, run as PID 1 of its own network, mount and PID namespaces (eval/lab/run.py starts it with
`unshare --net --mount --pid --fork --kill-child`): when it exits, the kernel kills every process left in the job.

Nodes: every node is a real launcher process in its own UTS namespace (its own hostname) with its own loopback
address 127.0.X.Y on the job's `lo`; the job's /etc/hosts (bind-mounted in this mount namespace only) resolves the
hostnames, so gloo, the rendezvous and every error name real per-node hosts and addresses. Each node's stdout and
stderr is its log file; the combined output holds every node's lines as they arrived, each behind `host: ` as pdsh
prints them (the lab plays pdsh's part: the lines are the software's own). Faults from outside the training program
(SIGKILL of a node's process group, iptables DROP of a node's address, a squatter on the rendezvous port, a full
tmpfs, a wrong GLOO_SOCKET_IFNAME) are applied here; the time each was applied goes to the truth file.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil

from eval.lab import telemetry

ROOT = Path(__file__).resolve().parent.parent.parent
TRAIN = Path(__file__).resolve().parent / "train.py"
RDZV_PORT = 29400
STOP_GRACE_S = 5.0
QUIET_S = 20.0  # a job that trained or lost a node and then logs nothing this long: the operator stops it as hung


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, timeout=20, capture_output=True)


class Job:
    def __init__(self, spec: dict, out: Path) -> None:
        self.spec, self.out = spec, out
        self.nodes: list[dict] = spec["nodes"]
        self.lock = threading.Lock()
        (out / "logs").mkdir(parents=True, exist_ok=True)
        self.combined = open(out / "combined.out", "wb")  # noqa: SIM115 - closed in run()
        self.files = {n["host"]: open(out / "logs" / f"{n['host']}.log", "wb") for n in self.nodes}  # noqa: SIM115
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.steps_seen = 0
        self.last_line = time.time()
        self.first_step: float | None = None
        self.last_step: float | None = None
        self.events: list[dict] = []
        # telemetry jobs (issue 36): every node in cgroups of its own, sampled for the whole job
        self.groups: dict[str, dict[str, Path]] = {}
        if spec.get("telemetry"):
            self.groups = {n["host"]: telemetry.make_groups(tag) for n, tag in zip(self.nodes, spec["cgroups"],
                                                                                   strict=True)}
        self.sampler: telemetry.Sampler | None = None

    def note(self, what: str, **extra: object) -> None:
        self.events.append({"time": time.time(), "what": what, **extra})

    def network(self) -> None:
        _sh("ip", "link", "set", "lo", "up")
        hosts = ["127.0.0.1 localhost"]
        for n in self.nodes:
            _sh("ip", "addr", "add", f"{n['addr']}/32", "dev", "lo")
            hosts.append(f"{n['addr']} {n['host']}")
        (self.out / "hostfile").write_text("".join(f"{n['host']} slots={self.spec['nproc']}\n" for n in self.nodes))
        etc = self.out / "hosts"
        etc.write_text("\n".join(hosts) + "\n")
        _sh("mount", "--bind", str(etc), "/etc/hosts")

    def data(self) -> None:
        """Per-rank data shards, and each node's checkpoint directory (a 64 KiB tmpfs on a node with a full disk)."""
        rng = np.random.default_rng(self.spec["seed"])
        cfg, fault = self.spec["config"], self.spec["fault"]
        data = Path(cfg["data"])
        data.mkdir(parents=True, exist_ok=True)
        shards = (cfg["steps"] + 9) // 10
        for rank in range(len(self.nodes) * self.spec["nproc"]):
            for index in range(shards):
                np.save(data / f"shard-{rank:03d}-{index:02d}.npy", rng.normal(size=(160, 33)).astype(np.float32))
        for i, n in enumerate(self.nodes):
            ckpt = Path(cfg["ckpt"]) / n["host"]
            ckpt.mkdir(parents=True, exist_ok=True)
            if fault["kind"] == "disk_full" and i == fault["node"]:
                _sh("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(ckpt))
                self.note("64 KiB tmpfs on the checkpoint directory")

    def launch(self) -> None:
        fault = self.spec["fault"]
        head = self.nodes[0]["host"]
        if fault["kind"] == "port_taken":
            # another program already listens on the rendezvous port of the head node and never answers
            squatter = socket.socket()
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            squatter.bind((self.nodes[0]["addr"], RDZV_PORT))
            squatter.listen(64)
            self.squatter = squatter
            self.note("rendezvous port taken", port=RDZV_PORT)
        for i, n in enumerate(self.nodes):
            env = {k: v for k, v in os.environ.items() if not k.startswith(("LAB_", "GLOO_", "MASTER_"))}
            env.update(LAB_CONFIG=json.dumps(self.spec["config"]), LAB_MARK=str(self.out / "marks.jsonl"),
                       PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
                       LAB_LAUNCHER=self.spec["launcher"])
            if i == fault["node"] and fault["kind"] in TRAIN_FAULTS:
                env["LAB_FAULT"] = json.dumps(fault)
                if fault["kind"] == "oom_cgroup":
                    env["LAB_MEMCG"] = self.spec["memcg"]
            if i == fault["node"] and fault["kind"] == "ifname":
                env["GLOO_SOCKET_IFNAME"] = fault["ifname"]
                self.note("GLOO_SOCKET_IFNAME set", value=fault["ifname"])
            argv = self.command(i, head)
            join = telemetry.join_script(self.groups[n["host"]]) if self.groups else ""
            script = f"{join}hostname {n['host']} && exec \"$@\""
            proc = subprocess.Popen(["unshare", "--uts", "--", "sh", "-c", script, "node", *argv],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True, cwd=self.out)
            self.procs[n["host"]] = proc
            threading.Thread(target=self.pump, args=(n["host"], proc), daemon=True).start()
            time.sleep(self.spec.get("stagger", 0.0))

    def command(self, i: int, head: str) -> list[str]:
        """Node i's launcher command line, as a user starts it on each node (a shell on every host, or pdsh)."""
        n_nodes, nproc, launcher = len(self.nodes), self.spec["nproc"], self.spec["launcher"]
        extra = self.spec["launcher_args"]
        if launcher == "accelerate":
            # `accelerate launch` on every machine: its multi-GPU path runs torch.distributed.run in-process with a
            # static rendezvous at the main process's address (gloo on CPU: Accelerate picks it without CUDA)
            return [str(Path(sys.executable).parent / "accelerate"), "launch", "--multi_gpu",
                    f"--num_machines={n_nodes}", f"--machine_rank={i}", f"--num_processes={n_nodes * nproc}",
                    f"--main_process_ip={head}", f"--main_process_port={RDZV_PORT}", "--max_restarts=0",
                    "--mixed_precision=no", "--dynamo_backend=no", *extra, str(TRAIN)]
        if launcher == "deepspeed":
            # DeepSpeed's runner with the user's hostfile, one launcher per node (--no_ssh: what the pdsh runner
            # would start on each host over ssh); deepspeed.launcher.launch then spawns the node's ranks
            return [str(Path(sys.executable).parent / "deepspeed"), f"--hostfile={self.out / 'hostfile'}",
                    "--no_ssh", f"--node_rank={i}", f"--master_addr={head}", f"--master_port={RDZV_PORT}",
                    f"--num_nodes={n_nodes}", f"--num_gpus={nproc}", *extra, str(TRAIN)]
        return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={n_nodes}",
                f"--nproc-per-node={nproc}", "--rdzv-backend=c10d", f"--rdzv-endpoint={head}:{RDZV_PORT}",
                f"--rdzv-id=job{self.spec['seed']}", "--max-restarts=0", *extra, str(TRAIN)]

    def pump(self, host: str, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        prefix = f"{host}: ".encode()
        for line in iter(proc.stdout.readline, b""):
            with self.lock:
                self.files[host].write(line)
                self.files[host].flush()
                self.combined.write(prefix + line)
                self.combined.flush()
                self.last_line = time.time()
                if b"step " in line and b"| loss" in line:
                    self.steps_seen += 1
                    self.first_step = self.first_step or self.last_line
                    self.last_step = self.last_line

    def external_fault(self) -> None:
        """SIGKILL, partition or packet loss on the faulty node once the job has logged `after_steps` step lines."""
        fault = self.spec["fault"]
        if fault["kind"] not in ("sigkill", "partition", "packet_loss", "straggler") or self.spec.get("telemetry"):
            return  # a telemetry job's anomalies are applied by anomaly()
        while self.steps_seen < fault["after_steps"]:
            if all(p.poll() is not None for p in self.procs.values()):
                return
            time.sleep(0.1)
        node = self.nodes[fault["node"]]
        if fault["kind"] == "sigkill":
            # the launcher and every worker (torchrun starts its workers in sessions of their own): the host died
            top = psutil.Process(self.procs[node["host"]].pid)
            for proc in [top, *top.children(recursive=True)]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()
            self.note("SIGKILL to the node's process group", host=node["host"])
        elif fault["kind"] == "straggler":
            # a CPU quota on the node's processes (as a co-tenant or a throttled container would leave it): its ranks
            # crawl, and the peers wait on them in every all-reduce
            group = Path(self.spec["cpucg"])
            (group / "cpu.cfs_period_us").write_text("1000000")
            (group / "cpu.cfs_quota_us").write_text(str(fault["quota_us"]))
            top = psutil.Process(self.procs[node["host"]].pid)
            for proc in [top, *top.children(recursive=True)]:
                with contextlib.suppress(OSError):
                    (group / "cgroup.procs").write_text(str(proc.pid))
            self.note(f"CPU quota {fault['quota_us']} us per second", host=node["host"])
        else:
            extra = ["-m", "statistic", "--mode", "random", "--probability", str(fault.get("loss", 1.0))] \
                if fault["kind"] == "packet_loss" else []
            for chain, side in (("INPUT", "-s"), ("OUTPUT", "-s"), ("INPUT", "-d")):
                _sh("iptables", "-A", chain, side, node["addr"], *extra, "-j", "DROP")
            self.note(f"iptables DROP {node['addr']}" + (f" p={fault['loss']}" if extra else ""), host=node["host"])

    def anomaly(self) -> None:
        """A telemetry anomaly (eval/lab/telemetry.py) on the faulty node for its duration, once the job has
        logged `after_steps` step lines; its start and end go to the truth."""
        fault = self.spec["fault"]
        if fault["kind"] not in telemetry.KINDS:
            return
        while self.steps_seen < fault["after_steps"]:
            if all(p.poll() is not None for p in self.procs.values()):
                return
            time.sleep(0.1)
        node = self.nodes[fault["node"]]
        act = telemetry.Anomaly(fault["kind"], node["host"], node["addr"], self.groups[node["host"]], self.out)
        what = act.start()
        self.note(f"anomaly start: {what}", host=node["host"], anomaly=fault["kind"])
        end = time.time() + fault["duration_s"]
        while time.time() < end and any(p.poll() is None for p in self.procs.values()):
            time.sleep(0.1)
        done = act.stop()
        self.note("anomaly end", host=node["host"], anomaly=fault["kind"], **({"done": done} if done else {}))

    def run(self) -> dict:
        started = time.time()
        self.network()
        if self.groups:
            self.sampler = telemetry.Sampler(self.groups, self.out / "telemetry.csv")
            self.sampler.start()
        self.data()
        self.launch()
        watcher = threading.Thread(target=self.external_fault, daemon=True)
        watcher.start()
        if self.groups:
            threading.Thread(target=self.anomaly, daemon=True).start()
        deadline = started + self.spec["deadline_s"]
        while time.time() < deadline and any(p.poll() is None for p in self.procs.values()):
            ended = any(p.poll() is not None for p in self.procs.values())
            if (ended or self.steps_seen) and time.time() - self.last_line > QUIET_S:
                break
            time.sleep(0.2)
        timed_out = [h for h, p in self.procs.items() if p.poll() is None]
        if timed_out:
            self.note("job deadline or quiet after a node ended: the lab stops the nodes still running",
                      hosts=timed_out)
        if self.spec.get("cpucg"):  # a throttled process needs CPU time to exit at all
            with contextlib.suppress(OSError):
                (Path(self.spec["cpucg"]) / "cpu.cfs_quota_us").write_text("-1")
        for host in timed_out:  # as an operator ends a hung job: SIGTERM, then SIGKILL
            os.killpg(self.procs[host].pid, signal.SIGTERM)
        end = time.time() + STOP_GRACE_S
        while time.time() < end and any(p.poll() is None for p in self.procs.values()):
            time.sleep(0.2)
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):  # PID 1's exit kills what is left
                    p.wait(timeout=10)
        time.sleep(0.5)  # the pumps drain the pipes
        collector: dict = {}
        if self.sampler is not None:
            self.sampler.stop()
            collector = {"rows": self.sampler.rows, "wall_s": round(self.sampler.wall_s, 2),
                         "job_process_cpu_s": round(self.sampler.cpu_s, 2), "interval_s": self.sampler.interval}
        with self.lock:
            self.combined.close()
            for fh in self.files.values():
                fh.close()
        return {"started": started, "ended": time.time(), "timed_out": timed_out, "events": self.events,
                "exit": {h: p.returncode for h, p in self.procs.items()}, "first_step": self.first_step,
                "last_step": self.last_step, "collector": collector}


TRAIN_FAULTS = ("exception", "exit", "hang", "nan", "oom_rlimit", "oom_cgroup", "missing_shard", "disk_full",
                "code_skew")


def main() -> int:
    spec_path = Path(sys.argv[1])
    spec = json.loads(spec_path.read_text())
    outcome = Job(spec, spec_path.parent).run()
    (spec_path.parent / "outcome.json").write_text(json.dumps(outcome, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
