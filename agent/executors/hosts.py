"""Host specs as users type them: `local`, `ssh://user@host[:port][?key=..&known_hosts=..&env=..]`, `sim:DIR`,
`slurm:JOBID[?user=..&port=..&key=..&known_hosts=..&env=..]` (each node of a Slurm job, over SSH), `bundle:FILE` (a
host recorded by aidai_collect.py, or an NVIDIA bug report)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import parse_qs, urlsplit

from agent.executors.base import Executor
from agent.executors.local import LocalExecutor
from agent.executors.sim import sim_executors

if TYPE_CHECKING:
    from agent.executors.ssh import SshTarget

SPEC_HELP = "local | ssh://user@host[:port] | slurm:JOBID | sim:DIR | bundle:FILE"
SSH_QUERY = ("key", "known_hosts", "env")
SLURM_QUERY = ("user", "port", *SSH_QUERY)


class HostSpecError(ValueError):
    pass


@dataclass(frozen=True)
class HostSpec:
    """A host spec as typed, in parts: `target` is the host of an ssh:// spec, a Slurm job's id, a sim scenario's
    directory or a recording's file; `user` the login an ssh:// spec or a Slurm spec's `?user=` names."""

    text: str
    kind: Literal["local", "ssh", "slurm", "sim", "bundle"]
    target: str
    user: str | None = None
    query: str = ""


def parse_spec(spec: str) -> HostSpec:
    """The one reader of host specs (executors, redaction, pre-triage name hosts from it)."""
    if spec == "local":
        return HostSpec(spec, "local", "local")
    if spec.startswith("ssh://"):
        parts = urlsplit(spec)
        return HostSpec(spec, "ssh", parts.hostname or "", parts.username, parts.query)
    if spec.startswith("slurm:"):
        job_id, _, query = spec.removeprefix("slurm:").partition("?")
        user = parse_qs(query).get("user")
        return HostSpec(spec, "slurm", job_id, user[-1] if user else None, query)
    if spec.startswith("sim:"):
        return HostSpec(spec, "sim", spec.removeprefix("sim:"))
    if spec.startswith("bundle:"):
        return HostSpec(spec, "bundle", spec.removeprefix("bundle:"))
    raise HostSpecError(f"unknown host spec {spec!r}; use {SPEC_HELP}")


@dataclass
class SshOptions:
    """Defaults for every ssh:// host and Slurm node; a spec's query parameters override them."""

    key_file: str | None = None
    known_hosts: str | None = None
    trust_new_host_keys: bool = False
    remote_env: str | None = None
    connect_timeout: float = 10.0
    user: str | None = None  # when the spec names none (a Slurm job's nodes); None: the local user
    port: int = 22  # for a Slurm job's nodes (an ssh:// spec names its own)


def parse_ssh(spec: str, options: SshOptions | None = None) -> SshTarget:
    from agent.executors.ssh import SshTarget  # paramiko: imported only for ssh:// hosts

    options = options or SshOptions()
    parsed = parse_spec(spec) if spec.startswith("ssh://") else None
    if parsed is None or not parsed.target:
        raise HostSpecError(f"bad ssh host {spec!r}; expected ssh://user@host[:port]")
    query = _query(spec, parsed.query, SSH_QUERY)
    try:
        port = urlsplit(spec).port or 22
    except ValueError:
        raise HostSpecError(f"{spec}: bad port") from None
    return SshTarget(user=parsed.user or options.user, host=parsed.target, port=port,
                     key_file=query.get("key", options.key_file),
                     known_hosts=query.get("known_hosts", options.known_hosts),
                     trust_new_host_keys=options.trust_new_host_keys,
                     remote_env=query.get("env", options.remote_env),
                     connect_timeout=options.connect_timeout)


def _query(spec: str, query: str, valid: tuple[str, ...]) -> dict[str, str]:
    found = {k: v[-1] for k, v in parse_qs(query).items()}
    unknown = set(found) - set(valid)
    if unknown:
        raise HostSpecError(f"{spec}: unknown option(s) {', '.join(sorted(unknown))}; valid: {', '.join(valid)}")
    return found


def slurm_executors(spec: str, options: SshOptions | None = None) -> list[Executor]:
    """One SSH executor per node of the job (`scontrol`): NodeAddr is where it connects, the Slurm node name is
    how the host is named; the job (nodes, GPU indices) rides along as `executor.slurm_job`."""
    from agent.executors.ssh import SshExecutor, SshTarget
    from agent.slurm.jobs import resolve_job
    from agent.slurm.scontrol import SlurmError

    options = options or SshOptions()
    parsed = parse_spec(spec)
    job_id, query = parsed.target, _query(spec, parsed.query, SLURM_QUERY)
    port = query.get("port", str(options.port))
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise HostSpecError(f"{spec}: bad port {port!r}")
    try:
        job = resolve_job(job_id)
    except SlurmError as exc:
        raise HostSpecError(f"{spec}: {exc}") from None
    executors: list[Executor] = []
    for node in job.nodes:
        executor = SshExecutor(SshTarget(user=query.get("user", options.user), host=node.address, port=int(port),
                                         key_file=query.get("key", options.key_file),
                                         known_hosts=query.get("known_hosts", options.known_hosts),
                                         trust_new_host_keys=options.trust_new_host_keys,
                                         remote_env=query.get("env", options.remote_env),
                                         connect_timeout=options.connect_timeout))
        executor.name = node.node
        executor.slurm_job = job
        executors.append(executor)
    return executors


def recorded_executor(path: Path) -> Executor:
    """A host recorded by aidai_collect.py, or an NVIDIA bug report: the checks replay what it recorded."""
    from agent.collect.bundle import BundleError
    from agent.executors.recorded import RecordedExecutor

    try:
        return RecordedExecutor(path)
    except BundleError as exc:
        raise HostSpecError(str(exc)) from None


def executors_for(specs: list[str], ssh: SshOptions | None = None) -> list[Executor]:
    """Executors for every spec; a sim scenario with several hosts gives one executor per host."""
    executors: list[Executor] = []
    for spec in map(parse_spec, specs or ["local"]):
        if spec.kind == "local":
            executors.append(LocalExecutor())
        elif spec.kind == "ssh":
            from agent.executors.ssh import SshExecutor

            executors.append(SshExecutor(parse_ssh(spec.text, ssh)))
        elif spec.kind == "slurm":
            executors.extend(slurm_executors(spec.text, ssh))
        elif spec.kind == "sim":
            try:
                executors.extend(sim_executors(Path(spec.target)))
            except FileNotFoundError as exc:
                raise HostSpecError(str(exc)) from None
        else:
            executors.append(recorded_executor(Path(spec.target)))
    names = [e.name for e in executors]
    if len(set(names)) != len(names):
        raise HostSpecError(f"the same host is named twice: {names}")
    return executors
