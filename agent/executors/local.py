"""Run scripts on this machine as subprocesses; also the engine of simulated hosts."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agent.executors.base import Executor, ScriptRun


class LocalExecutor(Executor):
    def __init__(self, name: str = "local", env: dict[str, str] | None = None, python: list[str] | None = None):
        self.name = name
        self._env = env
        self._python = python or [shutil.which("python3") or sys.executable]

    def run_script(self, script: Path, params: dict[str, Any], timeout: float) -> ScriptRun:
        env = dict(os.environ) if self._env is None else {**_base_env(), **self._env}
        start = time.monotonic()
        # own session, so a timeout kills the script and every tool it started
        proc = subprocess.Popen([*self._python, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=script.parent, env=env, start_new_session=True)
        try:
            out, err = proc.communicate(json.dumps(params).encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = proc.communicate()
            return ScriptRun(out.decode(errors="replace"), err.decode(errors="replace"), None,
                             time.monotonic() - start, f"timed out after {timeout:.0f} s")
        return ScriptRun(out.decode(errors="replace"), err.decode(errors="replace"), proc.returncode,
                         time.monotonic() - start)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _base_env() -> dict[str, str]:
    keep = ("HOME", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME", "TMPDIR")
    return {k: os.environ[k] for k in keep if k in os.environ}
