"""Run metadata and every event of every run, in one sqlite file next to the LangGraph checkpoints.

The store is the source of truth for the event stream: a client that connects late (or reconnects with
Last-Event-ID) replays from here, then waits for the next append. Writes are serialized by one lock; the
file is in WAL mode so a reader never blocks a worker.
"""

from __future__ import annotations

import builtins
import json
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ACTIVE = ("queued", "running")  # a worker owns it (or will): resumed after a restart
TERMINAL = ("done", "failed")

SCHEMA = """
PRAGMA journal_mode=WAL;
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, created REAL NOT NULL, updated REAL NOT NULL, status TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '', hosts TEXT NOT NULL, created_by TEXT NOT NULL,
    options TEXT NOT NULL, incident TEXT NOT NULL,
    pending TEXT, answer TEXT, error TEXT, report TEXT
);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, ts REAL NOT NULL, type TEXT NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
"""


class RunConflict(RuntimeError):
    """The run is not in the state the request needs (e.g. answering a run that waits for nothing)."""


def _dumps(value: Any) -> str:
    return json.dumps(value, default=str)


class RunStore:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, check_same_thread=False, timeout=30, isolation_level=None)
        self._conn.row_factory = sqlite3.Row
        self._conn.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # ---- runs ---------------------------------------------------------------------------------------------
    def create(self, run_id: str, *, title: str, hosts: list[str], created_by: str, options: dict[str, Any],
               incident: dict[str, Any]) -> None:
        now = time.time()
        with self._lock:
            self._conn.execute(
                "INSERT INTO runs (id, created, updated, status, title, hosts, created_by, options, incident) "
                "VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?)",
                (run_id, now, now, title, _dumps(hosts), created_by, _dumps(options), _dumps(incident)))

    def get(self, run_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return _run(row) if row else None

    def list(self, limit: int = 100, status: str | None = None) -> list[dict[str, Any]]:
        query = "SELECT * FROM runs" + (" WHERE status = ?" if status else "") + " ORDER BY created DESC LIMIT ?"
        with self._lock:
            rows = self._conn.execute(query, ((status,) if status else ()) + (limit,)).fetchall()
        return [_run(row) for row in rows]

    def unfinished(self) -> builtins.list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute(f"SELECT * FROM runs WHERE status IN {ACTIVE} ORDER BY created").fetchall()
        return [_run(row) for row in rows]

    def counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Runs by status, and the waiting ones by what they wait for (approval, feedback)."""
        with self._lock:
            statuses = self._conn.execute("SELECT status, COUNT(*) FROM runs GROUP BY status").fetchall()
            waiting = self._conn.execute("SELECT json_extract(pending, '$.kind'), COUNT(*) FROM runs "
                                         "WHERE status = 'waiting' GROUP BY 1").fetchall()
        return {row[0]: int(row[1]) for row in statuses}, {str(row[0]): int(row[1]) for row in waiting}

    def update(self, run_id: str, **fields: Any) -> None:
        """Set columns (dicts are stored as JSON); `updated` is always refreshed."""
        fields["updated"] = time.time()
        columns = ", ".join(f"{name} = ?" for name in fields)
        values = [_dumps(v) if isinstance(v, dict | list) else v for v in fields.values()]
        with self._lock:
            self._conn.execute(f"UPDATE runs SET {columns} WHERE id = ?", (*values, run_id))

    def take_answer(self, run_id: str, kind: str, answer: Any) -> dict[str, Any]:
        """waiting → queued with the answer saved, atomically: two answers to one question cannot both win, and
        an answer accepted before a crash is still there after it. Returns the pending payload answered."""
        with self._lock:
            # a write transaction from the read on: `aidai serve` and `aidai mcp` may share this file
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                row = self._conn.execute("SELECT status, pending FROM runs WHERE id = ?", (run_id,)).fetchone()
                if row is None:
                    raise KeyError(run_id)
                pending = json.loads(row["pending"]) if row["pending"] else None
                if row["status"] != "waiting" or not pending:
                    raise RunConflict(f"run {run_id} is {row['status']}: it waits for no answer")
                if pending.get("kind") != kind:
                    raise RunConflict(f"run {run_id} waits for {pending.get('kind')}, not {kind}")
                self._conn.execute("UPDATE runs SET status = 'queued', answer = ?, pending = NULL, updated = ? "
                                   "WHERE id = ?", (_dumps({"value": answer, "for": pending}), time.time(), run_id))
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
        return pending

    # ---- events -------------------------------------------------------------------------------------------
    def append(self, run_id: str, event: dict[str, Any]) -> int:
        with self._lock:
            return self._insert(run_id, event)

    def transition(self, run_id: str, event: Callable[[dict[str, Any]], dict[str, Any]], **fields: Any) -> int:
        """Set columns and append the event `event(run)` makes of the updated run, in one transaction: a stream that
        sees the new status (say done, and ends) has the event that says so too. Returns the event's seq."""
        fields["updated"] = time.time()
        columns = ", ".join(f"{name} = ?" for name in fields)
        values = [_dumps(v) if isinstance(v, dict | list) else v for v in fields.values()]
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute(f"UPDATE runs SET {columns} WHERE id = ?", (*values, run_id))
                row = self._conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
                if row is None:
                    raise KeyError(run_id)
                seq = self._insert(run_id, event(_run(row)))
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            return seq

    def _insert(self, run_id: str, event: dict[str, Any]) -> int:  # with the lock held
        ts = float(event.get("ts") or time.time())
        data = _dumps({**event, "ts": ts})
        cur = self._conn.execute(
            "INSERT INTO events (run_id, seq, ts, type, data) "
            "SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ? FROM events WHERE run_id = ? RETURNING seq",
            (run_id, ts, str(event.get("type", "")), data, run_id))
        return int(cur.fetchone()[0])

    def events(self, run_id: str, after: int = 0, limit: int = 500) -> builtins.list[tuple[int, dict[str, Any]]]:
        with self._lock:
            rows = self._conn.execute("SELECT seq, data FROM events WHERE run_id = ? AND seq > ? ORDER BY seq "
                                      "LIMIT ?", (run_id, after, limit)).fetchall()
        return [(int(row["seq"]), json.loads(row["data"])) for row in rows]

    def events_of(self, run_id: str, kind: str) -> builtins.list[dict[str, Any]]:
        """Every event of one type, in order (e.g. the answers a run was given)."""
        with self._lock:
            rows = self._conn.execute("SELECT data FROM events WHERE run_id = ? AND type = ? ORDER BY seq",
                                      (run_id, kind)).fetchall()
        return [json.loads(row["data"]) for row in rows]


def _run(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    for key in ("hosts", "options", "incident", "pending", "answer", "report"):
        if out.get(key):
            out[key] = json.loads(out[key])
    return out
