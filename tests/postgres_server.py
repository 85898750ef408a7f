"""A real PostgreSQL server (Debian's postgresql package) on 127.0.0.1 with a throwaway cluster, for the tests of
the team checkpoint store. Run as the `postgres` user when the tests run as root (initdb refuses root)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.chroma_server import free_port


def pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    path = Path(found[-1]) if found else Path(shutil.which("pg_ctl") or "")
    if not path.name:
        pytest.fail("PostgreSQL is not installed (Debian package postgresql; `make install` installs it)")
    return path.parent


@contextmanager
def running_postgres() -> Iterator[str]:
    """Yield the URL of a fresh cluster (user aidai, trust auth on loopback only); stop and delete it after."""
    root = Path(tempfile.mkdtemp(prefix="aidai-pg-"))  # under /tmp: the postgres user must reach it
    as_owner: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    data, port, bindir = root / "data", free_port(), pg_bin()

    def run(*args: str) -> None:
        proc = subprocess.run([*as_owner, *args], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            pytest.fail(f"{Path(args[0]).name} failed: {proc.stderr[-2000:]}{proc.stdout[-1000:]}")

    try:
        run(str(bindir / "initdb"), "-D", str(data), "-U", "aidai", "--auth=trust", "--no-sync")
        run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "60", "-o",
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
        yield f"postgresql://aidai@127.0.0.1:{port}/postgres"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run([*as_owner, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                           capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)
