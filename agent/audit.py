"""The audit log of a run: append-only JSONL next to its checkpoint (`<runs_dir>/<run_id>.audit.jsonl`).

One line per record (agent/audit_records.py: one typed record per kind), each with a UTC timestamp, the run id and a
sequence number: the run's options (model, prompt version, limits), who approved or refused which active/intrusive
check and how, every check executed (check id, host, tier, verdict, exit code, output hash, commands), every LLM call
(task, model, prompt version, prompt hash, tokens), a limit that stopped the run, and the conclusion. A line is
written with a single O_APPEND write and fsynced before the call returns, so a crash leaves at most one torn last
line, which `read` reports and skips.
"""

from __future__ import annotations

import getpass
import json
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.audit_records import Record

Answer = Callable[[dict[str, Any]], Any]


class AuditError(ValueError):
    """An audit log that cannot be read (missing run, not JSONL); the message says which file."""


def audit_path(runs_dir: Path, run_id: str) -> Path:
    if not run_id or "/" in run_id or "\\" in run_id or run_id.startswith("."):
        raise AuditError(f"invalid run id {run_id!r}")
    return runs_dir / f"{run_id}.audit.jsonl"


def local_user() -> str:
    """The OS user running this process: who approves at a CLI prompt or with --approve-active."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        return f"uid:{os.getuid()}"


class AuditLog:
    """Appends events to one run's log; safe to share between threads."""

    def __init__(self, path: Path, run_id: str):
        self.path = path
        self.run_id = run_id
        self._lock = threading.Lock()
        self._seq: int | None = None

    def _next_seq(self) -> int:
        if self._seq is None:  # continue the numbering of a resumed run
            self._seq = len(read(self.path)[0]) if self.path.exists() else 0
        self._seq += 1
        return self._seq

    def append(self, record: Record) -> None:
        with self._lock:
            fields = {"ts": datetime.now(UTC).isoformat(timespec="milliseconds"), "run_id": self.run_id,
                      "seq": self._next_seq(), **record.line()}
            line = (json.dumps(fields, default=str, ensure_ascii=False) + "\n").encode("utf-8")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":  # a torn line from a crash: end it, keep ours whole
                    line = b"\n" + line
                written = os.write(fd, line)
                while written < len(line):  # a short write (full disk, signal): finish the line, never leave half
                    written += os.write(fd, line[written:])
                os.fsync(fd)
            finally:
                os.close(fd)

    __call__ = append


def read(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """(events, problems): a line that is not a JSON object (a torn last line after a crash) is a problem, not
    an exception, so everything before it stays readable."""
    if not path.is_file():
        raise AuditError(f"no audit log at {path}")
    events: list[dict[str, Any]] = []
    problems: list[str] = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                event = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                problems.append(f"line {number}: not JSON ({exc.__class__.__name__}); skipped")
                continue
            if not isinstance(event, dict):
                problems.append(f"line {number}: not a JSON object; skipped")
                continue
            events.append(event)
    return events, problems


def approval_decision(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer to an approval request ({check: bool, ..., approved_by}) as it is recorded: which checks were
    approved, which declined, and the decision as a whole (approved, declined, or partly approved)."""
    checks = {str(k): v for k, v in answer.items() if k != "approved_by"}
    approved = sorted(c for c, yes in checks.items() if yes is True)
    declined = sorted(c for c, yes in checks.items() if yes is not True)
    decision = "approved" if approved and not declined else "declined" if not approved else "partly approved"
    return {"decision": decision, "approved": approved, "declined": declined,
            "by": str(answer.get("approved_by") or "")}


def signed(answer: Answer, user: str) -> Answer:
    """Wrap an interrupt-answering callback so that approval answers say who gave them (unless they already do)."""

    def wrapped(payload: dict[str, Any]) -> Any:
        got = answer(payload)
        if payload.get("kind") == "approval" and isinstance(got, dict) and "approved_by" not in got:
            return {**got, "approved_by": user}
        return got

    return wrapped
