"""Summarization agent: the incident text becomes key error lines, entities and a retrieval query."""

from __future__ import annotations

from agent.incident import Incident, IncidentSummary
from agent.reasoning.base import Reasoner


def summarize(reasoner: Reasoner, incident: Incident, feedback: list[str] | None = None) -> IncidentSummary:
    """User feedback from the exploration pipeline is part of the incident from then on."""
    if feedback:
        text = incident.text + "".join(f"\n\n[user feedback {i + 1}]\n{f}" for i, f in enumerate(feedback))
        incident = incident.model_copy(update={"text": text})
    return reasoner.summarize(incident)
