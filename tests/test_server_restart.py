"""A real `python -m agent.server` subprocess killed with SIGKILL mid-run and started again: every run that was
queued or running continues from its checkpoint and finishes; nothing is lost."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from agent.server.app import server_dir
from agent.server.client import Client
from agent.server.config import ServerConfig
from tests.processes import stop
from tests.test_server import ECC, config_fixture, ecc_spec_fixture, free_port  # noqa: F401 (fixtures)

INCIDENT = "Training crashed with RuntimeError: CUDA error: uncorrectable ECC error encountered on local rank 5"


@contextmanager
def server_process(config: ServerConfig, port: int, log: Path) -> Iterator[subprocess.Popen]:
    command = [sys.executable, "-m", "agent.server", "--port", str(port), "--data-dir", str(config.data_dir),
               "--kb-dir", str(config.kb_dir), "--workers", "1",
               *[arg for spec in config.targets for arg in ("--target", spec)]]
    with log.open("ab") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "200"})
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/hosts", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not start:\n" + log.read_text()
            time.sleep(0.2)
        yield proc
    finally:
        if proc.poll() is None:
            stop(proc, grace_s=15)


def statuses(config: ServerConfig) -> dict[str, str]:
    with sqlite3.connect(server_dir(config) / "server.sqlite") as conn:
        return dict(conn.execute("SELECT id, status FROM runs").fetchall())


def checkpointed(config: ServerConfig) -> set[str]:
    with sqlite3.connect(server_dir(config) / "checkpoints.sqlite") as conn:
        return {row[0] for row in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")}


def test_sigkill_mid_run_then_restart_resumes_from_checkpoints(config: ServerConfig, ecc_spec: str,
                                                               tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "server.log"
    with server_process(config, port, log) as proc, Client(url) as client:
        ids = [client.start(INCIDENT, [ecc_spec], approval="none", feedback_rounds=0) for _ in range(2)]
        # killed once the first run has checkpointed steps behind it and ran checks (pre-triage's preflight), before
        # the first search step loads the embedding model: the model loads once, in the second server
        seen = client.wait(ids[0], until=("pretriage",), timeout=120)
        assert seen[-1].type == "pretriage"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    before = statuses(config)
    unfinished = [i for i in ids if before[i] in ("queued", "running")]
    assert ids[1] in unfinished, before  # one worker: the run behind the first was cut off before it began
    assert before[ids[0]] in ("running", "done"), before
    mid_run = [i for i in unfinished if i in checkpointed(config)]  # stopped after some checkpointed steps

    with server_process(config, port, log), Client(url) as client:
        for run_id in ids:
            events = client.wait(run_id, timeout=180)
            assert events[-1].data == {"status": "done"}, (run_id, [e.type for e in events][-5:], log.read_text())
            run = client.run(run_id)
            details = run["result"]["details"]
            assert run["result"]["resolved"], (run_id, details["explanation"])
            assert run["result"]["root_causes"][0]["label"] == ECC
            recovered = [e for e in events if e.type == "recovered"]
            assert bool(recovered) == (run_id in unfinished), run_id
            seqs = [e.seq for e in events if e.type != "end"]
            assert seqs == sorted(set(seqs))  # one ordered history across both server lives
        assert len(client.http.get("/api/runs").json()["runs"]) == 2
    if mid_run:  # a run resumed from a checkpoint does not start over: its first summary is not repeated
        with sqlite3.connect(server_dir(config) / "server.sqlite") as conn:
            kinds = [json.loads(d)["type"] for (d,) in conn.execute(
                "SELECT data FROM events WHERE run_id = ? ORDER BY seq", (mid_run[0],))]
        assert kinds.count("summary") == 1, kinds
