"""A real Chroma server (the venv's `chroma` CLI) on 127.0.0.1 with a throwaway data dir, for the team-scale tests."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.processes import stop


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def chroma_exe() -> Path:
    exe = Path(sys.executable).with_name("chroma")
    if exe.exists():
        return exe
    found = shutil.which("chroma")
    if found is None:
        pytest.fail("the chroma CLI (installed with chromadb) is not on this machine")
    return Path(found)


@contextmanager
def running_chroma(root: Path) -> Iterator[str]:
    """Start the server on a free loopback port, wait for its heartbeat (60 s at most), yield its URL, stop it."""
    port = free_port()
    log_path = root / "chroma.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([str(chroma_exe()), "run", "--path", str(root / "server"), "--host", "127.0.0.1",
                                 "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "ANONYMIZED_TELEMETRY": "False"})
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=2) as resp:
                        if resp.status == 200:
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail(f"chroma server did not start: {log_path.read_text()[-2000:]}")
                time.sleep(0.3)  # polling for readiness, not a timing assertion
            yield url
        finally:
            stop(proc, grace_s=15)
