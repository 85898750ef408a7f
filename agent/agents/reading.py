"""How the incident reads before any check: every leaf of the taxonomy ranked by the incident's lines, its
similarity to the leaf and the causes of similar past incidents — no check evidence and no pre-triage (that is the
hosts' state, not the incident's words). Planning follows it when the walk's findings explain nothing; the
conclusion weighs each confirmed cause's claim against it.

The reading is asked of `AgentTools.reader` (the offline reasoner in a diagnosis), so which confirmed cause is
claimed rests on the same deterministic reading whatever model drives the walk."""

from __future__ import annotations

from agent.agents.context import AgentTools
from agent.graph.state import DiagnosisState
from agent.incident import IncidentSummary
from agent.reasoning.base import NodeInfo, PastIncident, Reasoner
from agent.taxonomy import Taxonomy

# how many of the incident's likeliest causes are tested when what the walk confirmed explains nothing: a search
# breadth, not a claim (agents/attribution.py decides claims)
FOLLOWED = 5


class IncidentReading:
    def __init__(self, tools: AgentTools):
        self.t = tools

    def ranks(self, state: DiagnosisState) -> dict[str, int]:
        """Every leaf's rank (1 = likeliest)."""
        return reading(self.t.reader or self.t.reasoner, self.t.taxonomy, state.summarized(), state.similar)

    def likeliest(self, state: DiagnosisState) -> list[str]:
        """The incident's FOLLOWED likeliest causes that it can be tested for: a leaf only the job's logs can check
        is passed over when none are attached (the breadth goes to leaves this incident's view can test)."""
        ranks = self.ranks(state)
        logs = bool(state.incident.attachments.get("logs"))
        return [label for label in sorted(ranks, key=ranks.__getitem__)
                if logs or not self.only_logs_check(label)][:FOLLOWED]

    def only_logs_check(self, label: str) -> bool:
        """Every check of the leaf reads the job's attached logs (manifest `needs: [logs]`)."""
        manifest = self.t.runner.manifest
        known = set(manifest.ids())
        specs = [manifest.get(c) for c in self.t.taxonomy.node(label).checks if c in known]
        return bool(specs) and all(spec.reads_attachments for spec in specs)

    def unread(self, state: DiagnosisState) -> list[str]:
        """The incident's likeliest causes that nothing judged yet."""
        judged = {j.label for j in state.judgements}
        return [label for label in self.likeliest(state) if label not in judged]


def node_info(taxonomy: Taxonomy, label: str) -> NodeInfo:
    """A taxonomy node as a reasoner is shown it."""
    node = taxonomy.node(label)
    return NodeInfo(label=node.label, description=node.description, signatures=node.signatures,
                    checks=node.checks, is_leaf=node.is_leaf, symptoms=node.symptoms)


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
    """Every leaf's rank (1 = likeliest) as the incident reads before any check."""
    leaves = [node_info(taxonomy, leaf.label) for leaf in taxonomy.leaves()]
    everything = NodeInfo(label="", description="every root cause of the taxonomy")
    ranked = reasoner.rank_children(summary, everything, leaves, [], priors(similar))
    return {choice.label: rank for rank, choice in enumerate(ranked, start=1)}
