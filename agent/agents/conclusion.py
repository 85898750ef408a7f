"""Conclusion agent: orders the confirmed root causes (primary first) and writes the explanation."""

from __future__ import annotations

from agent.incident import IncidentSummary
from agent.reasoning.base import LeafJudgement, Observation, Reasoner

STRENGTH = {"strong": 2, "weak": 1}


def order(confirmed: list[LeafJudgement]) -> list[LeafJudgement]:
    """Strong evidence first, then the reasoner's confidence (which weighs how well the text fits)."""
    unique = {j.label: j for j in confirmed}
    return sorted(unique.values(), key=lambda j: (-STRENGTH.get(j.evidence.strength, 0), -j.confidence,
                                                  -len(j.evidence.matched)))


def explain(reasoner: Reasoner, summary: IncidentSummary, ordered: list[LeafJudgement],
            memory: list[Observation]) -> str:
    return reasoner.conclude(summary, ordered, memory)
