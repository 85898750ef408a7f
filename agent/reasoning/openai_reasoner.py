"""The `openai` reasoner: any OpenAI-compatible endpoint (OpenAI, Azure OpenAI, vLLM, SGLang, Ollama, llama.cpp).

Every call asks for structured output whose choices are exactly the offered ones (JSON Schema enums of the child
labels, candidate ids, statuses), parses it with pydantic and checks it against the offer again. An invalid
answer or an API error is retried once; then the same method of the `fallback` reasoner answers. A server that
rejects `json_schema` (HTTP 400) is retried in json_object mode with the schema in the prompt (and in the request's
`schema` key, which llama-cpp-python turns into a grammar; a server that rejects that too gets plain json_object).
Safety: the model
ranks and explains but never confirms alone; check evidence decides, and nothing it writes becomes a command.
With a `redactor`, every user message is redacted before it is sent (secrets, hosts, IPs, users, paths) and the
placeholders in the answer are restored before it is checked; `token_budget` stops calling the model once the run
has used that many tokens (the fallback answers); `on_call` receives one audit record per request.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

import openai
from openai.types.chat import ChatCompletion

from agent.incident import Entities, Incident, IncidentSummary
from agent.models import CheckResult, Verdict
from agent.reasoning import prompts as P
from agent.reasoning.base import (
    Choice,
    Evidence,
    ExplorationHypothesis,
    KBPassage,
    LeafJudgement,
    NodeInfo,
    Observation,
    PastIncident,
    Reasoner,
    Usage,
)
from agent.redact import Redactor

log = logging.getLogger(__name__)
T = TypeVar("T")
PLACEHOLDER_KEY = "not-needed"  # local servers (vLLM, llama.cpp, Ollama) ignore the key; the SDK wants one
MAX_TOKENS = {"summarize": 700, "rerank_history": 200, "rank_children": 600, "validate_leaf": 250,
              "explore": 900, "conclude": 500}
FORMATS = ("json_schema", "json_object+schema", "json_object")  # response_format, most constrained first
DOWN_AFTER = 4  # consecutive API failures (two calls in a row) before the endpoint is skipped for a while
DOWN_FOR_S = 300.0
MAX_ERRORS = 200


def api_key_from_env() -> str | None:
    return os.environ.get("AIDAI_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY") or None


def _loads(content: str | None) -> Any:
    """The JSON object in a reply; tolerates the code fences weak models put around it in json_object mode."""
    if not content or not content.strip():
        raise ValueError("empty answer")
    text = content.strip()
    if not text.startswith("{"):
        start, end = text.find("{"), text.rfind("}")
        if start < 0 or end <= start:
            raise ValueError(f"no JSON object in answer: {text[:80]!r}")
        text = text[start:end + 1]
    return json.loads(text, strict=False)  # raw newlines inside strings are common and harmless


def _exactly_once(got: list[str], offered: list[str], what: str) -> None:
    unknown = sorted(set(got) - set(offered))
    missing = [x for x in offered if x not in got]
    dupes = sorted({x for x in got if got.count(x) > 1})
    if unknown or missing or dupes:
        raise ValueError(f"{what}: unknown {unknown}, missing {missing}, duplicated {dupes}")


def _grounded(value: str, text: str) -> bool:
    return bool(value.strip()) and value.strip().lower() in text


class OpenAIReasoner:
    """A Reasoner over an OpenAI-compatible chat endpoint, with `fallback` answering whatever the model cannot."""

    name = "openai"

    def __init__(self, fallback: Reasoner, model: str, base_url: str | None, api_key: str | None = None,
                 timeout_s: float = 60) -> None:
        self.fallback = fallback
        self.model = model
        self.base_url = base_url
        self.usage = Usage()
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or api_key_from_env() or PLACEHOLDER_KEY,
                                    timeout=timeout_s, max_retries=0)
        self.timeout_s = timeout_s
        self.format = 0  # index in FORMATS; moves on when the server rejects a response_format
        self._max_key = "max_tokens"
        self._temperature: float | None = 0.0
        self._api_failures = 0
        self._down_until = 0.0
        self.redactor: Redactor | None = None
        self.token_budget: int | None = None
        self.on_call: Callable[[dict[str, Any]], None] | None = None

    # -- plumbing ---------------------------------------------------------------------------------------------

    def _error(self, task: str, message: str) -> None:
        log.info("openai reasoner %s: %s", task, message)
        if len(self.usage.errors) < MAX_ERRORS:
            self.usage.errors.append(f"{task}: {message[:300]}")

    def _fall(self, task: str, method: Callable[..., T], *args: Any) -> T:
        self.usage.fallbacks += 1
        log.info("openai reasoner %s: answered by the %s reasoner", task, getattr(self.fallback, "name", "fallback"))
        return method(*args)

    @property
    def json_object(self) -> bool:
        return self.format > 0

    def _request(self, task: str, user: str, schema: dict[str, Any]) -> ChatCompletion:
        fmt: dict[str, Any] = {"type": "json_object"}
        if FORMATS[self.format] == "json_schema":
            fmt = {"type": "json_schema", "json_schema": {"name": task, "strict": True, "schema": schema}}
        elif FORMATS[self.format] == "json_object+schema":
            fmt["schema"] = schema
        kwargs: dict[str, Any] = {
            "model": self.model, "response_format": fmt, self._max_key: MAX_TOKENS[task],
            "messages": [{"role": "system", "content": P.SYSTEM}, {"role": "user", "content": user}]}
        if self._temperature is not None:
            kwargs["temperature"] = self._temperature
        if self.redactor is not None:
            data, schema_text = P.split_schema(user)
            kwargs["messages"][1]["content"] = self.redactor.text(data) + schema_text
        self.usage.calls += 1
        record: dict[str, Any] = {
            "event": "llm", "task": task, "model": self.model, "prompt_version": P.PROMPT_VERSION,
            "format": FORMATS[self.format], "redacted": self.redactor is not None,
            "prompt_sha256": hashlib.sha256(kwargs["messages"][1]["content"].encode()).hexdigest()}
        try:
            response: ChatCompletion = self.client.chat.completions.create(**kwargs)
        except openai.OpenAIError as exc:
            self._record({**record, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            raise
        usage = response.usage
        self._record({**record, "prompt_tokens": usage.prompt_tokens if usage else None,
                      "completion_tokens": usage.completion_tokens if usage else None})
        return response

    def _record(self, record: dict[str, Any]) -> None:
        if self.on_call is not None:
            self.on_call(record)

    def _ask(self, task: str, user: Callable[[dict[str, Any] | None], str], schema: dict[str, Any],
             check: Callable[[Any], T]) -> T | None:
        """Two tries at a valid answer; None when both failed (the caller falls back)."""
        if time.monotonic() < self._down_until:
            self._error(task, "endpoint skipped after repeated API failures")
            return None
        if self.token_budget is not None and self.usage.tokens >= self.token_budget:
            self._error(task, f"LLM token budget spent ({self.usage.tokens} of {self.token_budget} tokens)")
            return None
        for attempt in range(2):
            if attempt:
                self.usage.retries += 1
            try:
                response = self._request(task, user(schema if self.json_object else None), schema)
            except openai.APIStatusError as exc:
                message, status = str(exc.message), exc.status_code
                self._error(task, f"HTTP {status}: {message}")
                if status == 400 and "max_tokens" in message and self._max_key == "max_tokens":
                    self._max_key = "max_completion_tokens"  # OpenAI reasoning models
                elif status == 400 and "temperature" in message and self._temperature is not None:
                    self._temperature = None
                elif self.format + 1 < len(FORMATS) and (status in (400, 422) or "schema" in message):
                    self.format += 1  # llama-cpp-python rejects json_schema with a 500 that names it
                else:
                    self._api_failure(task)
                continue
            except openai.APITimeoutError:
                self._error(task, f"timeout after {self.timeout_s:g}s")
                self._api_failure(task)
                continue
            except openai.OpenAIError as exc:  # connection refused, DNS, TLS ...
                self._error(task, f"{type(exc).__name__}: {exc}")
                self._api_failure(task)
                continue
            self._api_failures = 0
            if response.usage is not None:
                self.usage.prompt_tokens += response.usage.prompt_tokens or 0
                self.usage.completion_tokens += response.usage.completion_tokens or 0
            try:
                content = response.choices[0].message.content if response.choices else None
                answer = _loads(content)
                result = check(self.redactor.restore_data(answer) if self.redactor is not None else answer)
            except ValueError as exc:  # JSON and pydantic errors, answers outside the offer
                self._error(task, f"invalid answer: {str(exc)[:240]}")
                continue
            return result
        return None

    def _api_failure(self, task: str) -> None:
        self._api_failures += 1
        if self._api_failures >= DOWN_AFTER:
            self._down_until = time.monotonic() + DOWN_FOR_S
            self._error(task, f"{self._api_failures} API failures in a row: the {self.fallback.name} reasoner "
                              f"answers for the next {DOWN_FOR_S:g}s")
            self._api_failures = 0

    # -- the Reasoner protocol ---------------------------------------------------------------------------------

    def summarize(self, incident: Incident) -> IncidentSummary:
        text, low = incident.text, incident.text.lower()

        def check(data: Any) -> IncidentSummary:
            ans = P.SummaryAnswer.model_validate(data)
            lines = list(dict.fromkeys(ln.strip() for ln in ans.key_lines if ln.strip() and ln.strip() in text))
            if ans.key_lines and not lines:
                raise ValueError("no key line is a verbatim line of the incident")
            e = ans.entities
            entities = Entities(
                hosts=[h for h in e.hosts if _grounded(h, low)], gpus=[g for g in e.gpus if _grounded(g, low)],
                ranks=[r for r in e.ranks if str(r) in text], xids=[x for x in e.xids if str(x) in text],
                devices=[d for d in e.devices if _grounded(d, low)],
                versions={v.name: v.version for v in e.versions if _grounded(v.version, low)},
                error_codes=[c for c in e.error_codes if _grounded(c, low)])
            title = P.clip(ans.title, 120) or (lines[0][:120] if lines else "incident")
            query = "\n".join([*lines[:12], text[:600]]) if lines else text[:1500]  # as the offline reasoner
            return IncidentSummary(title=title, key_lines=lines[:12], entities=entities, query=query, text=text,
                                   environment=incident.environment)

        sections = [f"<incident>\n{P.excerpt(text, 6000)}\n</incident>",
                    f"environment: {P.clip(incident.environment, 400)}" if incident.environment else ""]
        got = self._ask("summarize", lambda s: P.user_message("summarize", sections, s), P.SUMMARY_SCHEMA, check)
        return got if got is not None else self._fall("summarize", self.fallback.summarize, incident)

    def rerank_history(self, summary: IncidentSummary, candidates: list[PastIncident]) -> list[PastIncident]:
        if len(candidates) < 2:
            return list(candidates)
        by_id = {c.id: c for c in candidates}
        ids = list(by_id)

        def check(data: Any) -> list[PastIncident]:
            order = P.OrderAnswer.model_validate(data).order
            unknown, dupes = sorted(set(order) - set(ids)), sorted({i for i in order if order.count(i) > 1})
            if unknown or dupes or not order:
                raise ValueError(f"order {order}: unknown {unknown}, duplicated {dupes}")
            first = [by_id[i] for i in order]
            return first + [c for c in candidates if c not in first]  # unranked ones keep their retrieval order

        schema = P.obj(order=P.arr(P.enum(ids)))
        sections = [P.summary_block(summary), "Past incidents:\n" + P.history_block(candidates)]
        got = self._ask("rerank_history", lambda s: P.user_message("rerank_history", sections, s), schema, check)
        return got if got is not None else self._fall("rerank_history", self.fallback.rerank_history, summary,
                                                      candidates)

    def rank_children(self, summary: IncidentSummary, parent: NodeInfo, children: list[NodeInfo],
                      memory: list[Observation], priors: dict[str, float]) -> list[Choice]:
        if not children:
            return []
        labels = [c.label for c in children]
        protected = _evidence_backed(summary, children, memory)

        def check(data: Any) -> list[Choice]:
            ranked = P.RankAnswer.model_validate(data).choices
            _exactly_once([r.label for r in ranked], labels, "children")
            n = len(ranked)
            return [Choice(label=r.label, score=round((n - i) / n, 4), keep=r.keep or r.label in protected,
                           why=P.clip(r.why, 300) + (" (kept: check or signature evidence)"
                                                     if r.label in protected and not r.keep else ""))
                    for i, r in enumerate(ranked)]

        schema = P.obj(choices=P.arr(P.obj(label=P.enum(labels), keep={"type": "boolean"}, why=P.STR)))
        prior_line = ", ".join(f"{k}={v:.2f}" for k, v in sorted(priors.items(), key=lambda kv: -kv[1])
                               if k in labels)
        sections = [P.summary_block(summary), "Children:\n" + P.nodes_block(children),
                    f"Priors from retrieval and pre-triage: {prior_line}" if prior_line else "",
                    P.memory_block(memory)]
        got = self._ask("rank_children", lambda s: P.user_message("rank_children", sections, s, parent=parent.label),
                        schema, check)
        return got if got is not None else self._fall("rank_children", self.fallback.rank_children, summary,
                                                      parent, children, memory, priors)

    def validate_leaf(self, summary: IncidentSummary, leaf: NodeInfo, evidence: Evidence,
                      results: list[CheckResult]) -> LeafJudgement:
        def check(data: Any) -> P.JudgementAnswer:
            return P.JudgementAnswer.model_validate(data)

        schema = P.obj(status=P.enum(["confirmed", "rejected", "inconclusive"]), confidence={"type": "number"},
                       why=P.STR)
        sections = [P.summary_block(summary), "Root cause under test:\n" + P.node_line(leaf, 900),
                    P.evidence_block(evidence), P.results_block(results)]
        args = (summary, leaf, evidence, results)
        ans = self._ask("validate_leaf", lambda s: P.user_message("validate_leaf", sections, s, leaf=leaf.label),
                        schema, check)
        if ans is None:
            return _guard(self._fall("validate_leaf", self.fallback.validate_leaf, *args))
        if ans.status == "confirmed" and evidence.strength not in ("strong", "weak"):
            self._error("validate_leaf", f"ungrounded confirmation of {leaf.label} (evidence {evidence.strength})")
            return _guard(self._fall("validate_leaf", self.fallback.validate_leaf, *args))
        if ans.status == "rejected" and evidence.strength == "strong":
            self._error("validate_leaf", f"rejection of {leaf.label} against strong evidence")
            return _guard(self._fall("validate_leaf", self.fallback.validate_leaf, *args))
        return LeafJudgement(label=leaf.label, status=ans.status, confidence=min(1.0, max(0.0, ans.confidence)),
                             why=P.clip(ans.why, 600), evidence=evidence)

    def explore(self, summary: IncidentSummary, memory: list[Observation], passages: list[KBPassage],
                tested: list[LeafJudgement]) -> list[ExplorationHypothesis]:
        labels = P.explore_labels(tested, passages)
        docs = list(dict.fromkeys(p.doc for p in passages))[:8]

        def check(data: Any) -> list[ExplorationHypothesis]:
            hyps = P.ExploreAnswer.model_validate(data).hypotheses
            if not hyps or any(not h.title.strip() for h in hyps):
                raise ValueError("no hypothesis, or one without a title")
            for h in hyps:
                bad = sorted(set(h.related_labels) - set(labels)) + sorted(set(h.sources) - set(docs))
                if bad:
                    raise ValueError(f"labels or sources not offered: {bad}")
            return [ExplorationHypothesis(title=P.clip(h.title, 160), why=P.clip(h.why, 600),
                                          steps=[P.clip(s, 400) for s in h.steps[:8]],
                                          related_labels=list(dict.fromkeys(h.related_labels)),
                                          sources=list(dict.fromkeys(h.sources))) for h in hyps[:5]]

        item: dict[str, Any] = {"title": P.STR, "why": P.STR, "steps": P.arr(P.STR)}
        if labels:
            item["related_labels"] = P.arr(P.enum(labels))
        if docs:
            item["sources"] = P.arr(P.enum(docs))
        schema = P.obj(hypotheses=P.arr(P.obj(**item)))
        sections = [P.summary_block(summary), P.memory_block(memory),
                    "Root causes already tested:\n" + P.tested_block(tested), P.passages_block(passages),
                    f"Taxonomy labels you may relate to: {', '.join(labels)}" if labels else ""]
        got = self._ask("explore", lambda s: P.user_message("explore", sections, s), schema, check)
        return got if got is not None else self._fall("explore", self.fallback.explore, summary, memory, passages,
                                                      tested)

    def conclude(self, summary: IncidentSummary, confirmed: list[LeafJudgement], memory: list[Observation]) -> str:
        def check(data: Any) -> str:
            text = P.ConclusionAnswer.model_validate(data).text.strip()
            if not text:
                raise ValueError("empty conclusion")
            return P.clip(text, 3000)

        causes = "\n".join(f"- {j.label} (evidence {j.evidence.strength}: {', '.join(j.evidence.matched[:6])}): "
                           f"{P.clip(j.why, 300)}" for j in confirmed) or "(none confirmed)"
        sections = [P.summary_block(summary), "Confirmed root causes:\n" + P.clip(causes, 1800), P.memory_block(memory)]
        got = self._ask("conclude", lambda s: P.user_message("conclude", sections, s), P.obj(text=P.STR), check)
        return got if got is not None else self._fall("conclude", self.fallback.conclude, summary, confirmed, memory)


def _guard(judgement: LeafJudgement) -> LeafJudgement:
    """The contract holds whoever answered: `confirmed` needs strong or weak check evidence."""
    if judgement.status == "confirmed" and judgement.evidence.strength not in ("strong", "weak"):
        return judgement.model_copy(update={"status": "inconclusive",
                                            "why": f"{judgement.why} (not confirmed: no check evidence)".strip()})
    return judgement


def _evidence_backed(summary: IncidentSummary, children: list[NodeInfo], memory: list[Observation]) -> set[str]:
    """Children the model may not prune: a check of theirs failed or warned, or a signature matches the text."""
    bad = [o for o in memory if o.result.verdict in (Verdict.FAIL, Verdict.WARN)]
    failing_checks = {o.result.check for o in bad}
    text = "\n".join([*summary.key_lines, summary.text])
    out: set[str] = set()
    for child in children:
        if failing_checks & set(child.checks) or any(o.node == child.label or o.node.startswith(child.label + ".")
                                                    for o in bad):
            out.add(child.label)
            continue
        for sig in child.signatures:
            try:
                if re.search(sig, text, re.IGNORECASE):
                    out.add(child.label)
                    break
            except re.error:
                continue
    return out
