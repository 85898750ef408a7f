"""Preflight: collect every host's environment, sign it, and check it against the known-bad combinations."""

from __future__ import annotations

import time

from pydantic import BaseModel, Field

from agent.checks.runner import CheckRunner
from agent.executors.base import Executor
from agent.executors.hosts import SshOptions, executors_for
from agent.preflight import collect, rules, signature


class PreflightReport(BaseModel):
    hosts: list[collect.HostEnv]
    signatures: list[signature.Signature]
    findings: list[rules.RuleFinding]
    unavailable: dict[str, dict[str, str]] = Field(default_factory=dict)  # host -> check -> reason
    duration_s: float = 0.0

    @property
    def clean(self) -> bool:
        return not self.findings


def run(specs: list[str] | None = None, executors: list[Executor] | None = None, salt: bytes | None = None,
        timeout_cap_s: float = collect.TIMEOUT_CAP_S, ssh: SshOptions | None = None,
        runner: CheckRunner | None = None) -> PreflightReport:
    began = time.perf_counter()
    if runner is not None:
        executors = list(runner.executors.values())
    owned = executors is None
    executors = executors if executors is not None else executors_for(specs or ["local"], ssh)
    try:
        envs = collect.collect(executors, timeout_cap_s, runner=runner)
    finally:
        if owned:
            for executor in executors:
                executor.close()
    salt = salt if salt is not None else signature.load_salt()
    return PreflightReport(hosts=envs, signatures=[signature.sign(e, salt) for e in envs],
                           findings=rules.check_all(envs),
                           unavailable={e.host: e.unavailable for e in envs if e.unavailable},
                           duration_s=round(time.perf_counter() - began, 3))
