"""Stopping the real servers the tests start: ask politely, then kill, and always reap the child."""

from __future__ import annotations

import subprocess


def stop(proc: subprocess.Popen, grace_s: float = 15) -> None:
    """SIGTERM, wait up to `grace_s` for it to exit, else SIGKILL; returns once the process is gone."""
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)
