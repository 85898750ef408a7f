"""Reflection agent: confirms, rejects or leaves open a leaf hypothesis from the evidence of its checks."""

from __future__ import annotations

from agent.evidence import assess
from agent.incident import IncidentSummary
from agent.models import CheckResult
from agent.reasoning.base import LeafJudgement, Reasoner
from agent.taxonomy import Taxonomy

from .planning import node_info


def validate(reasoner: Reasoner, taxonomy: Taxonomy, summary: IncidentSummary, label: str,
             results: list[CheckResult]) -> LeafJudgement:
    leaf = taxonomy.node(label)
    mine = [r for r in results if r.check in leaf.checks]
    evidence = assess(leaf.evidence, mine)
    judgement = reasoner.validate_leaf(summary, node_info(taxonomy, label), evidence, mine)
    if judgement.status == "confirmed" and evidence.strength not in ("strong", "weak"):
        # only check evidence confirms: whatever a reasoner says, no evidence means not confirmed
        judgement = judgement.model_copy(update={"status": "inconclusive", "why": "no check evidence; "
                                                 + judgement.why})
    return judgement.model_copy(update={"evidence": evidence})
