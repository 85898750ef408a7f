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

from agent.events import parse
from agent.paths import KNOWLEDGE_DIR
from agent.server.app import create_app, server_dir
from agent.server.client import Client
from agent.server.config import Caller, ConfigError, ServerConfig, load_tokens
from agent.sim.scenario import create_scenario, find_record, scenario_from_record

EXAMPLES = KNOWLEDGE_DIR / "examples" / "demo_incidents.jsonl"
ECC = "GPU.MEMORY.UNCORRECTABLE_ECC"
# a GPU 5 that only a load test shows faulty: history points at an ECC error first, whose read-only checks do not
# decide it, so the DCGM diag is asked for (a load test whose answer can change the diagnosis; an ECC error the
# read-only checks confirm asks for none)
NAN_INCIDENT = ("Training on our 8-GPU VM: the loss becomes NaN after a few steps, always on local rank 5; restarting "
                "the job does not help.")
# an incident that sends the search to GPU.HARDWARE / GPU.PERFORMANCE, where the load tests are asked for
FOB_INCIDENT = ("Training job crashed on rank 3 with CUDA error: unspecified launch failure. GPU 3 seems faulty, we "
                "saw wrong results and a slow GPU straggler before.")
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


@pytest.fixture(scope="session", name="nan_spec")
def nan_spec_fixture(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("server-sim") / "nan"
    return f"sim:{create_scenario(root, [{'fault': 'gpu.faulty', 'gpu': 5}], []).root}"


@pytest.fixture(scope="session", name="fob_spec")
def fob_spec_fixture(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A simulated H100 host whose GPU 3 has fallen off the bus (Xid 79, reads rev ff, lost to NVML)."""
    root = tmp_path_factory.mktemp("server-sim") / "fob"
    return f"sim:{create_scenario(root, [{'fault': 'gpu.fallen_off_bus', 'gpu': 3}], []).root}"


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
        # every event of the stream is one of the typed events (the agents' and the server's own)
        assert [parse(e.data).type for e in events[:-1]] == types[:-1]

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
        # the page is the on-call engineer's, for the nodes this server targets: their names stay there; what is
        # posted out (the webhook) names them by placeholders
        assert ticket["hosts"] and not any(h.startswith("<host-") for h in ticket["hosts"])
        posted = client.http.get(f"/api/runs/{run_id}/ticket", params={"channel": "webhook"}).json()
        assert posted["hosts"] and all(h.startswith("<host-") for h in posted["hosts"])
        assert ticket["hosts"][0] not in str(posted)
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
                                                               ecc_spec: str, nan_spec: str) -> None:
    config.tokens, config.workers, config.targets = dict(TOKENS), 1, [*config.targets, nan_spec]
    with serving(config) as url, Client(url, VIEWER_TOKEN) as viewer, Client(url, OPERATOR_TOKEN) as operator:
        run_id = viewer.start(NAN_INCIDENT, [nan_spec], approval="ask", feedback_rounds=0)
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
                             "node": ECC, "checks": {"dcgm_diag": False, "approved_by": "otto"},
                             "decision": "declined", "approved": [], "declined": ["dcgm_diag"]}]
        run = viewer.run(run_id)
        assert run["status"] == "done" and run["result"]["root_causes"][0]["label"] != ECC
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
        archive = post("/api/runs", data={"incident": "NCCL timeout", "hosts": ecc_spec},
                       files={"file": ("err.log.gz", b"\x1f\x8b\x08\x00" + bytes(range(1, 200)))})
        assert archive.status_code == 415 and "gzip archive" in archive.json()["detail"]
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


def test_binary_input_is_refused_with_the_cli_message(config: ServerConfig, ecc_spec: str, tmp_path: Path) -> None:
    import random

    from typer.testing import CliRunner

    from agent.cli.main import app

    junk = random.Random(5).randbytes(4096)
    with serving(config) as url, Client(url) as client:
        upload = client.http.post("/api/runs", data={"incident": "it crashed", "hosts": ecc_spec},
                                  files={"file": ("random.bin", junk)})
        field = client.http.post("/api/runs", json={"incident": "\x01\x02\x03\x04 it crashed \x05\x06\x07\x08",
                                                    "hosts": [ecc_spec]})
        logs = client.http.post("/api/runs", data={"incident": "NCCL timeout", "hosts": ecc_spec},
                                files={"logs": ("rank0.log", junk)})
        assert client.http.get("/api/runs").json() == {"runs": []}  # no diagnosis started
    assert upload.status_code == field.status_code == logs.status_code == 415
    detail = upload.json()["detail"]
    assert detail.startswith("random.bin is not text: received 4,096 bytes of binary data")
    assert "send the error log as text" in detail
    assert field.json()["detail"].startswith("the incident field is not text")
    assert logs.json()["detail"].startswith("rank0.log is not text")
    assert not (server_dir(config) / "uploads").exists() or not any((server_dir(config) / "uploads").iterdir())
    (tmp_path / "random.bin").write_bytes(junk)  # the CLI, given the same file, says the same
    cli = CliRunner().invoke(app, ["diagnose", "--file", str(tmp_path / "random.bin"), "--data-dir",
                                   str(tmp_path / "cli-data")])
    assert cli.exit_code == 2 and f"error: {detail}" in cli.output


def test_gbk_and_latin1_uploads_are_decoded(config: ServerConfig, ecc_record: dict, ecc_spec: str) -> None:
    gbk = "[2026-03-01 10:00:01] 错误: 训练进程已终止, GPU 3 上出现不可纠正的 ECC 错误\n"
    latin1 = "2026-03-01 10:00:02 ERREUR: arrêt du job, mémoire GPU corrompue (uncorrectable ECC)\n"
    with serving(config) as url, Client(url) as client:
        runs = {}
        for name, data in (("gbk.log", gbk.encode("gbk")), ("latin1.log", latin1.encode("latin-1"))):
            made = client.http.post("/api/runs", data={"incident": f"\x1b[1m{ecc_record['description']}\x1b[0m",
                                                       "hosts": ecc_spec, "approval": "none", "feedback_rounds": "0"},
                                    files={"file": (name, data)})
            assert made.status_code == 201, made.text
            runs[made.json()["id"]] = gbk if name == "gbk.log" else latin1
        for run_id, text in runs.items():
            assert client.wait(run_id, timeout=180)[-1].data == {"status": "done"}
            assert client.run(run_id)["incident"] == f"{ecc_record['description']}\n\n{text}"


def test_large_upload_is_excerpted_and_attached(config: ServerConfig, ecc_record: dict, ecc_spec: str,
                                                tmp_path: Path) -> None:
    import hashlib

    from agent.textinput import DEFAULT_LIMIT
    from tests.test_text_input import make_large_log

    log = tmp_path / "train.log"
    errors = make_large_log(log, DEFAULT_LIMIT + 200_000)
    data = log.read_bytes()
    with serving(config) as url, Client(url) as client:
        made = client.http.post("/api/runs", data={"incident": ecc_record["description"], "hosts": ecc_spec,
                                                   "approval": "none", "feedback_rounds": "0"},
                                files={"file": ("train.log", data)})
        assert made.status_code == 201, made.text
        run_id = made.json()["id"]
        assert client.wait(run_id, timeout=180)[-1].data == {"status": "done"}
        run = client.run(run_id)
    assert all(line in run["incident"] for line in errors) and len(run["incident"]) < 250_000
    [attached] = run["result"]["details"]["attachments"]
    assert attached["name"] == "train.log" and attached["bytes"] == len(data)
    assert attached["sha256"] == hashlib.sha256(data).hexdigest()
    path = Path(attached["path"])
    assert path == (server_dir(config) / "uploads" / run_id / "attachments" / "train.log").resolve()
    assert path.read_bytes() == data
    assert run["result"]["root_causes"][0]["label"] == ECC


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


def test_one_status_everywhere_a_decline_is_a_decline_and_nothing_is_replayed(config: ServerConfig,
                                                                             nan_spec: str) -> None:
    from agent.audit import audit_path, read
    from agent.server.runs import SERVER_EVENTS, replay_key

    config.targets = [*config.targets, nan_spec]
    with serving(config) as url, Client(url) as client:
        run_id = client.start(NAN_INCIDENT, [nan_spec], approval="ask", feedback_rounds=0)
        asked = client.wait(run_id, until=("approval",), timeout=180)[-1]
        # the store says waiting before anyone can see the question: no polling, no race with a quick answer
        run = client.run(run_id)
        assert (run["status"], run["waiting_for"]) == ("waiting", "approval")
        listed = {r["id"]: r for r in client.http.get("/api/runs").json()["runs"]}[run_id]
        assert (listed["status"], listed["waiting_for"]) == ("waiting", "approval")
        assert [r["id"] for r in client.http.get("/api/runs", params={"status": "waiting"}).json()["runs"]] == [run_id]
        status = next(iter(client.events(run_id, after=asked.seq, until=("status",), timeout=60)))
        assert status.type == "status" and status.data["status"] == "waiting"
        assert status.data["waiting_for"] == "approval"
        for check in asked.data["checks"]:  # the server's advice on each check: pre-tick it or not, and why
            assert isinstance(check["suggested"], bool) and check["why"]
        assert run["pending"]["checks"] == asked.data["checks"]

        ok = client.http.post(f"/api/runs/{run_id}/approve", json={"checks": {"dcgm_diag": False}})
        assert ok.status_code == 202 and ok.json()["decision"] == "declined"
        events = client.wait(run_id, timeout=180)
        answered = next(e for e in events if e.type == "answered")
        assert answered.data["decision"] == "declined"
        assert (answered.data["approved"], answered.data["declined"]) == ([], ["dcgm_diag"])
        statuses = [e.data["status"] for e in events if e.type == "status"]
        assert statuses == ["queued", "running", "waiting", "queued", "running", "done"], statuses
        assert all(e.data["waiting_for"] is None for e in events
                   if e.type == "status" and e.data["status"] != "waiting")

        # the continued run starts the interrupted step again: its steps before the question are not stored twice
        before = {replay_key(e.data) for e in events if e.seq < answered.seq and e.type not in SERVER_EVENTS}
        after = [e.data for e in events if e.seq > answered.seq and e.type not in SERVER_EVENTS | {"end"}]
        assert after and not [e for e in after if replay_key(e) in before], after
        assert [e["type"] for e in after][:2] == ["checks", "result"]  # the declined check, reported not run
        assert after[0]["checks"] == ["dcgm_diag"]

        run = client.run(run_id)
        assert run["status"] == "done" and run["waiting_for"] is None
        assert run["approvals"] == [{"node": ECC, "ts": run["approvals"][0]["ts"], "decision": "declined",
                                     "approved": [], "declined": ["dcgm_diag"], "by": "local"}]
        listed = {r["id"]: r for r in client.http.get("/api/runs").json()["runs"]}[run_id]
        assert listed["status"] == "done"

        # a reconnect with Last-Event-ID gets only what followed that event
        with client.http.stream("GET", f"/api/runs/{run_id}/events",
                                headers={"Last-Event-ID": str(answered.seq)}) as response:
            from agent.server.client import parse_sse

            again = list(parse_sse(response.iter_lines()))
        assert [e.seq for e in again if e.type != "end"] == [e.seq for e in events
                                                             if e.seq > answered.seq and e.type != "end"]
    logged, problems = read(audit_path(server_dir(config), run_id))
    approvals = [e for e in logged if e["event"] == "approval"]
    assert not problems and [(e["check"], e["approved"], e["decision"], e["by"]) for e in approvals] == [
        ("dcgm_diag", False, "declined", "local")]


def test_approval_advice_never_preticks_a_load_test_on_a_gpu_that_fell_off_the_bus(config: ServerConfig,
                                                                                   fob_spec: str) -> None:
    config.targets = [fob_spec]
    with serving(config) as url, Client(url) as client:
        run_id = client.start(FOB_INCIDENT, [fob_spec], approval="ask", feedback_rounds=0)
        asked: list[dict] = []
        after = 0
        while True:
            last = list(client.events(run_id, after=after, until=("approval",), timeout=180))[-1]
            if last.type != "approval":
                break
            asked.append(last.data)
            after = last.seq
            checks = {c["id"]: True for c in last.data["checks"]}  # the operator may still run them
            assert client.http.post(f"/api/runs/{run_id}/approve", json={"checks": checks}).status_code == 202
        assert asked, "the run asks for a load test on the GPU branch"
        offered = [c for payload in asked for c in payload["checks"]]
        assert {"dcgm_diag", "gpu_exec"} <= {c["id"] for c in offered}
        for check in offered:
            assert check["suggested"] is False, check
            assert "GPU3" in check["why"] and "fallen off the bus" in check["why"], check
        run = client.run(run_id)
        assert run["status"] == "done"
        assert {d["decision"] for d in run["approvals"]} == {"approved"}


def test_advice_follows_the_evidence() -> None:
    from agent.checks.manifest import load_manifest
    from agent.models import CheckResult, Finding
    from agent.server.runs import advise, same_question

    manifest = load_manifest()
    asked = {"kind": "approval", "node": "GPU.HARDWARE", "checks": [
        {"id": "gpu_exec", "tier": "active", "description": "GEMM", "expected_cost_s": 60.0}]}
    hosts = {"node-1": {"expectations": {"cannot_check": ""}}}

    def advice(results: list[CheckResult], judgements: list[dict] | None = None,
               inventory: dict | None = None) -> tuple[bool, str]:
        check = advise(asked, results, judgements or [], hosts if inventory is None else inventory,
                       manifest)["checks"][0]
        return check["suggested"], check["why"]

    healthy = [CheckResult(check="gpu_inventory", host="node-1", verdict="PASS")]
    assert advice(healthy)[0] is True
    gone = CheckResult(check="gpu_inventory", host="node-1", verdict="FAIL", findings=[
        Finding(id="gpu_fallen_off_bus", severity="FAIL", entity="GPU3")])
    suggested, why = advice([gone])
    assert suggested is False and "GPU3 on node-1 has fallen off the bus" in why
    missing = CheckResult(check="gpu_inventory", host="node-1", verdict="FAIL", findings=[
        Finding(id="missing_gpu", severity="FAIL", entity="node-1")])
    suggested, why = advice([missing])
    assert suggested is False and "node-1 is missing" in why
    confirmed = [{"label": "GPU.HARDWARE.FAULTY_GPU", "status": "confirmed"}]
    suggested, why = advice(healthy, confirmed)
    assert suggested is False and "GPU.HARDWARE.FAULTY_GPU is already confirmed" in why
    # judged again later: the latest judgement counts
    assert advice(healthy, [*confirmed, {"label": "GPU.HARDWARE.FAULTY_GPU", "status": "rejected"}])[0] is True
    unusable = {"node-1": {"expectations": {"cannot_check": "no NVIDIA GPU and no driver"}}}
    assert advice(healthy, inventory=unusable)[0] is False
    # the advice is the server's: the saved answer still matches the graph's own question on resume
    assert same_question(advise(asked, [gone], [], hosts, manifest), asked)
