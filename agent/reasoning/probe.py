"""`aidai llm probe`: which structured-output forms an endpoint takes, and whether a diagnosis would run on it.

Each form is tried on its own (pinned: no moving on) with the first question a diagnosis asks: rank the shipped
taxonomy's top-level areas for a sample incident (an Xid 79 on one GPU). A form is
  ok        the server took it and the model's ranking passed every check;
  refused   the server answered an HTTP error naming the form;
  ignored   the server took the request but not the form (prose, no tool call, an answer outside the schema);
  invalid   the server took the form, but the model's ranking failed the checks twice;
  error     the endpoint failed (connection, timeout, another HTTP error).
A diagnosis asks in the strongest form that is ok or invalid; with none, every question falls back to the
offline reasoner.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, cast

from agent.incident import Entities, IncidentSummary
from agent.reasoning.base import Choice, NodeInfo, Observation, Reasoner
from agent.reasoning.structured import FORMS, EndpointForms, Form

FormStatus = Literal["ok", "refused", "ignored", "invalid", "error", "not tried"]
SAMPLE_LINES = ["[  812.113] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
                "RuntimeError: CUDA error: unspecified launch failure"]
SAMPLE = IncidentSummary(
    title="Training job crashed: GPU fell off the bus", key_lines=SAMPLE_LINES, query="\n".join(SAMPLE_LINES),
    text="Training job llama-70b crashed on node gpu-a17 after 3 hours.\n" + "\n".join(SAMPLE_LINES) +
         "\nrank 5 exited with code 1", entities=Entities(hosts=["gpu-a17"], xids=[79], ranks=[5]))


@dataclass
class FormProbe:
    form: str
    status: FormStatus
    detail: str = ""
    seconds: float = 0.0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class ProbeResult:
    base_url: str
    model: str
    forms: list[FormProbe] = field(default_factory=list)
    form: str | None = None  # the form a diagnosis would ask in
    runs: bool = False
    verdict: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Unanswered:
    """The probe's fallback: answers nothing, so that a fallback shows as one."""

    name = "none"

    def rank_children(self, summary: IncidentSummary, parent: NodeInfo, children: list[NodeInfo],
                      memory: list[Observation], priors: dict[str, float]) -> list[Choice]:
        return []


def _children() -> tuple[NodeInfo, list[NodeInfo]]:
    from agent.agents.reading import node_info
    from agent.taxonomy import load_taxonomy

    taxonomy = load_taxonomy()
    return (NodeInfo(label="", description="all incidents"),
            [node_info(taxonomy, child.label) for child in taxonomy.children("")])


def probe_form(form: Form, base_url: str, model: str, api_key: str | None, timeout_s: float) -> FormProbe:
    from agent.reasoning.openai_reasoner import OpenAIReasoner  # openai loads only when probing

    parent, children = _children()
    pinned = EndpointForms(only=form)
    reasoner = OpenAIReasoner(cast(Reasoner, _Unanswered()), model, base_url, api_key=api_key, timeout_s=timeout_s,
                              forms=pinned)
    start = time.monotonic()
    ranked = reasoner.rank_children(SAMPLE, parent, children, [], {})
    seconds = round(time.monotonic() - start, 2)
    usage = reasoner.usage
    row = FormProbe(form=form, status="ok", seconds=seconds, calls=usage.calls, prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens)
    if not usage.fallbacks:
        row.detail = "ranked " + ", ".join(c.label for c in ranked[:3]) + (" ..." if len(ranked) > 3 else "")
        return row
    cause = next(iter(usage.fallback_causes))
    last_error = " ".join(usage.errors[-1].split(": ", 1)[-1].split()) if usage.errors else ""
    if cause == "format":
        reason = " ".join(pinned.refusals.get(reasoner.chat.key, {}).get(form, last_error).split())
        row.status, row.detail = ("ignored", reason.removeprefix("ignored: ")) if reason.startswith("ignored") \
            else ("refused", reason)
    elif cause == "model":
        row.status, row.detail = "invalid", last_error
    else:
        row.status, row.detail = "error", last_error
    return row


def probe(base_url: str, model: str, api_key: str | None = None, timeout_s: float = 60,
          forms: tuple[Form, ...] = FORMS) -> ProbeResult:
    result = ProbeResult(base_url=base_url, model=model)
    unreachable = False
    for form in forms:
        if unreachable:
            result.forms.append(FormProbe(form=form, status="not tried", detail="the endpoint did not answer"))
            continue
        row = probe_form(form, base_url, model, api_key, timeout_s)
        result.forms.append(row)
        # a dead endpoint answers no form: do not wait for each
        unreachable = row.status == "error" and ("Connection" in row.detail or "timeout" in row.detail)
    usable = next((r for r in result.forms if r.status in ("ok", "invalid")), None)
    refused = [r.form for r in result.forms if r.status in ("refused", "ignored")]
    before = f" ({', '.join(refused)} not taken)" if refused else ""
    if usable is not None:
        result.form, result.runs = usable.form, True
        result.verdict = f"a diagnosis would run: its questions go in the {usable.form} form{before}"
        if usable.status == "invalid":
            result.verdict += ("; the model's ranking failed the checks twice, so such questions would fall back to "
                               "the offline reasoner (model fallbacks)")
    elif all(r.status in ("error", "not tried") for r in result.forms):
        first = result.forms[0].detail if result.forms else ""
        result.verdict = f"a diagnosis would not use the model: the endpoint did not answer ({first})"
    else:
        result.verdict = ("a diagnosis would not use the model: the endpoint took none of the forms tried; every "
                          "question would fall back to the offline reasoner")
    return result
