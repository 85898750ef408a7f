"""The `openai` reasoner: any OpenAI-compatible endpoint (OpenAI, Azure OpenAI, vLLM, SGLang, Ollama, llama.cpp,
TGI, LM Studio, LiteLLM).

Every call asks for structured output whose choices are exactly the offered ones (JSON Schema enums of the child
labels, candidate ids, statuses), parses it with pydantic and checks it against the offer again. The question is
asked in the strongest structured-output form the endpoint accepts (agent/reasoning/structured.py: json_schema,
a forced tool call, json_object with the schema, plain text with the schema in the prompt), learnt once per
endpoint and process. An invalid answer or an endpoint error is retried once; then the same method of the
`fallback` reasoner answers, counted in `usage` under its cause (format, model, endpoint, budget).
Safety: the model ranks and explains but never confirms alone; check evidence decides, and nothing it writes
becomes a command. With a `redactor`, every user message is redacted before it is sent (secrets, hosts, IPs,
users, paths) and the placeholders in the answer are restored before it is checked; `token_budget` stops calling
the model once the run has used that many tokens (the fallback answers); `on_call` receives one audit record per
request and one per fallback.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

import openai

from agent.audit_records import LlmFallbackRecord
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
    OnCall,
    PastIncident,
    Reasoner,
    Usage,
)
from agent.reasoning.structured import (
    EndpointForms,
    FallbackCause,
    Form,
    StructuredChat,
    json_object_in,
    schema_in_prompt,
)
from agent.redact import Redactor

log = logging.getLogger(__name__)
T = TypeVar("T")
PLACEHOLDER_KEY = "not-needed"  # local servers (vLLM, llama.cpp, Ollama) ignore the key; the SDK wants one
MAX_TOKENS = {"summarize": 700, "rerank_history": 200, "rank_children": 600, "validate_leaf": 250,
              "explore": 900, "conclude": 500}


def api_key_from_env() -> str | None:
    return os.environ.get("AIDAI_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY") or None


def _loads(content: str | None) -> Any:
    """The JSON object in a reply (kept for the taxonomy builder's client)."""
    return json_object_in(content)


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
                 timeout_s: float = 60, forms: EndpointForms | None = None) -> None:
        self.fallback = fallback
        self.model = model
        self.base_url = base_url
        self.usage = Usage()
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or api_key_from_env() or PLACEHOLDER_KEY,
                                    timeout=timeout_s, max_retries=0)
        self.timeout_s = timeout_s
        self.chat = StructuredChat(self.client, model, base_url, self.usage, forms=forms, timeout_s=timeout_s)
        self.redactor: Redactor | None = None
        self.token_budget: int | None = None
        self._on_call: OnCall | None = None

    @property
    def on_call(self) -> OnCall | None:
        return self._on_call

    @on_call.setter
    def on_call(self, hook: OnCall | None) -> None:
        self._on_call = hook
        self.chat.on_call = hook

    @property
    def form(self) -> Form:
        """The structured-output form the next question to this endpoint is asked in."""
        return self.chat.form

    # -- plumbing ---------------------------------------------------------------------------------------------

    def _error(self, task: str, message: str) -> None:
        self.chat.error(task, message)

    def _fall(self, task: str, cause: FallbackCause, method: Callable[..., T], *args: Any) -> T:
        self.usage.fell_back(cause)
        answered_by = getattr(self.fallback, "name", "fallback")
        log.info("openai reasoner %s: answered by the %s reasoner (%s)", task, answered_by, cause)
        if self._on_call is not None:
            self._on_call(LlmFallbackRecord(task=task, model=self.model, cause=cause, answered_by=answered_by))
        return method(*args)

    def _ask(self, task: str, user: Callable[[dict[str, Any] | None], str], schema: dict[str, Any],
             check: Callable[[Any], T]) -> tuple[T | None, FallbackCause]:
        """A checked answer, or None and the cause the caller falls back under."""
        if self.token_budget is not None and self.usage.tokens >= self.token_budget:
            self._error(task, f"LLM token budget spent ({self.usage.tokens} of {self.token_budget} tokens)")
            return None, "budget"

        def messages(form: str) -> list[dict[str, Any]]:
            text = user(schema if schema_in_prompt(form) else None)
            if self.redactor is not None:
                data, schema_text = P.split_schema(text)
                text = self.redactor.text(data) + schema_text
            return [{"role": "system", "content": P.SYSTEM}, {"role": "user", "content": text}]

        def checked(answer: Any) -> T:
            return check(self.redactor.restore_data(answer) if self.redactor is not None else answer)

        record = {"prompt_version": P.PROMPT_VERSION, "redacted": self.redactor is not None}
        outcome = self.chat.ask(task, messages, schema, MAX_TOKENS[task], checked, record)
        return outcome.value, outcome.cause or "model"

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
        got, cause = self._ask("summarize", lambda s: P.user_message("summarize", sections, s), P.SUMMARY_SCHEMA,
                               check)
        return got if got is not None else self._fall("summarize", cause, self.fallback.summarize, incident)

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
        got, cause = self._ask("rerank_history", lambda s: P.user_message("rerank_history", sections, s), schema,
                               check)
        return got if got is not None else self._fall("rerank_history", cause, self.fallback.rerank_history,
                                                      summary, candidates)

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

        schema = P.obj(choices=P.arr(P.obj(label=P.enum(labels), keep={"type": "boolean"}, why=P.STR),
                                     exactly=len(labels)))
        prior_line = ", ".join(f"{k}={v:.2f}" for k, v in sorted(priors.items(), key=lambda kv: -kv[1])
                               if k in labels)
        sections = [P.summary_block(summary), "Children:\n" + P.nodes_block(children),
                    f"Priors from retrieval and pre-triage: {prior_line}" if prior_line else "",
                    P.memory_block(memory)]
        got, cause = self._ask("rank_children",
                               lambda s: P.user_message("rank_children", sections, s, parent=parent.label),
                               schema, check)
        return got if got is not None else self._fall("rank_children", cause, self.fallback.rank_children, summary,
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
        ans, cause = self._ask("validate_leaf",
                               lambda s: P.user_message("validate_leaf", sections, s, leaf=leaf.label), schema, check)
        if ans is None:
            return _guard(self._fall("validate_leaf", cause, self.fallback.validate_leaf, *args))
        if ans.status == "confirmed" and evidence.strength not in ("strong", "weak"):
            self._error("validate_leaf", f"ungrounded confirmation of {leaf.label} (evidence {evidence.strength})")
            return _guard(self._fall("validate_leaf", "model", self.fallback.validate_leaf, *args))
        if ans.status == "rejected" and evidence.strength == "strong":
            self._error("validate_leaf", f"rejection of {leaf.label} against strong evidence")
            return _guard(self._fall("validate_leaf", "model", self.fallback.validate_leaf, *args))
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
        got, cause = self._ask("explore", lambda s: P.user_message("explore", sections, s), schema, check)
        return got if got is not None else self._fall("explore", cause, self.fallback.explore, summary, memory,
                                                      passages, tested)

    def conclude(self, summary: IncidentSummary, confirmed: list[LeafJudgement], memory: list[Observation]) -> str:
        def check(data: Any) -> str:
            text = P.ConclusionAnswer.model_validate(data).text.strip()
            if not text:
                raise ValueError("empty conclusion")
            return P.clip(text, 3000)

        causes = "\n".join(f"- {j.label} (evidence {j.evidence.strength}: {', '.join(j.evidence.matched[:6])}): "
                           f"{P.clip(j.why, 300)}" for j in confirmed) or "(none confirmed)"
        sections = [P.summary_block(summary), "Confirmed root causes:\n" + P.clip(causes, 1800), P.memory_block(memory)]
        got, cause = self._ask("conclude", lambda s: P.user_message("conclude", sections, s), P.obj(text=P.STR),
                               check)
        return got if got is not None else self._fall("conclude", cause, self.fallback.conclude, summary, confirmed,
                                                      memory)


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
