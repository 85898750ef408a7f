"""What every executor does: run one verification script on one host, with params and a timeout."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class ScriptRun:
    """Raw outcome of one script run; `error` says why there is no usable output (timeout, unreachable)."""

    stdout: str = ""
    stderr: str = ""
    rc: int | None = None
    duration_s: float = 0.0
    error: str = ""


class Executor(ABC):
    """Runs verification scripts on one host. Executors never decide anything about the results."""

    #: how the host is named in results (the spec the user gave, or the simulated host's name)
    name: str

    @abstractmethod
    def run_script(self, script: Path, params: dict[str, Any], timeout: float) -> ScriptRun:
        """Run `script` (shipped with the checklib modules) with params JSON on stdin; never raises for host errors."""

    def close(self) -> None:  # noqa: B027 - optional hook; most executors hold nothing open
        """Release connections and remote temp files."""
