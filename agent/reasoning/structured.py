"""Structured output from any OpenAI-compatible endpoint: ask in the strongest form the server accepts.

Servers accept structured output in different forms, so each question is asked in the first form of FORMS that
the endpoint (base URL + model) has not refused yet in this process:

  json_schema         response_format {type: json_schema, strict}: OpenAI, Azure (API >= 2024-08-01-preview),
                      vLLM, SGLang, LM Studio, Ollama, llama.cpp's llama-server
  tools               one function whose parameters are the schema, tool_choice forcing it; the answer is the tool
                      call's arguments: llama-cpp-python (a grammar from the schema), TGI, vLLM's named tool choice
  json_object+schema  response_format {type: json_object, schema}: llama-cpp-python turns the `schema` key into
                      a grammar; other servers ignore it or refuse it
  json_object         response_format {type: json_object} (JSON mode), the schema in the prompt only
  text                no response_format; the schema in the prompt, the JSON object taken from free text

Three kinds of failure are told apart, because each calls for something else:
  - the server refused the FORM (an HTTP error whose body names response_format, json_schema, tools ...) or
    ignored it (prose, no tool call, an answer outside the schema it was asked to enforce): the next form is tried
    at once and the endpoint is remembered to refuse it;
  - the MODEL answered badly (no JSON, truncated, outside the offer): asked again once in the same form;
  - the ENDPOINT failed (connection, timeout, other HTTP errors): asked again once; after DOWN_AFTER failures in
    a row it is skipped for DOWN_FOR_S seconds.
Whoever asks falls back when `ask` returns no value, and counts the fallback under the cause it returns.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import jsonschema
import openai
from openai.types.chat import ChatCompletion

from agent.audit_records import LlmRecord
from agent.reasoning.base import Usage

log = logging.getLogger(__name__)
T = TypeVar("T")

Form = Literal["json_schema", "tools", "json_object+schema", "json_object", "text"]
FORMS: tuple[Form, ...] = ("json_schema", "tools", "json_object+schema", "json_object", "text")
ENFORCING: frozenset[str] = frozenset({"json_schema", "tools"})  # the server itself keeps the answer in the schema
FallbackCause = Literal["format", "model", "endpoint", "budget"]
DOWN_AFTER = 4  # consecutive endpoint failures (two questions in a row) before the endpoint is skipped for a while
DOWN_FOR_S = 300.0
MAX_ERRORS = 200
TRIES = 2  # tries at one question for model and endpoint failures; refused forms do not count
# what an error body says when the server refuses a form (real bodies: llama-cpp-python's 500 "Input should be
# 'text' or 'json_object'", LM Studio's "'response_format.type' must be 'json_schema' or 'text'", Azure's
# "response_format value as json_schema is enabled only for api versions ...", Ollama's "... does not support
# tools", TGI's "response_format: missing field `value`", vLLM's "... not supported by xgrammar")
FORM_WORDS: dict[str, tuple[str, ...]] = {
    "json_schema": ("response_format", "json_schema", "schema", "grammar", "guided", "structured output"),
    "tools": ("tool", "function"),
    "json_object+schema": ("response_format", "json_object", "schema", "grammar", "extra", "unrecognized",
                           "unknown field"),
    "json_object": ("response_format", "json_object", "json mode", "grammar"),
    "text": (),
}
NEVER_FORM = (401, 403, 404, 408, 429)  # auth, unknown model or path, rate limits: never about the form


class FormIgnored(ValueError):
    """The server took the request but not its form: prose in JSON mode, no tool call, a schema it did not keep."""


@dataclass
class Outcome(Generic[T]):
    """One question's result: the checked value, or None and why (the caller falls back and counts the cause)."""

    value: T | None
    form: str
    cause: FallbackCause | None = None


