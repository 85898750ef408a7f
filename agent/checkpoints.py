"""Where a run's LangGraph checkpoints live: SQLite in the data dir (the default, one user or one server), or a
Postgres database given by URL (a team's runs in one place, several servers or CLIs sharing them)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CONNECT_TIMEOUT_S = 10


class CheckpointStoreError(ValueError):
    """A checkpoint store that cannot be used (bad URL, unreachable server); the URL is shown without secrets."""


def shown(url: str) -> str:
    """scheme://host:port/db of a database URL: the user name and password never reach a log or an error."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


def open_store(url: str | None, sqlite_path: Path) -> tuple[Any, Callable[[], None]]:
    """(checkpointer, close): Postgres when `url` is given, else SQLite at `sqlite_path`."""
    if url:
        return _postgres(url)
    sqlite_path.parent.mkdir(parents=True, exist_ok=True)
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(sqlite_path, check_same_thread=False)
    return SqliteSaver(conn), conn.close


def _postgres(url: str) -> tuple[Any, Callable[[], None]]:
    if urlsplit(url).scheme not in ("postgres", "postgresql"):
        raise CheckpointStoreError(f"checkpoint URL {shown(url)!r}: expected postgresql://USER@HOST:PORT/DB")
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    try:
        # the settings LangGraph's PostgresSaver needs: autocommit, no server-side prepared statements, dict rows
        conn = psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row,
                               connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointStoreError(f"cannot reach the Postgres checkpoint store {shown(url)}: {reason}") from None
    saver = PostgresSaver(conn)  # type: ignore[arg-type]
    try:
        saver.setup()  # creates or migrates the checkpoint tables; idempotent
    except psycopg.Error as exc:
        conn.close()
        raise CheckpointStoreError(f"cannot set up checkpoint tables in {shown(url)}: {exc}") from None
    return saver, conn.close
