"""Structured-output negotiation (agent/reasoning/structured.py) against the loopback stub, which refuses or ignores
each form in turn with the error bodies real servers send (tests/openai_stub.py REFUSALS)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from agent.audit_records import LlmFallbackRecord, LlmRecord
from agent.reasoning.openai_reasoner import OpenAIReasoner
from agent.reasoning.structured import ENDPOINTS, FORMS, EndpointForms, json_object_in, refuses_form
from tests.openai_stub import REFUSALS, OpenAIStub
from tests.test_openai_reasoner import CHILDREN, PARENT, SUMMARY, FakeReasoner, ranking

RANKED = ranking("GPU.BUS", "GPU.MEMORY", "GPU.THERMAL")
# which form each real refusal is about
REFUSED_FORM = {"llama-cpp-python": "json_schema", "llama-server-old": "json_schema", "azure-old-api": "json_schema",
                "ollama-no-tools": "tools", "openai-unknown-key": "json_object+schema", "lm-studio": "json_object",
                "tgi": "json_object"}
IN_TURN = ["llama-cpp-python", "ollama-no-tools", "openai-unknown-key", "lm-studio"]  # one per form but text


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    ENDPOINTS.forget()
    with OpenAIStub() as server:
        server.responder = lambda request: json.dumps(RANKED)
        yield server
    ENDPOINTS.forget()


def reasoner(stub: OpenAIStub, forms: EndpointForms | None = None, model: str = "stub-model") -> OpenAIReasoner:
    return OpenAIReasoner(FakeReasoner(), model, stub.base_url, api_key="k", timeout_s=10, forms=forms)


def rank(r: OpenAIReasoner) -> list[str]:
    return [c.label for c in r.rank_children(SUMMARY, PARENT, CHILDREN, [], {})]


# -- negotiation against real refusals --------------------------------------------------------------------------

@pytest.mark.parametrize("refused", range(len(FORMS)), ids=[f"answers-in-{f}" for f in FORMS])
def test_each_refused_form_moves_to_the_next_without_a_fallback(stub: OpenAIStub, refused: int) -> None:
    for name in IN_TURN[:refused]:
        stub.refuse(REFUSED_FORM[name], *REFUSALS[name])
    r = reasoner(stub)
    assert rank(r) == ["GPU.BUS", "GPU.MEMORY", "GPU.THERMAL"]
    assert stub.forms() == list(FORMS[:refused + 1])
    assert (r.usage.calls, r.usage.fallbacks, r.usage.fallback_causes) == (refused + 1, 0, {})
    assert r.form == FORMS[refused]
    key = (stub.base_url, "stub-model")
    assert list(ENDPOINTS.refusals.get(key, {})) == list(FORMS[:refused])
    assert ENDPOINTS.accepted[key] == FORMS[refused]


@pytest.mark.parametrize("name", list(REFUSED_FORM))
def test_every_real_refusal_is_read_as_a_refused_form(stub: OpenAIStub, name: str) -> None:
    form = REFUSED_FORM[name]
    status, body = REFUSALS[name]
    start = FORMS.index(form)
    r = reasoner(stub, EndpointForms())
    for earlier in FORMS[:start]:  # bring the reasoner to the refused form through refusals it already knows
        r.chat.forms.refuse(r.chat.key, earlier, "known")
    stub.refuse(form, status, body)
    assert rank(r) == ["GPU.BUS", "GPU.MEMORY", "GPU.THERMAL"] and r.usage.fallbacks == 0
    assert stub.forms() == [form, FORMS[start + 1]]
    assert f"HTTP {status}" in r.chat.forms.refusals[r.chat.key][form]


def test_the_form_that_worked_is_remembered_for_the_endpoint_and_model(stub: OpenAIStub) -> None:
    stub.refuse("json_schema", *REFUSALS["llama-cpp-python"])
    rank(reasoner(stub))
    second = reasoner(stub)  # a later diagnosis in the same process
    rank(second)
    assert stub.forms() == ["json_schema", "tools", "tools"] and second.usage.calls == 1
    other = reasoner(stub, model="another-model")  # another model behind the same URL is asked afresh
    rank(other)
    assert stub.forms()[-2:] == ["json_schema", "tools"]


def test_request_shapes_of_each_form(stub: OpenAIStub) -> None:
    for name in IN_TURN:
        stub.refuse(REFUSED_FORM[name], *REFUSALS[name])
    r = reasoner(stub)
    rank(r)
    json_schema, tools, with_schema, json_object, text = stub.requests
    schema = json_schema["response_format"]["json_schema"]["schema"]
    assert json_schema["response_format"]["json_schema"]["strict"] is True and "tools" not in json_schema
    assert '"enum":["GPU.MEMORY","GPU.BUS","GPU.THERMAL"]' not in stub.prompt(0)  # the server holds the schema
    assert tools["tools"] == [{"type": "function", "function": {
        "name": "rank_children", "description": tools["tools"][0]["function"]["description"], "parameters": schema}}]
    assert tools["tool_choice"] == {"type": "function", "function": {"name": "rank_children"}}
    assert "response_format" not in tools
    assert with_schema["response_format"] == {"type": "json_object", "schema": schema}
    assert json_object["response_format"] == {"type": "json_object"}
    assert "response_format" not in text and "tools" not in text  # some servers refuse even {type: text}
    for i in range(1, 5):  # every form but json_schema shows the schema to the model
        assert '"enum":["GPU.MEMORY","GPU.BUS","GPU.THERMAL"]' in stub.prompt(i)


def test_plain_text_answer_with_prose_around_the_json_is_used(stub: OpenAIStub) -> None:
    stub.responder = lambda request: "Here is my ranking {as asked}:\n```json\n" + json.dumps(RANKED) + "\n```\nDone."
    r = reasoner(stub, EndpointForms(only="text"))
    assert rank(r) == ["GPU.BUS", "GPU.MEMORY", "GPU.THERMAL"] and r.usage.fallbacks == 0


# -- servers that take a form and ignore it ----------------------------------------------------------------------

@pytest.mark.parametrize("form", ["json_schema", "tools", "json_object+schema", "json_object"])
def test_a_form_answered_with_prose_is_taken_as_ignored(stub: OpenAIStub, form: str) -> None:
    r = reasoner(stub)
    for earlier in FORMS[:FORMS.index(form)]:
        r.chat.forms.refuse(r.chat.key, earlier, "known")
    stub.ignore(form)  # prose for json_schema; for tools, prose and no tool call
    assert rank(r) == ["GPU.BUS", "GPU.MEMORY", "GPU.THERMAL"] and r.usage.fallbacks == 0
    following = FORMS[FORMS.index(form) + 1]
    assert stub.forms() == [form, following] and r.form == following
    assert "ignored" in r.chat.forms.refusals[r.chat.key][form]


def test_an_answer_outside_an_enforced_schema_means_the_server_ignored_it(stub: OpenAIStub) -> None:
    # llama.cpp's llama-server issue 24097: json_schema taken with HTTP 200 and not enforced
    stub.reply_json(ranking("GPU.BUS", "GPU.INVENTED"))
    stub.reply_json(RANKED)
    r = reasoner(stub)
    assert rank(r) == ["GPU.BUS", "GPU.MEMORY", "GPU.THERMAL"] and r.usage.fallbacks == 0
    assert stub.forms() == ["json_schema", "tools"]
    assert "did not keep the json_schema schema" in r.chat.forms.refusals[r.chat.key]["json_schema"]


def test_model_errors_stay_in_the_form_and_count_as_model_fallbacks(stub: OpenAIStub) -> None:
    stub.refuse("json_schema", *REFUSALS["llama-cpp-python"])
    stub.reply_json(ranking("GPU.BUS", "GPU.BUS", "GPU.MEMORY"))  # inside the schema, outside the offer
    stub.reply_json(ranking("GPU.THERMAL", "GPU.MEMORY", "GPU.THERMAL"))
    r = reasoner(stub)
    assert [c.why for c in r.rank_children(SUMMARY, PARENT, CHILDREN, [], {})] == ["fallback"] * 3
    assert stub.forms() == ["json_schema", "tools", "tools"]
    assert r.usage.fallback_causes == {"model": 1} and r.usage.retries == 2


def test_a_pinned_form_that_is_refused_is_a_format_fallback(stub: OpenAIStub) -> None:
    stub.refuse("json_schema", *REFUSALS["azure-old-api"])
    r = reasoner(stub, EndpointForms(only="json_schema"))
    assert [c.why for c in r.rank_children(SUMMARY, PARENT, CHILDREN, [], {})] == ["fallback"] * 3
    assert r.usage.fallback_causes == {"format": 1} and r.usage.calls == 1


def test_parameter_refusals_are_adapted_without_moving_the_form(stub: OpenAIStub) -> None:
    stub.reply_status(400, "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                           "'max_completion_tokens' instead.")
    stub.reply_status(400, "Unsupported value: 'temperature' does not support 0 with this model.")
    stub.reply_json(RANKED)
    r = reasoner(stub)
    assert rank(r) == ["GPU.BUS", "GPU.MEMORY", "GPU.THERMAL"] and r.usage.fallbacks == 0
    assert stub.forms() == ["json_schema"] * 3
    last = stub.requests[-1]
    assert "max_tokens" not in last and last["max_completion_tokens"] == 600 and "temperature" not in last


def test_budget_fallbacks_have_their_own_cause(stub: OpenAIStub) -> None:
    r = reasoner(stub)
    r.token_budget = 0
    assert [c.why for c in r.rank_children(SUMMARY, PARENT, CHILDREN, [], {})] == ["fallback"] * 3
    assert r.usage.fallback_causes == {"budget": 1} and not stub.requests


def test_audit_records_name_the_form_and_each_fallback_its_cause(stub: OpenAIStub) -> None:
    stub.refuse("json_schema", *REFUSALS["llama-cpp-python"])
    records: list[LlmRecord | LlmFallbackRecord] = []
    r = reasoner(stub)
    r.on_call = records.append
    rank(r)
    r.token_budget = 0
    rank(r)
    lines = [record.line() for record in records]
    assert [(e["event"], e.get("format"), "error" in e) for e in lines] == [
        ("llm", "json_schema", True), ("llm", "tools", False), ("llm_fallback", None, False)]
    assert lines[-1]["cause"] == "budget" and lines[-1]["answered_by"] == "fake"
    assert "Input should be 'text' or 'json_object'" in lines[0]["error"]


# -- the pieces ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("form", "status", "text", "refused"), [
    ("json_schema", 400, "This model's maximum context length is 4096 tokens; your messages resulted in 5000", False),
    ("json_schema", 500, "CUDA error: out of memory", False),
    ("tools", 401, "Incorrect API key provided: the key has no access to tools", False),
    ("tools", 429, "Rate limit reached for function calls", False),
    ("json_schema", 404, "The model `gpt-5-nano` does not exist or you do not have access to it.", False),
    ("text", 400, "response_format is not supported", False),  # nothing is left to refuse in plain text
    ("json_schema", 422, "Invalid schema for response_format 'rank_children': 'additionalProperties' is required",
     True),
])
def test_refusals_are_told_from_other_errors(form: str, status: int, text: str, refused: bool) -> None:
    assert refuses_form(form, status, text) is refused


@pytest.mark.parametrize(("text", "want"), [
    ('{"a": 1}', {"a": 1}),
    ('```json\n{"a": {"b": [1, 2]}}\n```', {"a": {"b": [1, 2]}}),
    ('I think {this} is it: {"a": "x}y"} and {"b": 2}', {"a": "x}y"}),
    ('{"a": "line one\nline two"}', {"a": "line one\nline two"}),
])
def test_json_object_is_found_in_free_text(text: str, want: dict[str, Any]) -> None:
    assert json_object_in(text) == want


@pytest.mark.parametrize("text", ["", "   ", "no json here", "[1, 2]", '{"a": '])
def test_no_json_object_is_an_error(text: str) -> None:
    with pytest.raises(ValueError):
        json_object_in(text)
