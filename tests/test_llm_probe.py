"""`aidai llm probe` against the loopback stub configured as different real servers, through Typer's CliRunner."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from agent.taxonomy import load_taxonomy
from tests.openai_stub import REFUSALS, OpenAIStub

runner = CliRunner(env={"COLUMNS": "220"})
AREAS = [c.label for c in load_taxonomy().children("")]


def ranking(request: dict[str, Any]) -> str:
    return json.dumps({"choices": [{"label": label, "keep": True, "why": "sample"} for label in AREAS]})


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        server.responder = ranking
        yield server


def probe(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["llm", "probe", *args])
    return result.exit_code, result.output


def test_probe_reports_each_form_and_the_one_a_diagnosis_would_use(stub: OpenAIStub) -> None:
    stub.refuse("json_schema", *REFUSALS["llama-cpp-python"])
    stub.ignore("json_object+schema")
    code, out = probe("--base-url", stub.base_url, "--model", "stub-model", "--json")
    assert code == 0, out
    got = json.loads(out)
    assert [(r["form"], r["status"]) for r in got["forms"]] == [
        ("json_schema", "refused"), ("tools", "ok"), ("json_object+schema", "ignored"), ("json_object", "ok"),
        ("text", "ok")]
    assert "Input should be 'text' or 'json_object'" in got["forms"][0]["detail"]
    assert "prose instead of JSON" in got["forms"][2]["detail"]
    tools = got["forms"][1]
    assert tools["calls"] == 1 and tools["prompt_tokens"] > 0 and tools["completion_tokens"] > 0
    assert tools["detail"].startswith("ranked " + ", ".join(AREAS[:3]))
    assert got["runs"] and got["form"] == "tools"
    assert "json_schema, json_object+schema not taken" in got["verdict"]
    assert set(stub.forms()) == {"json_schema", "tools", "json_object+schema", "json_object", "text"}
    # the question is the diagnosis's first: every top-level area of the shipped taxonomy is offered
    assert stub.schema(1)["properties"]["choices"]["items"]["properties"]["label"]["enum"] == AREAS


def test_probe_table_and_a_model_that_answers_badly(stub: OpenAIStub) -> None:
    stub.refuse("json_schema", *REFUSALS["azure-old-api"])
    stub.responder = lambda request: json.dumps(  # the right length, one area over and over: outside the offer
        {"choices": [{"label": AREAS[0], "keep": True, "why": "again"}] * len(AREAS)})
    code, out = probe("--base-url", stub.base_url, "--model", "stub-model", "--form", "json_schema", "--form", "tools")
    assert code == 0, out
    assert "json_schema" in out and "refused" in out and "invalid" in out
    assert "a diagnosis would run: its questions go in the tools form" in out
    assert "fall back to the offline reasoner" in out
    assert stub.forms() == ["json_schema", "tools", "tools"]  # an invalid answer is asked again once


def test_probe_of_a_server_that_takes_no_form_tried(stub: OpenAIStub) -> None:
    stub.refuse("json_schema", *REFUSALS["llama-server-old"])
    stub.refuse("tools", *REFUSALS["ollama-no-tools"])
    code, out = probe("--base-url", stub.base_url, "--model", "m", "--form", "json_schema", "--form", "tools",
                      "--json")
    got = json.loads(out)
    assert code == 1 and not got["runs"] and got["form"] is None
    assert [r["status"] for r in got["forms"]] == ["refused", "refused"]
    assert "took none of the forms tried" in got["verdict"]


def test_probe_of_an_endpoint_that_does_not_answer() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, out = probe("--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m", "--timeout", "2", "--json")
    got = json.loads(out)
    assert code == 1 and not got["runs"]
    assert got["forms"][0]["status"] == "error" and "Connection" in got["forms"][0]["detail"]
    assert {r["status"] for r in got["forms"][1:]} == {"not tried"}
    assert "did not answer" in got["verdict"]


@pytest.mark.parametrize("args", [
    ["--base-url", "127.0.0.1:8000", "--model", "m"],
    ["--base-url", "http://127.0.0.1:8000/v1", "--model", " "],
    ["--base-url", "http://127.0.0.1:8000/v1", "--model", "m", "--form", "xml"],
    ["--base-url", "http://127.0.0.1:8000/v1", "--model", "m", "--timeout", "0"],
])
def test_bad_options_exit_2_without_a_request(args: list[str]) -> None:
    code, out = probe(*args)
    assert code == 2, out
