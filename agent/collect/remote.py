"""`aidai collect --host SPEC`: the standalone collector run on each host through its executor (local, SSH, Slurm,
simulated), with the params aidai's own checks would get there (the expectations from the host's inventory), so
the bundle holds every command the replay will ask for. Redaction happens on the host, before the bundle leaves it."""

from __future__ import annotations

import base64
import binascii
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agent.checks.manifest import LIB_SCRIPTS
from agent.checks.runner import CheckRunner
from agent.collect.package import build_script
from agent.executors.base import Executor
from agent.paths import SCRIPTS_DIR


@dataclass
class Collected:
    host: str
    data: bytes = b""
    error: str = ""
    seconds: float = 0.0


def collect_hosts(executors: list[Executor], redact: bool = True, timeout_s: float = 120.0) -> list[Collected]:
    """One bundle per host; a host that cannot be collected says why (its bytes empty)."""
    folder = Path(tempfile.mkdtemp(prefix="aidai-collector-"))
    try:
        script = build_script(folder / "aidai_collect.py")
        for lib in LIB_SCRIPTS:  # the SSH executor uploads the helpers beside any script it runs
            shutil.copy(SCRIPTS_DIR / lib, folder / lib)
        runner = CheckRunner(executors)
        runner.take_inventory()
        out = []
        for name, executor in runner.executors.items():
            params = {"encoding": "base64", "redact": redact, "timeout_s": timeout_s, "host": name,
                      "check_params": {c: runner._params(name) for c in runner.passive_ids()}}
            run = executor.run_script(script, params, timeout_s + 60)
            if run.error or run.rc != 0:
                out.append(Collected(name, error=run.error or f"the collector exited {run.rc}: "
                                                              f"{run.stderr.strip()[-500:]}", seconds=run.duration_s))
                continue
            try:
                out.append(Collected(name, base64.b64decode(run.stdout.strip(), validate=True), seconds=run.duration_s))
            except (binascii.Error, ValueError):
                out.append(Collected(name, error="the collector's answer is not a bundle (not base64)",
                                     seconds=run.duration_s))
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)
