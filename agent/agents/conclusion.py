"""Conclusion agent: writes the explanation of the confirmed root causes (agents/attribution.py orders them)."""

from __future__ import annotations

from agent.incident import IncidentSummary
from agent.reasoning.base import LeafJudgement, Observation, Reasoner


def explain(reasoner: Reasoner, summary: IncidentSummary, ordered: list[LeafJudgement],
            memory: list[Observation]) -> str:
    return reasoner.conclude(summary, ordered, memory)
