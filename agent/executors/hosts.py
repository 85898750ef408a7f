"""Host specs as users type them: `local`, `ssh://user@host[:port][?key=..&known_hosts=..&env=..]`, `sim:DIR`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from agent.executors.base import Executor
from agent.executors.local import LocalExecutor
from agent.executors.sim import sim_executors

if TYPE_CHECKING:
    from agent.executors.ssh import SshTarget

SPEC_HELP = "local | ssh://user@host[:port] | sim:DIR"


class HostSpecError(ValueError):
    pass


@dataclass
class SshOptions:
    """Defaults for every ssh:// host; a spec's query parameters override them."""

    key_file: str | None = None
    known_hosts: str | None = None
    trust_new_host_keys: bool = False
    remote_env: str | None = None
    connect_timeout: float = 10.0


def parse_ssh(spec: str, options: SshOptions | None = None) -> SshTarget:
    from agent.executors.ssh import SshTarget  # paramiko: imported only for ssh:// hosts

    options = options or SshOptions()
    parts = urlsplit(spec)
    if parts.scheme != "ssh" or not parts.hostname:
        raise HostSpecError(f"bad ssh host {spec!r}; expected ssh://user@host[:port]")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    unknown = set(query) - {"key", "known_hosts", "env"}
    if unknown:
        raise HostSpecError(f"{spec}: unknown option(s) {', '.join(sorted(unknown))}; valid: key, known_hosts, env")
    try:
        port = parts.port or 22
    except ValueError:
        raise HostSpecError(f"{spec}: bad port") from None
    return SshTarget(user=parts.username, host=parts.hostname, port=port,
                     key_file=query.get("key", options.key_file),
                     known_hosts=query.get("known_hosts", options.known_hosts),
                     trust_new_host_keys=options.trust_new_host_keys,
                     remote_env=query.get("env", options.remote_env),
                     connect_timeout=options.connect_timeout)


def executors_for(specs: list[str], ssh: SshOptions | None = None) -> list[Executor]:
    """Executors for every spec; a sim scenario with several hosts gives one executor per host."""
    executors: list[Executor] = []
    for spec in specs or ["local"]:
        if spec == "local":
            executors.append(LocalExecutor())
        elif spec.startswith("ssh://"):
            from agent.executors.ssh import SshExecutor

            executors.append(SshExecutor(parse_ssh(spec, ssh)))
        elif spec.startswith("sim:"):
            try:
                executors.extend(sim_executors(Path(spec[4:])))
            except FileNotFoundError as exc:
                raise HostSpecError(str(exc)) from None
        else:
            raise HostSpecError(f"unknown host spec {spec!r}; use {SPEC_HELP}")
    names = [e.name for e in executors]
    if len(set(names)) != len(names):
        raise HostSpecError(f"the same host is named twice: {names}")
    return executors
