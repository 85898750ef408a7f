"""`aidai serve`'s /metrics: prometheus-client's exposition, read with prometheus-client's own parser and scraped by
a real Prometheus (Debian's binary on loopback) with a bearer token, as a fleet's scrape config would.

One diagnosis of the simulated ECC host (pipeline 1 off, so no embedding model is loaded for it) fills the counters:
a run started and finished resolved, verdicts per host and check, check durations; a second run stops at an
approval and shows as waiting. The server is configured with a Prometheus that is not there: each run's pre-triage
says so and the diagnosis goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.server.client import Client
from agent.server.config import ServerConfig
from agent.sim.scenario import find_record, scenario_from_record
from tests.chroma_server import free_port
from tests.prometheus_server import query, running_prometheus, wait_until
from tests.test_server import EXAMPLES, FOB_INCIDENT, OPERATOR_TOKEN, TOKENS, VIEWER_TOKEN, serving

ABSENT_PROMETHEUS = f"http://127.0.0.1:{free_port()}"


@pytest.fixture(scope="module")
def ecc_spec(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sim:{scenario_from_record(tmp_path_factory.mktemp('metrics-sim') / 'ecc', EXAMPLES, 'demo-ecc').root}"


@pytest.fixture
def server(tmp_path: Path, tiny_kb: Path, ecc_spec: str) -> Iterator[str]:
    config = ServerConfig(data_dir=str(tmp_path / "data"), targets=[ecc_spec], kb_dir=str(tiny_kb), workers=2,
                          tokens=dict(TOKENS), history=False, prometheus=ABSENT_PROMETHEUS)
    with serving(config) as url:
        yield url


def samples(url: str, token: str = VIEWER_TOKEN) -> dict[str, list]:
    answer = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def eventually(what: str, condition: Callable[[], bool], within_s: float = 240.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {within_s:.0f} s: {what}"
        time.sleep(0.2)


def value(found: dict[str, list], name: str, **labels: str) -> float:
    return sum(s.value for s in found.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items()))


def test_metrics_need_a_token_like_the_api(server: str) -> None:
    assert httpx.get(f"{server}/metrics", timeout=10).status_code == 401
    bad = httpx.get(f"{server}/metrics", headers={"Authorization": "Bearer not-a-token-at-all"}, timeout=10)
    assert bad.status_code == 401 and bad.headers["www-authenticate"] == "Bearer"
    found = samples(server)  # a viewer may read them
    assert value(found, "aidai_workers") == 2 and value(found, "aidai_runs_started_total") == 0
    assert value(found, "aidai_runs", status="done") == 0 and "/metrics" not in httpx.get(
        f"{server}/openapi.json", timeout=10).text


def test_runs_verdicts_durations_and_waiting_runs(server: str, ecc_spec: str, tmp_path: Path) -> None:
    record = find_record(EXAMPLES, "demo-ecc")
    with Client(server, token=OPERATOR_TOKEN) as client:
        run_id = client.start(record["description"], [ecc_spec], approval="none", feedback_rounds=0)
        events = client.wait(run_id, timeout=240)
        assert client.run(run_id)["result"]["resolved"] is True
        tools = {t["tool"]: t for e in events if e.type == "pretriage" for t in e.data["results"]}
        assert tools["prometheus"]["status"] == "error" and "cannot connect" in tools["prometheus"]["reason"]
        found = samples(server)
        assert value(found, "aidai_runs_started_total") == 1
        assert value(found, "aidai_runs_finished_total", status="done", resolved="true") == 1
        assert value(found, "aidai_runs", status="done") == 1 and value(found, "aidai_workers_busy") == 0
        assert value(found, "aidai_worker_queue") == 0
        host = "node-1"  # the demo-ecc record's one host
        assert value(found, "aidai_check_verdicts_total", host=host, check="xid_scan", verdict="FAIL") == 1
        assert value(found, "aidai_check_verdicts_total", host=host) >= 3
        assert value(found, "aidai_check_duration_seconds_count", check="xid_scan") == 1
        assert value(found, "aidai_run_duration_seconds_count") == 1
        assert value(found, "aidai_run_duration_seconds_sum") > 0

        waiting = client.start(FOB_INCIDENT, [ecc_spec], approval="ask", feedback_rounds=0)
        eventually("the run to wait for an approval", lambda: client.run(waiting)["status"] == "waiting")
        found = samples(server)
        assert value(found, "aidai_runs_waiting", waiting_for="approval") == 1
        assert value(found, "aidai_runs", status="waiting") == 1 and value(found, "aidai_runs_started_total") == 2


def test_a_real_prometheus_scrapes_it_with_a_bearer_token(server: str, tmp_path: Path) -> None:
    token_file = tmp_path / "aidai.token"
    token_file.write_text(VIEWER_TOKEN)
    target = server.removeprefix("http://")
    jobs = [{"job_name": "aidai", "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
             "static_configs": [{"targets": [target]}]}]
    with running_prometheus(tmp_path / "prometheus", jobs) as url:
        log = tmp_path / "prometheus" / "prometheus.log"
        wait_until("a scrape of aidai", lambda: bool(query(url, 'aidai_workers{job="aidai"}')), log)
        assert [float(s["value"][1]) for s in query(url, 'up{job="aidai"}')] == [1.0]
        statuses = {s["metric"]["status"] for s in query(url, "aidai_runs")}
        assert statuses == {"queued", "running", "waiting", "done", "failed"}


def test_a_run_may_not_ask_for_a_prometheus_the_server_lacks(tmp_path: Path, tiny_kb: Path, ecc_spec: str) -> None:
    config = ServerConfig(data_dir=str(tmp_path / "data"), targets=[ecc_spec], kb_dir=str(tiny_kb), history=False)
    with serving(config) as url, Client(url) as client:
        answer = client.http.post("/api/runs", json={"incident": "x failed", "hosts": [ecc_spec], "prometheus": True})
        assert answer.status_code == 400 and "no Prometheus configured" in answer.json()["detail"]
        assert client.http.get("/api/runs").json()["runs"] == []
