"""Taxonomy construction with a model (`aidai taxonomy build --llm openai`): AidAI's two passes over any
OpenAI-compatible endpoint, with structured output, batching and counted tokens.

Pass 1: batches of incidents; the model answers, per incident id (an enum of the batch's ids), a label
`<MAIN>.<SUB>.<DETAIL>` (schema pattern), a hypothesis and a description; the existing labels are offered so it
reuses them. Pass 2: per label the taxonomy lacks, the model sees the closest existing leaves of the same main
category (an enum, plus "" for none) and decides match or new; per matched node it refines the description.
An invalid answer or an API error is retried once; then the offline pass answers for that batch or label (counted
as a fallback). What the model writes is data in a reviewable file: never a command, never applied here.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageParam, completion_create_params

from agent.history import build as builder
from agent.history.labeling import Labelled, first_sentence, humanize
from agent.history.merge import Merger, Verification, empty_taxonomy, leaves
from agent.history.records import HistoryRecord
from agent.reasoning.base import Usage
from agent.reasoning.openai_reasoner import PLACEHOLDER_KEY, _loads, api_key_from_env

LABEL_RE = r"^[A-Z][A-Z0-9_]*\.[A-Z][A-Z0-9_]*\.[A-Z][A-Z0-9_]*$"
CLIP = 1200
SYSTEM = ("You build an incident taxonomy for AI workloads on GPU machines from historical incident tickets. "
          "Answer with JSON only, following the schema. Labels are <MAIN>.<SUB>.<DETAIL> in upper case with "
          "underscores; reuse an existing label when the root cause is the same.")


class TaxonomyLLM:
    """A small structured-output client: two tries per question, tokens counted from the API's usage."""

    def __init__(self, model: str, base_url: str | None, api_key: str | None = None, timeout_s: float = 120):
        self.model = model
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or api_key_from_env() or PLACEHOLDER_KEY,
                                    timeout=timeout_s, max_retries=0)
        self.usage = Usage()  # the reasoners' accounting type
        self.json_schema = True  # falls back to json_object (schema in the prompt) when the server rejects it

    def ask(self, task: str, prompt: str, schema: dict[str, Any], max_tokens: int) -> Any | None:
        for attempt in range(2):
            self.usage.retries += attempt
            fmt: completion_create_params.ResponseFormat = (
                {"type": "json_schema", "json_schema": {"name": task, "strict": True, "schema": schema}}
                if self.json_schema else {"type": "json_object"})
            text = prompt if self.json_schema else f"{prompt}\n\nJSON Schema of the answer:\n{json.dumps(schema)}"
            messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": SYSTEM},
                                                          {"role": "user", "content": text}]
            self.usage.calls += 1
            try:
                response = self.client.chat.completions.create(
                    model=self.model, response_format=fmt, max_tokens=max_tokens, temperature=0.0, messages=messages)
            except openai.APIStatusError as exc:
                self.usage.errors.append(f"{task}: HTTP {exc.status_code}: {str(exc.message)[:200]}")
                if exc.status_code in (400, 422) and self.json_schema:
                    self.json_schema = False
                continue
            except openai.OpenAIError as exc:
                self.usage.errors.append(f"{task}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            if response.usage is not None:
                self.usage.prompt_tokens += response.usage.prompt_tokens or 0
                self.usage.completion_tokens += response.usage.completion_tokens or 0
            try:
                return _loads(response.choices[0].message.content if response.choices else None)
            except ValueError as exc:
                self.usage.errors.append(f"{task}: {exc}")
        return None


def _clip(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= CLIP else text[:CLIP] + " …"


def pass1_schema(ids: list[str]) -> dict[str, Any]:
    item = {"type": "object", "additionalProperties": False, "required": ["id", "label", "hypothesis", "description"],
            "properties": {"id": {"type": "string", "enum": ids}, "label": {"type": "string", "pattern": LABEL_RE},
                           "hypothesis": {"type": "string"}, "description": {"type": "string"}}}
    return {"type": "object", "additionalProperties": False, "required": ["incidents"],
            "properties": {"incidents": {"type": "array", "items": item}}}


def check_pass1(answer: Any, batch: list[HistoryRecord]) -> list[Labelled]:
    """ValueError unless every incident of the batch is labelled exactly once with a well-formed label."""
    if not isinstance(answer, dict) or not isinstance(answer.get("incidents"), list):
        raise ValueError("no 'incidents' list")
    by_id = {r.id: r for r in batch}
    got: dict[str, Labelled] = {}
    for item in answer["incidents"]:
        rid, label = str(item.get("id", "")), str(item.get("label", "")).strip().upper()
        if rid not in by_id or rid in got or not re.match(LABEL_RE, label):
            raise ValueError(f"bad item id={rid!r} label={label!r}")
        got[rid] = Labelled(by_id[rid], label, first_sentence(str(item.get("hypothesis", ""))) or label,
                            first_sentence(str(item.get("description", ""))), "llm")
    if set(got) != set(by_id):
        raise ValueError(f"missing ids {sorted(set(by_id) - set(got))}")
    return [got[r.id] for r in batch]


def pass1(llm: TaxonomyLLM, records: list[HistoryRecord], known: list[str], base: dict[str, Any],
          batch: int) -> list[Labelled]:
    out: list[Labelled] = []
    for start in range(0, len(records), batch):
        chunk = records[start:start + batch]
        incidents = [{"id": r.id, "description": _clip(r.description), "discussion": _clip(r.discussion),
                      "resolution": _clip(r.resolution)} for r in chunk]
        prompt = ("Pass 1: for each incident, give the root-cause label, a one-sentence hypothesis and a one-"
                  f"sentence description of the failure.\nExisting labels: {json.dumps(known)}\n"
                  f"Incidents: {json.dumps(incidents, ensure_ascii=False)}")
        answer = llm.ask("taxonomy_pass1", prompt, pass1_schema([r.id for r in chunk]), 120 * len(chunk) + 200)
        try:
            if answer is None:
                raise ValueError("no answer")
            out += check_pass1(answer, chunk)
        except ValueError as exc:
            llm.usage.errors.append(f"taxonomy_pass1: {exc}")
            llm.usage.fallbacks += 1
            out += builder.pass1_offline(chunk, base)
    return out


class LLMMerger(Merger):
    """Pass 2 decided by the model: match or new for a label the taxonomy lacks; refined descriptions."""

    def __init__(self, llm: TaxonomyLLM, base: dict[str, Any], library: dict[str, Verification] | None,
                 mined: dict[str, Any]):
        super().__init__(base, library, mined)
        self.llm = llm

    def near_duplicate(self, label: str) -> tuple[str, float] | None:
        main = label.split(".", 1)[0]
        same = [lb for lb in leaves(self.result.data) if lb.split(".", 1)[0] == main]
        if not same:
            return None
        ranked = sorted(same, key=lambda lb: -float(self._names[lb] @ self._names[label]))[:6]
        schema = {"type": "object", "additionalProperties": False, "required": ["match"],
                  "properties": {"match": {"type": "string", "enum": [*ranked, ""]}}}
        prompt = (f"Pass 2: is the root cause {label} ({humanize(label)}) the same as one of these existing "
                  f"labels? Answer its label, or \"\" if it is new.\nExisting: {json.dumps(ranked)}\n"
                  f"Incidents of {label}: {json.dumps([i.description for i in self._groups[label]][:3])}")
        answer = self.llm.ask("taxonomy_pass2", prompt, schema, 60)
        if not isinstance(answer, dict) or answer.get("match") not in [*ranked, ""]:
            self.llm.usage.fallbacks += 1
            return super().near_duplicate(label)
        match = str(answer["match"])
        return (match, round(float(self._content[match] @ self._content[label]), 4)) if match else None

    def refine(self, label: str, node: dict[str, Any], items: list[Labelled]) -> None:
        schema = {"type": "object", "additionalProperties": False, "required": ["description"],
                  "properties": {"description": {"type": "string"}}}
        new = json.dumps([_clip(i.record.description) for i in items][:3], ensure_ascii=False)
        prompt = (f"Pass 2: refine the description of {label} for clarity and accuracy in 1-3 sentences: what it "
                  f"is, which symptoms point to it, what separates it from its siblings.\nCurrent: "
                  f"{node['description']}\nNew incidents: {new}")
        answer = self.llm.ask("taxonomy_refine", prompt, schema, 300)
        text = str(answer.get("description", "")).strip() if isinstance(answer, dict) else ""
        if text:
            node["description"] = text
        else:
            self.llm.usage.fallbacks += 1


def build_with_llm(records: list[HistoryRecord], base: dict[str, Any] | None, *, model: str,
                   base_url: str | None, batch: int = 8, library: dict[str, Verification] | None = None,
                   kb_root: Path | None = None, api_key: str | None = None) -> builder.BuildResult:
    llm = TaxonomyLLM(model, base_url, api_key)
    base = base if base is not None else empty_taxonomy()
    labelled = pass1(llm, records, sorted(leaves(base)), base, batch)
    result = builder.build(records, base, library=library, kb_root=kb_root, labelled=labelled,
                           merger_factory=lambda b, lib, mined: LLMMerger(llm, b, lib, mined))
    result.llm = {"model": model, **asdict(llm.usage), "errors": llm.usage.errors[:20]}
    return result

