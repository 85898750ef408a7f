"""One host as recorded (an aidai host bundle or an NVIDIA bug report): what the checks replay."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.paths import load_script


@dataclass
class HostRecording:
    """One host as recorded: what its checks ran and read, and when."""

    hostname: str
    collected_at: float
    source: str  # "aidai bundle" or "nvidia-bug-report"
    runs: list[dict[str, Any]] = field(default_factory=list)  # {run: argv, rc, stdout, stderr, missing, timed_out}
    files: dict[str, str | None] = field(default_factory=dict)
    exists: dict[str, bool] = field(default_factory=dict)
    listdir: dict[str, list[str]] = field(default_factory=dict)
    which: dict[str, str | None] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    euid: int | None = None
    results: dict[str, Any] = field(default_factory=dict)  # what the checks said on the host itself
    manifest: dict[str, Any] = field(default_factory=dict)

    def replay(self) -> dict[str, Any]:
        """The file checklib_record.Replay reads: commands keyed as the checks look them up."""
        key = load_script("checklib_record").key
        runs: dict[str, Any] = {}
        for entry in self.runs:
            runs.setdefault(key(entry["run"]), entry)
        return {"runs": runs, "files": self.files, "exists": self.exists, "listdir": self.listdir,
                "which": self.which, "euid": self.euid, "collected_at": self.collected_at}
