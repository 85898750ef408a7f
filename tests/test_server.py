"""`aidai serve` in-process (uvicorn in a thread, real HTTP on loopback): runs, server-sent events, approvals,
roles, tickets, and bad input that must get a clear 4xx and leave nothing behind.

The session's data dir (conftest: seed incident DB and a one-doc KB) is shared; each diagnosis on the simulated
ECC host takes a few seconds once the embedding model is loaded.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn

from agent.paths import KNOWLEDGE_DIR
from agent.server.app import create_app, server_dir
from agent.server.client import Client
from agent.server.config import Caller, ConfigError, ServerConfig, load_tokens
from agent.sim.scenario import find_record, scenario_from_record

EXAMPLES = KNOWLEDGE_DIR / "examples" / "demo_incidents.jsonl"
ECC = "GPU.MEMORY.UNCORRECTABLE_ECC"
VIEWER_TOKEN, OPERATOR_TOKEN = "viewer-token-0123456789", "operator-token-0123456789"
TOKENS = {VIEWER_TOKEN: Caller("vera", "viewer"), OPERATOR_TOKEN: Caller("otto", "operator")}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(config: ServerConfig) -> Iterator[str]:
    """The app under uvicorn in a thread on a free loopback port; yields its base URL."""
    config.port = config.port if config.port != 8080 else free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(config), host="127.0.0.1", port=config.port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


@pytest.fixture(scope="session", name="ecc_record")
def ecc_record_fixture() -> dict:
    return find_record(EXAMPLES, "demo-ecc")


@pytest.fixture(scope="session", name="ecc_spec")
def ecc_spec_fixture(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("server-sim") / "ecc"
    return f"sim:{scenario_from_record(root, EXAMPLES, 'demo-ecc').root}"


@pytest.fixture(name="config")
def config_fixture(tmp_path: Path, data_dir: Path, tiny_kb: Path, ecc_spec: str) -> ServerConfig:
    """A fresh server data dir per test, with the session's incident DB and KB index linked in (read-only use)."""
    data = tmp_path / "data"
    data.mkdir()
    for item in data_dir.iterdir():
        if item.name != "runs":
            (data / item.name).symlink_to(item)
    return ServerConfig(data_dir=str(data), targets=[ecc_spec], kb_dir=str(tiny_kb), workers=2)


