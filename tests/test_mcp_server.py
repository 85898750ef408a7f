"""`aidai mcp` driven by the official MCP SDK's own client: over stdio (the SDK spawns `python -m agent.cli.main mcp`)
and over streamable HTTP (the same command with --transport http, a real uvicorn on a free loopback port).

What is checked: the tools an assistant sees, a passive check on a simulated host, the refusals (an active check on
a server that does not allow them, a host outside the allowlist, a missing or wrong bearer token, a viewer who
approves), a diagnosis followed with get_run's cursor to its root cause, its ticket, the searches, the resources,
and that a run started over MCP is a run of `aidai serve`'s store (its page shows it, with who approved what).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from agent.audit import read as read_audit
from agent.paths import KNOWLEDGE_DIR
from agent.server.app import server_dir
from agent.server.config import ServerConfig
from agent.server.store import RunStore
from agent.sim.scenario import create_scenario, scenario_from_record
from tests.processes import stop

EXAMPLES = KNOWLEDGE_DIR / "examples" / "demo_incidents.jsonl"
ECC = "GPU.MEMORY.UNCORRECTABLE_ECC"
REPO = Path(__file__).resolve().parents[1]
VIEWER_TOKEN, OPERATOR_TOKEN = "viewer-token-0123456789", "operator-token-0123456789"
TOOLS = {"server_info", "list_checks", "run_checks", "start_diagnosis", "get_run", "list_runs", "approve", "answer",
         "get_ticket", "search_incidents", "search_taxonomy"}
FOLLOW_S = 240  # generous: a diagnosis takes seconds, but the machine may be loaded


@pytest.fixture(scope="module", name="ecc")
def ecc_fixture(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(host spec, incident text) of a simulated H100 host with an uncorrectable ECC error on GPU 5."""
    root = tmp_path_factory.mktemp("mcp-sim") / "ecc"
    record = json.loads(next(line for line in EXAMPLES.read_text().splitlines() if '"demo-ecc"' in line))
    return f"sim:{scenario_from_record(root, EXAMPLES, 'demo-ecc').root}", record["description"]