@dataclass
class EndpointForms:
    """Per endpoint (base URL + model): the strongest form not refused yet, and why the others were refused.

    One instance lives for the process (ENDPOINTS), so a run learns an endpoint's forms once. `only` pins one form
    and never moves on (the probe tries each form on its own).
    """

    only: Form | None = None
    _next: dict[tuple[str, str], int] = field(default_factory=dict)
    refusals: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    accepted: dict[tuple[str, str], str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def current(self, key: tuple[str, str]) -> Form:
        if self.only is not None:
            return self.only
        with self._lock:
            return FORMS[self._next.get(key, 0)]

    def refuse(self, key: tuple[str, str], form: str, reason: str) -> Form | None:
        """Record that the endpoint refused `form`; the next form to try, or None when none is left."""
        with self._lock:
            self.refusals.setdefault(key, {})[form] = reason[:300]
            if self.only is not None or form not in FORMS:
                return None
            index = max(self._next.get(key, 0), FORMS.index(form) + 1)
            if index >= len(FORMS):
                return None
            self._next[key] = index
            return FORMS[index]

    def accept(self, key: tuple[str, str], form: str) -> None:
        with self._lock:
            self.accepted[key] = form

    def forget(self) -> None:
        with self._lock:
            self._next.clear()
            self.refusals.clear()
            self.accepted.clear()


ENDPOINTS = EndpointForms()


def form_request(form: str, task: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The request fields that ask for `form` (none for plain text: some servers refuse response_format text)."""
    if form == "json_schema":
        return {"response_format": {"type": "json_schema", "json_schema": {"name": task, "strict": True,
                                                                           "schema": schema}}}
    if form == "tools":
        return {"tools": [{"type": "function", "function": {
                    "name": task, "description": "Give the answer; the arguments are the whole answer.",
                    "parameters": schema}}],
                "tool_choice": {"type": "function", "function": {"name": task}}}
    if form == "json_object+schema":
        return {"response_format": {"type": "json_object", "schema": schema}}
    if form == "json_object":
        return {"response_format": {"type": "json_object"}}
    return {}


def schema_in_prompt(form: str) -> bool:
    """json_schema hands the schema to the server; every other form also shows it to the model."""
    return form != "json_schema"


def refuses_form(form: str, status: int, text: str) -> bool:
    """Does an HTTP error say that the server does not take this form?"""
    if status in NEVER_FORM or status < 400:
        return False
    low = text.lower()
    return any(word in low for word in FORM_WORDS.get(form, ()))


def json_object_in(text: str | None) -> Any:
    """The first JSON object in a reply: whole, inside code fences, or within prose."""
    if not text or not text.strip():
        raise ValueError("empty answer")
    text = text.strip()
    try:
        whole = json.loads(text, strict=False)  # raw newlines inside strings are common and harmless
    except ValueError:
        pass
    else:
        if isinstance(whole, dict):
            return whole
    decoder = json.JSONDecoder(strict=False)
    start, tried = text.find("{"), 0
    while start >= 0 and tried < 64:
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            start, tried = text.find("{", start + 1), tried + 1
            continue
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    raise ValueError(f"no JSON object in answer: {text[:80]!r}")


def answer_data(form: str, response: ChatCompletion, schema: dict[str, Any]) -> Any:
    """The answer's JSON, checked against the schema; FormIgnored when the server did not keep the form."""
    if not response.choices:
        raise ValueError("no choices in the response")
    choice = response.choices[0]
    message = choice.message
    truncated = choice.finish_reason == "length"
    if form == "tools":
        calls = message.tool_calls or []
        if not calls:
            raise FormIgnored(f"no tool call in the answer (finish_reason {choice.finish_reason}): "
                              f"{(message.content or '')[:80]!r}")
        function = getattr(calls[0], "function", None)
        text = function.arguments if function is not None else None
    else:
        text = message.content
    if isinstance(text, dict):  # a server that sends the arguments as an object, not as JSON text
        text = json.dumps(text)
    if form != "text" and not truncated and text and text.strip() and "{" not in text:
        raise FormIgnored(f"prose instead of JSON in the {form} form: {text.strip()[:80]!r}")
    data = json_object_in(text)
    if not isinstance(data, dict):
        raise ValueError("the answer is not a JSON object")
    if form in ENFORCING and not truncated:
        # a server that enforces the form cannot answer outside the schema: one that did, ignored it. In the other
        # forms the caller's pydantic model and offer check judge the answer (missing lists default to empty)
        try:
            jsonschema.validate(data, schema)
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "answer"
            raise FormIgnored(f"the server did not keep the {form} schema ({where}: {exc.message[:160]})") from exc
    return data


def error_text(exc: openai.APIStatusError) -> str:
    """The message and body of an HTTP error, as one string to read the refused form in."""
    body = exc.body if isinstance(exc.body, str) else json.dumps(exc.body, default=str) if exc.body else ""
    return f"{exc.message} {body}".strip()


class StructuredChat:
    """Structured questions to one endpoint: form negotiation, two tries, accounting in `usage`.

    `messages(form)` builds the chat messages for a form (with the schema in the prompt where the form needs it),
    `check(data)` turns the schema-valid JSON into the caller's value or raises ValueError (an answer outside the
    offer). `on_call` receives one audit record per request: `record` plus form, prompt hash, tokens or error.
    """

    def __init__(self, client: openai.OpenAI, model: str, base_url: str | None, usage: Usage, *,
                 forms: EndpointForms | None = None, timeout_s: float = 60, name: str = "openai reasoner") -> None:
        self.client = client
        self.model = model
        self.key = (base_url or str(client.base_url), model)
        self.usage = usage
        self.forms = forms if forms is not None else ENDPOINTS
        self.timeout_s = timeout_s
        self.name = name
        self.on_call: Callable[[LlmRecord], None] | None = None
        self._max_key = "max_tokens"
        self._temperature: float | None = 0.0
        self._failures = 0
        self._down_until = 0.0

    @property
    def form(self) -> Form:
        """The form the next question is asked in."""
        return self.forms.current(self.key)

    @property
    def down(self) -> bool:
        return time.monotonic() < self._down_until

    def error(self, task: str, message: str) -> None:
        log.info("%s %s: %s", self.name, task, message)
        if len(self.usage.errors) < MAX_ERRORS:
            self.usage.errors.append(f"{task}: {message[:300]}")

    def ask(self, task: str, messages: Callable[[str], list[dict[str, Any]]], schema: dict[str, Any],
            max_tokens: int, check: Callable[[Any], T], record: dict[str, Any] | None = None) -> Outcome[T]:
        if self.down:
            self.error(task, "endpoint skipped after repeated API failures")
            return Outcome(None, self.form, "endpoint")
        tries, first = 0, True
        cause: FallbackCause = "model"
        while True:
            form = self.form
            if not first:
                self.usage.retries += 1
            first = False
            try:
                response = self._create(task, form, messages(form), schema, max_tokens, record or {})
            except openai.APIStatusError as exc:
                status, text = exc.status_code, error_text(exc)
                self.error(task, f"HTTP {status} in the {form} form: {exc.message}")
                if self._adapt(status, text):
                    continue
                if refuses_form(form, status, text):
                    if self._refused(task, form, f"HTTP {status}: {exc.message}") is None:
                        return Outcome(None, form, "format")
                    continue
                cause = "endpoint"
                self._endpoint_failure(task)
            except openai.APITimeoutError:
                self.error(task, f"timeout after {self.timeout_s:g}s")
                cause = "endpoint"
                self._endpoint_failure(task)
            except openai.OpenAIError as exc:  # connection refused, DNS, TLS ...
                self.error(task, f"{type(exc).__name__}: {exc}")
                cause = "endpoint"
                self._endpoint_failure(task)
            else:
                self._failures = 0
                if response.usage is not None:
                    self.usage.prompt_tokens += response.usage.prompt_tokens or 0
                    self.usage.completion_tokens += response.usage.completion_tokens or 0
                try:
                    value = check(answer_data(form, response, schema))
                except FormIgnored as exc:
                    self.error(task, f"form ignored: {exc}")
                    if self._refused(task, form, f"ignored: {exc}") is None:
                        return Outcome(None, form, "format")
                    continue
                except ValueError as exc:  # JSON and pydantic errors, answers outside the offer
                    self.error(task, f"invalid answer ({form}): {str(exc)[:240]}")
                    cause = "model"
                else:
                    self.forms.accept(self.key, form)
                    return Outcome(value, form)
            tries += 1
            if tries >= TRIES:
                return Outcome(None, form, cause)

    def _create(self, task: str, form: str, messages: list[dict[str, Any]], schema: dict[str, Any],
                max_tokens: int, record: dict[str, Any]) -> ChatCompletion:
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, self._max_key: max_tokens,
                                  **form_request(form, task, schema)}
        if self._temperature is not None:
            kwargs["temperature"] = self._temperature
        self.usage.calls += 1
        request = {**record, "task": task, "model": self.model, "format": form,
                   "prompt_sha256": hashlib.sha256(str(messages[-1]["content"]).encode()).hexdigest()}
        try:
            response: ChatCompletion = self.client.chat.completions.create(**kwargs)
        except openai.OpenAIError as exc:
            self._record(LlmRecord(**request, error=f"{type(exc).__name__}: {str(exc)[:200]}"))
            raise
        usage = response.usage
        self._record(LlmRecord(**request, prompt_tokens=usage.prompt_tokens if usage else None,
                               completion_tokens=usage.completion_tokens if usage else None))
        return response

    def _record(self, record: LlmRecord) -> None:
        if self.on_call is not None:
            self.on_call(record)

    def _adapt(self, status: int, text: str) -> bool:
        """Request parameters some servers refuse (each changed once): True when the question is worth asking again."""
        if status == 400 and "max_tokens" in text and self._max_key == "max_tokens":
            self._max_key = "max_completion_tokens"  # OpenAI reasoning models
            return True
        if status == 400 and "temperature" in text and self._temperature is not None:
            self._temperature = None
            return True
        return False

    def _refused(self, task: str, form: str, reason: str) -> Form | None:
        following = self.forms.refuse(self.key, form, reason)
        if following is None:
            self.error(task, f"the endpoint took none of the structured-output forms (last: {form})")
        else:
            log.info("%s %s: %s refused by %s, asking in the %s form", self.name, task, form, self.key[0], following)
        return following

    def _endpoint_failure(self, task: str) -> None:
        self._failures += 1
        if self._failures >= DOWN_AFTER:
            self._down_until = time.monotonic() + DOWN_FOR_S
            self.error(task, f"{self._failures} API failures in a row: the endpoint is skipped for the next "
                             f"{DOWN_FOR_S:g}s")
            self._failures = 0