def test_run_streams_events_and_gives_report_and_ticket(config: ServerConfig, ecc_record: dict,
                                                        ecc_spec: str) -> None:
    with serving(config) as url, Client(url) as client:
        run_id = client.start(ecc_record["description"], [ecc_spec], approval="none", feedback_rounds=0)
        events = client.wait(run_id, timeout=180)
        types = [e.type for e in events]
        for wanted in ("status", "summary", "pretriage", "history", "checks", "result", "judgement", "conclusion",
                       "done", "end"):
            assert wanted in types, types
        assert [e.seq for e in events if e.type != "end"] == sorted({e.seq for e in events if e.type != "end"})
        confirmed = [e.data["label"] for e in events if e.type == "judgement" and e.data["status"] == "confirmed"]
        assert ECC in confirmed
        assert events[-1].data == {"status": "done"}

        run = client.run(run_id)
        assert run["status"] == "done" and run["pending"] is None
        assert run["result"]["resolved"] is True
        assert run["result"]["root_causes"][0]["label"] == ECC  # the `diagnose --json` contract
        assert run["result"]["run_id"] == run_id

        # a reconnect from an event id replays exactly what followed it
        middle = events[len(events) // 2].seq
        again = client.wait(run_id)
        tail = list(client.events(run_id, after=middle))
        assert [e.seq for e in tail if e.type != "end"] == [e.seq for e in again if e.seq > middle and e.type != "end"]

        ticket = client.http.get(f"/api/runs/{run_id}/ticket").json()
        assert ticket["status"] == "resolved" and ticket["root_causes"][0]["label"] == ECC
        md = client.http.get(f"/api/runs/{run_id}/ticket", params={"format": "md"})
        assert md.headers["content-type"].startswith("text/markdown") and ECC in md.text
        listed = client.http.get("/api/runs").json()["runs"]
        assert [r["id"] for r in listed] == [run_id] and listed[0]["root_causes"][0] == ECC
        schema = client.http.get("/openapi.json").json()
        for path in ("/api/runs", "/api/runs/{run_id}", "/api/runs/{run_id}/events", "/api/runs/{run_id}/approve",
                     "/api/runs/{run_id}/answer", "/api/runs/{run_id}/ticket"):
            assert path in schema["paths"], path
        page = client.http.get("/")
        assert page.status_code == 200 and "taxonomy" in page.text.lower()


def test_approval_waits_without_a_thread_and_needs_an_operator(config: ServerConfig, ecc_record: dict,
                                                               ecc_spec: str) -> None:
    config.tokens, config.workers = dict(TOKENS), 1
    with serving(config) as url, Client(url, VIEWER_TOKEN) as viewer, Client(url, OPERATOR_TOKEN) as operator:
        run_id = viewer.start(ecc_record["description"], [ecc_spec], approval="ask", feedback_rounds=0)
        asked = viewer.wait(run_id, until=("approval",), timeout=180)[-1]
        assert asked.type == "approval" and asked.data["node"] == ECC
        assert [c["id"] for c in asked.data["checks"]] == ["dcgm_diag"]
        deadline = time.monotonic() + 30
        while viewer.run(run_id)["status"] != "waiting":
            assert time.monotonic() < deadline
            time.sleep(0.1)

        # the only worker is free while the run waits: a second run finishes meanwhile
        other = viewer.start(ecc_record["description"], [ecc_spec], approval="none", feedback_rounds=0)
        assert viewer.wait(other, timeout=180)[-1].data == {"status": "done"}
        assert viewer.run(run_id)["status"] == "waiting"

        refused = viewer.http.post(f"/api/runs/{run_id}/approve", json={"checks": {"dcgm_diag": True}})
        assert refused.status_code == 403 and "operator" in refused.json()["detail"]
        wrong = operator.http.post(f"/api/runs/{run_id}/approve", json={"checks": {"rm_rf": True}})
        assert wrong.status_code == 400 and "not asked" in wrong.json()["detail"]
        not_a_question = operator.http.post(f"/api/runs/{run_id}/answer", json={"answer": "hi"})
        assert not_a_question.status_code == 409
        ok = operator.http.post(f"/api/runs/{run_id}/approve", json={"checks": {"dcgm_diag": False}})
        assert ok.status_code == 202, ok.text
        twice = operator.http.post(f"/api/runs/{run_id}/approve", json={"checks": {"dcgm_diag": False}})
        assert twice.status_code == 409
        events = viewer.wait(run_id, timeout=180)
        answered = [e.data for e in events if e.type == "answered"]
        assert answered == [{"type": "answered", "kind": "approval", "by": "otto", "ts": answered[0]["ts"],
                             "checks": {"dcgm_diag": False, "approved_by": "otto"}}]
        run = viewer.run(run_id)
        assert run["status"] == "done" and run["result"]["root_causes"][0]["label"] == ECC
        dcgm = [r for r in run["result"]["details"]["results"] if r["check"] == "dcgm_diag"]
        assert dcgm and dcgm[0]["verdict"] == "UNKNOWN"  # declined: not run

        all_by_viewer = viewer.http.post("/api/runs", json={"incident": "x", "hosts": [ecc_spec], "approval": "all"})
        assert all_by_viewer.status_code == 403


def test_tokens_are_required_and_checked(config: ServerConfig, ecc_spec: str) -> None:
    config.tokens = dict(TOKENS)
    with serving(config) as url:
        missing = httpx.get(f"{url}/api/runs")
        assert missing.status_code == 401 and "missing bearer token" in missing.json()["detail"]
        assert missing.headers["www-authenticate"] == "Bearer"
        bad = httpx.get(f"{url}/api/runs", headers={"Authorization": "Bearer not-a-token-at-all"})
        assert bad.status_code == 401 and "invalid" in bad.json()["detail"]
        start = httpx.post(f"{url}/api/runs", json={"incident": "Xid 79", "hosts": [ecc_spec]})
        assert start.status_code == 401
        good = httpx.get(f"{url}/api/me", headers={"Authorization": f"Bearer {VIEWER_TOKEN}"})
        assert good.json() == {"name": "vera", "role": "viewer"}
        assert httpx.get(f"{url}/").status_code == 200  # the page itself holds no data
    assert not list((server_dir(config) / "uploads").glob("*"))


def test_bad_input_gets_a_clear_4xx_and_writes_nothing(config: ServerConfig, ecc_spec: str) -> None:
    config.max_upload_bytes = 64 * 1024
    with serving(config) as url, Client(url) as client:
        post = client.http.post
        big = post("/api/runs", json={"incident": "x" * 100_000, "hosts": [ecc_spec]})
        assert big.status_code == 413 and "limit" in big.json()["detail"]
        big_file = post("/api/runs", data={"incident": "NCCL timeout", "hosts": ecc_spec},
                        files={"logs": ("rank0.log", b"line\n" * 20_000)})
        assert big_file.status_code == 413
        binary = post("/api/runs", data={"incident": "NCCL timeout", "hosts": ecc_spec},
                      files={"logs": ("core.bin", b"\x7fELF\x00\x01\x02" * 10)})
        assert binary.status_code == 415 and "binary" in binary.json()["detail"]
        latin1 = post("/api/runs", data={"incident": "NCCL timeout", "hosts": ecc_spec},
                      files={"file": ("err.log", "caf\xe9".encode("latin-1"))})
        assert latin1.status_code == 415 and "UTF-8" in latin1.json()["detail"]
        malformed = post("/api/runs", content=b'{"incident": "x", "hosts": [', headers={"Content-Type":
                                                                                       "application/json"})
        assert malformed.status_code == 400 and "malformed JSON" in malformed.json()["detail"]
        unknown = post("/api/runs", json={"incident": "Xid 79", "hosts": ["ssh://root@10.0.0.1"]})
        assert unknown.status_code == 400 and "unknown host" in unknown.json()["detail"]
        empty = post("/api/runs", json={"incident": "   ", "hosts": [ecc_spec]})
        assert empty.status_code == 400 and "empty" in empty.json()["detail"]
        extra = post("/api/runs", json={"incident": "Xid 79", "hosts": [ecc_spec], "shell": "rm -rf /"})
        assert extra.status_code == 422 and "shell" in extra.json()["detail"]
        no_hosts = post("/api/runs", json={"incident": "Xid 79", "hosts": []})
        assert no_hosts.status_code == 422
        text_plain = post("/api/runs", content=b"Xid 79", headers={"Content-Type": "text/plain"})
        assert text_plain.status_code == 415
        assert client.http.get("/api/runs/nope").status_code == 404
        assert client.http.get("/api/runs/nope/events").status_code == 404
        bad_answer = post("/api/runs/nope/approve", content=b"{", headers={"Content-Type": "application/json"})
        assert bad_answer.status_code == 400
        assert client.http.get("/api/runs").json() == {"runs": []}  # nothing half-written
    assert not (server_dir(config) / "uploads").exists() or not any((server_dir(config) / "uploads").iterdir())


def test_upload_is_saved_as_attachment(config: ServerConfig, ecc_record: dict, ecc_spec: str) -> None:
    with serving(config) as url, Client(url) as client:
        made = client.http.post("/api/runs", data={"incident": ecc_record["description"], "hosts": ecc_spec,
                                                   "approval": "none", "feedback_rounds": "0"},
                                files=[("file", ("err.log", b"RuntimeError: CUDA error: uncorrectable ECC\n")),
                                       ("logs", ("rank0.log", b"step 1 ok\n")),
                                       ("logs", ("../../rank1.log", b"step 1 ok\nXid 48\n"))])
        assert made.status_code == 201, made.text
        run_id = made.json()["id"]
        assert client.wait(run_id, timeout=180)[-1].data == {"status": "done"}
        run = client.run(run_id)
        assert "uncorrectable ECC" in run["incident"].splitlines()[-1]  # the file follows the text
    logs = server_dir(config) / "uploads" / run_id / "logs"
    assert sorted(p.name for p in logs.iterdir()) == ["rank0.log", "rank1.log"]  # no path escapes the folder


def test_config_refuses_unsafe_setups(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs bearer tokens"):
        ServerConfig(host="0.0.0.0").check()
    ServerConfig(host="::1").check()
    tokens = tmp_path / "tokens"
    tokens.write_text("# name role token\nalice operator a-long-enough-token-1\nbob viewer a-long-enough-token-2\n")
    loaded = load_tokens(tokens, env={"AIDAI_TOKENS": "carol:viewer:a-long-enough-token-3"})
    assert {c.name: c.role for c in loaded.values()} == {"alice": "operator", "bob": "viewer", "carol": "viewer"}
    ServerConfig(host="0.0.0.0", tokens=loaded).check()
    for text, error in (("alice admin a-long-enough-token-1", "role"), ("alice operator short", "shorter"),
                        ("alice operator", "expected")):
        tokens.write_text(text)
        with pytest.raises(ConfigError, match=error):
            load_tokens(tokens, env={})
    with pytest.raises(ConfigError, match="twice"):
        load_tokens(None, env={"AIDAI_TOKENS": "a:viewer:same-token-0123456,b:operator:same-token-0123456"})


def test_serve_command_refuses_bad_setups_with_exit_2(tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from agent.cli.serve_cmd import serve

    app = typer.Typer()
    app.command()(serve)
    runner = CliRunner(env={"COLUMNS": "200", "AIDAI_TOKENS": "", "AIDAI_TOKENS_FILE": ""})
    open_bind = runner.invoke(app, ["--host", "0.0.0.0", "--data-dir", str(tmp_path)])
    assert open_bind.exit_code == 2 and "needs bearer tokens" in open_bind.output
    bad_target = runner.invoke(app, ["--target", "bogus:thing", "--data-dir", str(tmp_path)])
    assert bad_target.exit_code == 2 and "unknown host spec" in bad_target.output
    no_file = runner.invoke(app, ["--tokens", str(tmp_path / "none"), "--data-dir", str(tmp_path)])
    assert no_file.exit_code == 2 and "tokens file" in no_file.output
    assert "Traceback" not in open_bind.output + bad_target.output + no_file.output
