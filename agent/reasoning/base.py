"""The Reasoner contract: every decision an agent makes goes through one of these methods.

Two implementations: `offline` (embeddings, node signatures, retrieval scores, check verdicts) and `openai`
(any OpenAI-compatible endpoint, structured output restricted to the offered choices, offline fallback).
A Reasoner never runs a command; a leaf is confirmed only when check evidence supports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, Field

from agent.audit_records import LlmFallbackRecord, LlmRecord
from agent.incident import Incident, IncidentSummary
from agent.models import CheckResult

if TYPE_CHECKING:
    from agent.redact import Redactor

LeafStatus = Literal["confirmed", "rejected", "inconclusive"]
OnCall = Callable[[LlmRecord | LlmFallbackRecord], None]  # each request to a model, for the run's audit log
EvidenceStrength = Literal["strong", "weak", "none", "unknown"]


class NodeInfo(BaseModel):
    """What a reasoner may know about a taxonomy node it is offered."""

    label: str  # dotted path, e.g. GPU.MEMORY.UNCORRECTABLE_ECC
    description: str
    signatures: list[str] = Field(default_factory=list)  # regexes of the node's tell-tale error lines
    checks: list[str] = Field(default_factory=list)
    is_leaf: bool = False
    symptoms: list[str] = Field(default_factory=list)  # leaves: how the cause fails jobs (slow, hang, no_gpu ...)


class Observation(BaseModel):
    """One check run while a hypothesis (taxonomy node) was being examined: the planner's memory entry."""

    node: str
    result: CheckResult


class Choice(BaseModel):
    """A ranked child: keep=False prunes it (early stop when no child is kept)."""

    label: str
    score: float
    keep: bool
    why: str = ""


class Evidence(BaseModel):
    """What the checks say about one leaf, computed from its evidence rules (never by a model)."""

    strength: EvidenceStrength
    matched: list[str] = Field(default_factory=list)  # "check:finding_id@entity (SEVERITY)"
    rejected_by: list[str] = Field(default_factory=list)  # checks that ran and passed
    unknown: list[str] = Field(default_factory=list)  # checks that could not decide: this view hid something
    # checks not given an input they read (the job's logs, a checkpoint directory): they hid nothing
    unasked: list[str] = Field(default_factory=list)
    # checks that saw the state and cannot judge it (a version their known-bad list does not name): they reject nothing
    open: list[str] = Field(default_factory=list)


class LeafJudgement(BaseModel):
    label: str
    status: LeafStatus
    confidence: float
    why: str
    evidence: Evidence


class PastIncident(BaseModel):
    id: str
    label: str
    text: str
    score: float  # similarity in [0, 1] after reranking
    source: str = "seed"


class KBPassage(BaseModel):
    doc: str
    title: str
    text: str
    score: float


class ExplorationHypothesis(BaseModel):
    """Pipeline 3's output: a cause outside what the checks could confirm, with manual steps for the user."""

    title: str
    why: str
    steps: list[str] = Field(default_factory=list)
    related_labels: list[str] = Field(default_factory=list)  # taxonomy nodes it is closest to, if any
    sources: list[str] = Field(default_factory=list)  # KB docs it came from


@dataclass
class Usage:
    """LLM accounting per incident (all zero for the offline reasoner)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    fallbacks: int = 0  # calls answered by the offline reasoner after the model failed twice
    # the same fallbacks by cause: format (the endpoint took no structured-output form), model (invalid or
    # ungrounded answers), endpoint (connection, timeout, HTTP errors), budget (the token budget was spent)
    fallback_causes: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def fell_back(self, cause: str) -> None:
        self.fallbacks += 1
        self.fallback_causes[cause] = self.fallback_causes.get(cause, 0) + 1

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Reasoner(Protocol):
    """What the agents ask, and what the Diagnoser sets on it for a run: the run's token budget (a reasoner that
    calls a model stops calling it there), a hook receiving one audit record per model call, and the redactor every
    prompt passes through before it leaves the machine. A reasoner that sends nothing anywhere keeps them unused."""

    name: str
    usage: Usage
    token_budget: int | None
    on_call: OnCall | None
    redactor: Redactor | None

    def summarize(self, incident: Incident) -> IncidentSummary:
        """Key error lines, entities (hosts, GPUs, ranks, Xids, versions) and a retrieval query."""
        ...

    def rerank_history(self, summary: IncidentSummary, candidates: list[PastIncident]) -> list[PastIncident]:
        """Order retrieved past incidents by how well their root cause fits this incident (best first)."""
        ...

    def rank_children(self, summary: IncidentSummary, parent: NodeInfo, children: list[NodeInfo],
                      memory: list[Observation], priors: dict[str, float]) -> list[Choice]:
        """Every child exactly once, most likely first; keep=False prunes a child."""
        ...

    def validate_leaf(self, summary: IncidentSummary, leaf: NodeInfo, evidence: Evidence,
                      results: list[CheckResult]) -> LeafJudgement:
        """Confirm, reject or leave open one leaf. `confirmed` needs evidence.strength strong or weak."""
        ...

    def explore(self, summary: IncidentSummary, memory: list[Observation], passages: list[KBPassage],
                tested: list[LeafJudgement]) -> list[ExplorationHypothesis]:
        """New hypotheses and manual steps when no leaf was confirmed."""
        ...

    def conclude(self, summary: IncidentSummary, confirmed: list[LeafJudgement],
                 memory: list[Observation]) -> str:
        """A short explanation of the root cause(s) for the report, citing the evidence."""
        ...
