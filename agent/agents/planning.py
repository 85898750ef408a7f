"""Planning agent: hypotheses from similar past incidents (pipeline 1) and ranked, pruned children of a
taxonomy node (pipeline 2's state expansion)."""

from __future__ import annotations

from collections.abc import Callable

from agent.incident import IncidentSummary
from agent.reasoning.base import Choice, NodeInfo, Observation, PastIncident, Reasoner
from agent.taxonomy import Taxonomy

HISTORY_K = 8
HYPOTHESES = 2  # AidAI takes the root causes of the two most similar incidents
MIN_SIMILARITY = 0.35  # below this a past incident is not similar enough to test its root cause
# how many of the incident's likeliest causes (its reading) are tested when what the walk confirmed explains
# nothing: a search breadth, not a claim (agents/attribution.py decides claims)
FOLLOWED = 5

Retrieve = Callable[[str, int], list[PastIncident]]


def node_info(taxonomy: Taxonomy, label: str) -> NodeInfo:
    node = taxonomy.node(label)
    return NodeInfo(label=node.label, description=node.description, signatures=node.signatures,
                    checks=node.checks, is_leaf=node.is_leaf, symptoms=node.symptoms)


def similar_incidents(reasoner: Reasoner, summary: IncidentSummary, retrieve: Retrieve,
                      taxonomy: Taxonomy) -> list[PastIncident]:
    known = set(taxonomy.labels(leaves_only=True))
    found = [p for p in retrieve(summary.query, HISTORY_K) if p.label in known]
    return reasoner.rerank_history(summary, found) if found else []


def history_hypotheses(similar: list[PastIncident]) -> list[str]:
    labels: list[str] = []
    for past in similar:
        if past.score >= MIN_SIMILARITY and past.label not in labels:
            labels.append(past.label)
        if len(labels) == HYPOTHESES:
            break
    return labels


def priors(similar: list[PastIncident], extra: dict[str, float] | None = None) -> dict[str, float]:
    """Retrieval (and pre-triage) scores spread over each label's ancestors: the planner's priors."""
    out: dict[str, float] = {}
    for past in similar:
        parts = past.label.split(".")
        for depth in range(1, len(parts) + 1):
            key = ".".join(parts[:depth])
            out[key] = max(out.get(key, 0.0), round(past.score, 4))
    for label, score in (extra or {}).items():
        out[label] = max(out.get(label, 0.0), score)
    return out


def reading(reasoner: Reasoner, taxonomy: Taxonomy, summary: IncidentSummary,
            similar: list[PastIncident]) -> dict[str, int]:
    """Every leaf's rank (1 = likeliest) as the incident reads before any check: its lines, its similarity to the
    leaf, the causes of similar past incidents. No check evidence and no pre-triage (that is the hosts' state, not
    the incident's words)."""
    leaves = [node_info(taxonomy, leaf.label) for leaf in taxonomy.leaves()]
    everything = NodeInfo(label="", description="every root cause of the taxonomy")
    ranked = reasoner.rank_children(summary, everything, leaves, [], priors(similar))
    return {choice.label: rank for rank, choice in enumerate(ranked, start=1)}


def rank_children(reasoner: Reasoner, taxonomy: Taxonomy, summary: IncidentSummary, label: str,
                  memory: list[Observation], prior: dict[str, float], untested: set[str] | None = None) -> list[Choice]:
    """`untested` (the widened pass): keep every child with a leaf not judged yet, whatever its rank."""
    children = [node_info(taxonomy, child.label) for child in taxonomy.children(label)]
    parent = node_info(taxonomy, label) if label else NodeInfo(label="", description="all incidents")
    ranked = reasoner.rank_children(summary, parent, children, memory, prior)
    offered = {c.label for c in children}
    # a reasoner must answer about exactly the offered children; anything else is dropped
    seen: set[str] = set()
    clean = [c for c in ranked if c.label in offered and not (c.label in seen or seen.add(c.label))]
    clean += [Choice(label=lb, score=0.0, keep=False, why="not ranked") for lb in sorted(offered - seen)]
    if untested is None:
        return clean
    return [c.model_copy(update={"keep": True, "why": f"{c.why}; widened search"})
            if not c.keep and any(leaf.label in untested for leaf in taxonomy.leaves(c.label)) else c for c in clean]
