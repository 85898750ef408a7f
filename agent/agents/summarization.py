"""Summarization agent: the incident text becomes key error lines, entities and a retrieval query (`summarize`);
the pre-triage tools read its attachments (logs, telemetry, the fleet's metrics) and the hosts they point at come
first (`pretriage`); the user's answer to the exploration's question becomes part of the incident (`feedback`)."""

from __future__ import annotations

import time
from typing import Any

from agent.agents.context import AgentTools
from agent.events import PretriageEvent, SummaryEvent
from agent.graph.state import DiagnosisState
from agent.incident import Incident, IncidentSummary
from agent.models import ToolResult
from agent.reasoning.base import Reasoner

FEEDBACK_QUESTION = ("No root cause was confirmed. What else do you see (new error lines, what changed, results of "
                     "the steps above)? Leave empty to escalate.")


class SummarizationAgent:
    def __init__(self, tools: AgentTools):
        self.t = tools

    def summarize(self, state: DiagnosisState) -> dict[str, Any]:
        """Node: the incident's key lines, entities and retrieval query (again after the user's feedback)."""
        summary = summarize(self.t.reasoner, state.incident, state.feedback)
        self.t.emit(SummaryEvent(**summary.model_dump(exclude={"text", "query"})))
        return {"summary": summary}

    def pretriage(self, state: DiagnosisState) -> dict[str, Any]:
        """Node: every pre-triage tool on the incident's attachments; a tool that fails is reported, never fatal."""
        found: list[ToolResult] = []
        priors: dict[str, float] = {}
        known = set(self.t.taxonomy.labels())
        for tool in self.t.pretriage:
            began = time.perf_counter()
            try:
                result = tool(state.incident)
            except Exception as exc:  # a tool's bug must not stop the diagnosis; the ticket shows it
                result = ToolResult(tool=getattr(tool, "__name__", "tool"), status="error",
                                    reason=f"{type(exc).__name__}: {exc}"[:500])
            if result is None:
                continue
            if not result.duration_s:
                result.duration_s = round(time.perf_counter() - began, 3)
            found.append(result)
            for label, score in result.priors.items():
                if label in known:
                    priors[label] = max(priors.get(label, 0.0), score)
        update: dict[str, Any] = {"pretriage": found, "pretriage_priors": priors}
        suspects = [h for r in found if r.status == "ok" for h in r.hosts[:5]]
        if suspects:  # the hosts the tools point at come first in the summary: check them first
            summary = state.summarized().model_copy(deep=True)
            summary.entities.hosts = list(dict.fromkeys([*suspects, *summary.entities.hosts]))
            update["summary"] = summary
        if found:
            self.t.emit(PretriageEvent(results=found))
        return update

    def feedback(self, state: DiagnosisState) -> dict[str, Any]:
        """Node: ask the user (a LangGraph interrupt) what else they see; an empty answer escalates."""
        from langgraph.types import interrupt

        answer = interrupt({"kind": "feedback", "hypotheses": [h.model_dump(mode="json") for h in state.exploration],
                            "question": FEEDBACK_QUESTION})
        text = str(answer or "").strip()
        rounds = state.feedback_rounds + 1
        if not text:
            return {"feedback_rounds": rounds}
        return {"feedback": [*state.feedback, text], "feedback_rounds": rounds, "widened": False,
                "path": state.trace(3, "", "feedback", text[:200])}


def summarize(reasoner: Reasoner, incident: Incident, feedback: list[str] | None = None) -> IncidentSummary:
    """User feedback from the exploration pipeline is part of the incident from then on."""
    if feedback:
        text = incident.text + "".join(f"\n\n[user feedback {i + 1}]\n{f}" for i, f in enumerate(feedback))
        incident = incident.model_copy(update={"text": text})
    return reasoner.summarize(incident)