@pytest.fixture(scope="module", name="nan")
def nan_fixture(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(host spec, incident text) of a host whose GPU 5 only a load test shows faulty: history points at an ECC
    error first, whose read-only checks do not decide it, so the DCGM diag is asked for."""
    root = tmp_path_factory.mktemp("mcp-sim") / "nan"
    return (f"sim:{create_scenario(root, [{'fault': 'gpu.faulty', 'gpu': 5}], []).root}",
            "Training on our 8-GPU VM: the loss becomes NaN after a few steps, always on local rank 5; restarting the "
            "job does not help.")


@pytest.fixture(name="data")
def data_fixture(tmp_path: Path, data_dir: Path) -> Path:
    """A fresh data dir per test, with the session's incident DB and KB index linked in (read-only use)."""
    data = tmp_path / "data"
    data.mkdir()
    for item in data_dir.iterdir():
        if item.name != "runs":
            (data / item.name).symlink_to(item)
    return data


def mcp_args(data: Path, kb: Path, *targets: str, extra: tuple[str, ...] = ()) -> list[str]:
    args = ["-m", "agent.cli.main", "mcp", "--data-dir", str(data), "--kb-dir", str(kb), *extra]
    for target in targets:
        args += ["--target", target]
    return args


def child_env() -> dict[str, str]:
    return {"PYTHONPATH": str(REPO), "AIDAI_TOKENS": "", "AIDAI_TOKENS_FILE": ""}


def stdio(data: Path, kb: Path, *targets: str, extra: tuple[str, ...] = ()) -> Client:
    params = StdioServerParameters(command=sys.executable, args=mcp_args(data, kb, *targets, extra=extra),
                                   env=child_env(), cwd=str(REPO))
    return Client(params, read_timeout_seconds=120)


async def tool(client: Client, name: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(name, args)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def refused(client: Client, name: str, **args: Any) -> str:
    result = await client.call_tool(name, args)
    assert result.is_error, result.structured_content
    return " ".join(getattr(c, "text", "") for c in result.content)


async def follow(client: Client, run_id: str, until: Callable[[dict[str, Any]], bool] = lambda out: out["finished"],
                 after: int = 0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """get_run from `after` with the returned cursor until `until`; every event exactly once, in order."""
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + FOLLOW_S
    while True:
        out = await tool(client, "get_run", run_id=run_id, after=after, wait_s=5, max_events=50)
        assert [e["seq"] for e in out["events"]] == list(range(after + 1, after + 1 + len(out["events"])))
        events += out["events"]
        after = out["cursor"]
        if until(out):
            return out, events
        assert time.monotonic() < deadline, f"run {run_id} did not get there: {out['run']['status']}"


def test_stdio_checks_diagnosis_ticket_searches_and_resources(data: Path, tiny_kb: Path, ecc: tuple[str, str],
                                                             tmp_path: Path) -> None:
    spec, text = ecc

    async def main() -> None:
        async with stdio(data, tiny_kb, spec, extra=("--name", "casey")) as client:
            listed = await client.list_tools()
            assert {t.name for t in listed.tools} == TOOLS
            assert all(len(t.description or "") > 80 for t in listed.tools)  # what a foreign assistant reads
            info = await tool(client, "server_info")
            assert info["caller"] == {"name": "casey", "role": "operator"}
            assert (info["hosts"], info["allow_active"]) == ([spec], False)
            checks = (await tool(client, "list_checks", tier="active"))["checks"]
            assert checks and all(c["tier"] == "active" and not c["runnable"] for c in checks)

            # a passive check on the simulated host: the ECC fault is seen, and audited
            ran = await tool(client, "run_checks", hosts=[spec], checks=["gpu_memory_errors"])
            [result] = ran["results"]
            assert (result["check"], result["tier"], result["verdict"]) == ("gpu_memory_errors", "passive", "FAIL")
            events, problems = read_audit(data / "runs" / f"{ran['audit_id']}.audit.jsonl")
            assert not problems
            assert [(e["event"], e.get("check")) for e in events] == [("run", None), ("check", "gpu_memory_errors")]
            assert events[0]["operator"] == "casey" and events[1]["executed"] is True

            # refusals: an active check on a passive-only server, a host outside the allowlist, unknown checks
            assert "not allowed on this server" in await refused(client, "run_checks", hosts=[spec],
                                                                 checks=["gpu_memory_errors", "dcgm_diag"])
            assert "this server checks only" in await refused(client, "run_checks", hosts=["ssh://root@10.0.0.9"],
                                                              checks=["gpu_memory_errors"])
            assert "not in the manifest" in await refused(client, "run_checks", hosts=[spec], checks=["rm_rf"])
            assert "this server checks only" in await refused(client, "start_diagnosis", incident=text,
                                                              hosts=["local"])
            assert "not allowed on this server" in await refused(client, "start_diagnosis", incident=text,
                                                                 hosts=[spec], approval="ask")
            assert not list(data.joinpath("runs").glob("uploads/*"))  # nothing written for a refused run

            # a diagnosis followed to its root cause
            started = await tool(client, "start_diagnosis", incident=text, hosts=[spec], feedback_rounds=0)
            assert (started["status"], started["approval"]) == ("queued", "none")
            run_id = started["id"]
            out, events = await follow(client, run_id)
            assert out["run"]["status"] == "done" and out["waiting_for"] is None
            types = [e["type"] for e in events]
            for wanted in ("status", "checks", "result", "judgement", "conclusion", "done"):
                assert wanted in types, types
            assert ECC in [e["label"] for e in events if e["type"] == "judgement" and e["status"] == "confirmed"]
            assert out["run"]["result"]["resolved"] is True
            assert out["run"]["result"]["root_causes"][0]["label"] == ECC
            again = await tool(client, "get_run", run_id=run_id, max_events=500)  # a replay from 0 is the same
            assert [e["seq"] for e in again["events"]] == [e["seq"] for e in events]
            assert "waits for no answer" in await refused(client, "answer", run_id=run_id, text="more")
            assert "no run" in await refused(client, "get_run", run_id="nope")
            assert await tool(client, "get_run", run_id=run_id, after=out["cursor"]) | {"run": None} == {
                "run": None, "events": [], "cursor": out["cursor"], "more": False, "finished": True,
                "waiting_for": None}

            ticket = await tool(client, "get_ticket", run_id=run_id)
            assert ticket["format"] == "md" and ECC in ticket["markdown"]
            data_ticket = (await tool(client, "get_ticket", run_id=run_id, format="json"))["ticket"]
            assert data_ticket["status"] == "resolved" and data_ticket["root_causes"][0]["label"] == ECC
            assert spec not in json.dumps(data_ticket)  # redacted: the host is a placeholder

            # resources: the run list, the run, its ticket
            runs = json.loads((await client.read_resource("aidai://runs")).contents[0].text)["runs"]
            assert [(r["id"], r["status"], r["created_by"]) for r in runs] == [(run_id, "done", "casey")]
            record = json.loads((await client.read_resource(f"aidai://runs/{run_id}")).contents[0].text)
            assert record["result"]["root_causes"][0]["label"] == ECC
            md = (await client.read_resource(f"aidai://runs/{run_id}/ticket")).contents[0].text
            assert md == ticket["markdown"]
            templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
            assert templates == {"aidai://runs/{run_id}", "aidai://runs/{run_id}/ticket"}
            with pytest.raises(Exception, match="no run"):
                await client.read_resource("aidai://runs/nope")

            # knowledge: past incidents and the taxonomy
            similar = (await tool(client, "search_incidents", text=text, k=5))["incidents"]
            assert len(similar) == 5 and ECC in [p["label"] for p in similar]
            assert similar == sorted(similar, key=lambda p: -p["score"])
            node = await tool(client, "search_taxonomy", node=ECC)
            assert node["label"] == ECC and node["parent"] == "GPU.MEMORY" and "gpu_memory_errors" in node["checks"]
            matches = (await tool(client, "search_taxonomy", text="Xid 48: DBE (double bit error) ECC"))["matches"]
            assert matches[0]["matched"] == "signature" and any(m["label"].startswith("GPU.MEMORY") for m in matches)
            assert "did you mean" in await refused(client, "search_taxonomy", node="UNCORRECTABLE_EC")

        # the run is a run of `aidai serve` on the same data dir: its store holds it, done, as the page shows it
        store = RunStore(server_dir(ServerConfig(data_dir=str(data))) / "server.sqlite")
        try:
            saved = store.get(run_id)
            assert saved is not None and saved["status"] == "done" and saved["created_by"] == "casey"
        finally:
            store.close()
        assert (data / "runs" / f"{run_id}.audit.jsonl").is_file()

    asyncio.run(main())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def http_server(data: Path, kb: Path, spec: str | tuple[str, ...], tmp_path: Path, *extra: str) -> Iterator[str]:
    """`aidai mcp --transport http` in a child process on a free loopback port; yields the endpoint URL."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"vera viewer {VIEWER_TOKEN}\notto operator {OPERATOR_TOKEN}\n")
    port = free_port()
    log = (tmp_path / "mcp-http.log").open("wb")
    specs = (spec,) if isinstance(spec, str) else spec
    args = mcp_args(data, kb, *specs, extra=("--transport", "http", "--port", str(port), "--tokens", str(tokens),
                                             *extra))
    child = subprocess.Popen([sys.executable, *args], cwd=REPO, env={**os.environ, **child_env()}, stdout=log,
                             stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:  # ready when it answers HTTP (a 401: no token)
            assert child.poll() is None, (tmp_path / "mcp-http.log").read_text()
            try:
                if httpx.post(f"http://127.0.0.1:{port}/mcp", timeout=5).status_code == 401:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the MCP server did not start"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(child, grace_s=20)
        log.close()


def http_client(url: str, http: httpx2.AsyncClient) -> Client:
    return Client(streamable_http_client(url, http_client=http), read_timeout_seconds=120)


def bearer(token: str) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=300))


def test_http_tokens_roles_and_operator_approval(data: Path, tiny_kb: Path, ecc: tuple[str, str],
                                                 nan: tuple[str, str], tmp_path: Path) -> None:
    spec, _ = ecc
    nan_spec, text = nan
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}}

    with http_server(data, tiny_kb, (spec, nan_spec), tmp_path, "--allow-active") as url:
        # no token, a wrong token: 401 before any MCP message is read
        headers = {"Accept": "application/json, text/event-stream"}
        missing = httpx.post(url, json=initialize, headers=headers, timeout=10)
        wrong = httpx.post(url, json=initialize, headers=headers | {"Authorization": "Bearer not-a-token-at-all"},
                           timeout=10)
        assert (missing.status_code, wrong.status_code) == (401, 401)
        assert missing.headers["www-authenticate"].lower().startswith("bearer")

        async def main() -> None:
            async with bearer("not-a-token-at-all") as http:
                with pytest.raises(Exception):  # noqa: B017 (the SDK reports the 401 as its transport error)
                    async with http_client(url, http) as client:
                        await client.list_tools()

            async with bearer(VIEWER_TOKEN) as v_http, bearer(OPERATOR_TOKEN) as o_http, \
                    http_client(url, v_http) as viewer, http_client(url, o_http) as operator:
                assert (await tool(viewer, "server_info"))["caller"] == {"name": "vera", "role": "viewer"}
                assert (await tool(operator, "server_info"))["caller"] == {"name": "otto", "role": "operator"}
                assert {t.name for t in (await viewer.list_tools()).tools} == TOOLS

                # an active check: a viewer may not, an operator must say so, then it runs and is audited
                assert "is a viewer" in await refused(viewer, "run_checks", hosts=[spec], checks=["dcgm_diag"],
                                                      approve_active=True)
                assert "approve_active=true" in await refused(operator, "run_checks", hosts=[spec],
                                                              checks=["dcgm_diag"])
                ran = await tool(operator, "run_checks", hosts=[spec], checks=["dcgm_diag"], approve_active=True)
                assert ran["results"][0]["tier"] == "active" and ran["results"][0]["verdict"] == "FAIL"
                audit, _ = read_audit(data / "runs" / f"{ran['audit_id']}.audit.jsonl")
                approval = next(e for e in audit if e["event"] == "approval")
                assert (approval["check"], approval["by"], approval["approved"]) == ("dcgm_diag", "otto", True)
                assert any(e["event"] == "check" and e["check"] == "dcgm_diag" and e["executed"] for e in audit)
                assert "is a viewer" in await refused(viewer, "start_diagnosis", incident=text, hosts=[nan_spec],
                                                      approval="all")

                # a viewer's diagnosis stops for approval: the viewer cannot approve, the operator declines
                started = await tool(viewer, "start_diagnosis", incident=text, hosts=[nan_spec], feedback_rounds=0)
                assert started["approval"] == "ask"
                run_id = started["id"]
                out, _ = await follow(viewer, run_id, until=lambda out: out["waiting_for"] == "approval")
                asked = out["run"]["pending"]
                assert asked["kind"] == "approval" and asked["node"] == ECC
                assert all({"id", "suggested", "why"} <= set(c) for c in asked["checks"])
                check_ids = {c["id"] for c in asked["checks"]}
                assert "exists once it is done" in await refused(viewer, "get_ticket", run_id=run_id)
                assert "is a viewer" in await refused(viewer, "approve", run_id=run_id,
                                                      checks=dict.fromkeys(check_ids, True))
                assert "were not asked for" in await refused(operator, "approve", run_id=run_id,
                                                             checks={"rm_rf": True})
                decided = await tool(operator, "approve", run_id=run_id, checks=dict.fromkeys(check_ids, False))
                assert (decided["decision"], decided["by"]) == ("declined", "otto")
                assert "waits for no answer" in await refused(operator, "approve", run_id=run_id, checks={})
                out, after = await follow(viewer, run_id, after=out["cursor"])
                assert out["run"]["result"]["resolved"] and out["run"]["result"]["root_causes"][0]["level"]
                answered = [e for e in after if e["type"] == "answered"]
                assert [(e["kind"], e["by"], e["decision"]) for e in answered] == [("approval", "otto", "declined")]
                assert out["run"]["approvals"][0]["by"] == "otto"
                ticket = (await tool(viewer, "get_ticket", run_id=run_id))["markdown"]
                assert out["run"]["result"]["root_causes"][0]["label"] in ticket
                assert "`approve` tool" in ticket  # worded for an MCP reader

        asyncio.run(main())


def test_bad_setups_are_refused_with_exit_2(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "agent.cli.main", "mcp", "--data-dir", str(tmp_path), *args],
                              cwd=REPO, env={**os.environ, **child_env()}, capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)

    exposed = run("--transport", "http", "--host", "0.0.0.0")
    assert exposed.returncode == 2 and "needs bearer tokens" in exposed.stderr
    tokens = tmp_path / "tokens"
    tokens.write_text("vera viewer a-long-enough-token-1\n")
    assert run("--tokens", str(tokens)).returncode == 2  # tokens mean nothing over stdio: said, not ignored
    bad_target = run("--target", "sim:/nonexistent/dir")
    assert bad_target.returncode == 2 and "error:" in bad_target.stderr



def test_one_answer_wins_across_two_stores_on_one_file(tmp_path: Path) -> None:
    """`aidai serve` and `aidai mcp` on one data dir are two processes with their own connection to server.sqlite:
    answers racing from both to the same question still have exactly one winner."""
    from concurrent.futures import ThreadPoolExecutor

    from agent.server.store import RunConflict

    path = tmp_path / "server.sqlite"
    stores = [RunStore(path), RunStore(path)]
    try:
        for round_ in range(20):
            run_id = f"r{round_}"
            stores[0].create(run_id, title="t", hosts=["local"], created_by="x", options={}, incident={})
            stores[0].update(run_id, status="waiting", pending={"kind": "approval", "checks": []})

            def take(index: int, run_id: str = run_id) -> bool:
                try:
                    stores[index % 2].take_answer(run_id, "approval", {"by": index})
                except RunConflict:
                    return False
                return True

            with ThreadPoolExecutor(max_workers=8) as pool:
                won = list(pool.map(take, range(8)))
            assert sum(won) == 1, won
            assert stores[1].get(run_id)["status"] == "queued"  # type: ignore[index]
    finally:
        for store in stores:
            store.close()


def test_stdio_viewer_answers_the_question_of_a_run_without_a_root_cause(data: Path, tiny_kb: Path,
                                                                          tmp_path: Path) -> None:
    """A slow GPU gives only weak evidence: the run asks what else is seen, a viewer answers over stdio, and the
    answer leads the run to the straggler (the run's `feedback` question, as the page asks it)."""
    spec = f"sim:{create_scenario(tmp_path / 'slow', [{'fault': 'gpu.slow', 'gpu': 3}], []).root}"

    async def main() -> None:
        async with stdio(data, tiny_kb, spec, extra=("--role", "viewer", "--name", "vic", "--no-history")) as client:
            assert (await tool(client, "server_info"))["caller"] == {"name": "vic", "role": "viewer"}
            started = await tool(client, "start_diagnosis", incident="our job stopped, no idea why, the log is empty",
                                 hosts=[spec], feedback_rounds=1)
            out, _ = await follow(client, started["id"], until=lambda out: out["waiting_for"] == "feedback")
            pending = out["run"]["pending"]
            assert pending["kind"] == "feedback" and pending["question"] and pending["hypotheses"]
            assert "is a viewer" in await refused(client, "approve", run_id=started["id"], checks={})
            answered = await tool(client, "answer", run_id=started["id"],
                                  text="every step waits on GPU 3: it is a straggler, 20% slower than the other GPUs")
            assert answered == {"id": started["id"], "status": "queued"}
            out, events = await follow(client, started["id"], after=out["cursor"])
            assert [(e["kind"], e["by"]) for e in events if e["type"] == "answered"] == [("feedback", "vic")]
            assert out["run"]["result"]["resolved"] is True
            assert out["run"]["result"]["root_causes"][0]["label"] == "GPU.PERFORMANCE.SLOW_GPU_STRAGGLER"

    asyncio.run(main())
