"""The methods under test: AidAI (ours) and the four baselines of AidAI §6.1, over the same simulated hosts,
taxonomy, history and reasoner. Each returns an Outcome; the runner adds the wall time and the score.

    aidai       the full Diagnoser: pipeline 1 (history) → 2 (taxonomy DFS, widened once) → 3 (exploration);
                active checks approved (the hosts are simulated), no feedback rounds (nobody to answer)
    tgd         taxonomy-guided diagnosis only: the same graph with history off and no exploration
    rcacopilot  retrieve similar past incidents, choose one label once (the reasoner's rerank); no checks
    did         one-shot choice among every leaf from the description alone; no history, no checks
    cvd         comprehensive verification (AidAI §6.1): every verification script of the manifest, active ones
                included (approved: the hosts are simulated), on every host, then one decision from the incident
                text plus all results. Offline: the leaves with the strongest evidence by their evidence rules,
                the text breaking the tie; an LLM: one choice among a shortlist ordered the same way, all results
                in its prompt. CVD always names a cause, with or without evidence behind it

Every Outcome says how strong the check evidence behind its prediction is (`evidence`): a wrong prediction with
strong evidence is a false confirmation, the failure a fleet full of old, unrelated faults provokes.

Where a baseline makes its one choice it asks the run's reasoner (rerank_history / rank_children), so LLM calls
and tokens are counted the same way as ours. The baselines read the incident with the deterministic summary
(text signals, no model), so their one choice is their only LLM call.
"""

from __future__ import annotations

import hashlib
import importlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from langgraph.checkpoint.memory import InMemorySaver

from agent.agents import planning, reading
from agent.checks.runner import CheckRunner
from agent.diagnosis import Diagnoser
from agent.evidence import assess
from agent.executors.hosts import executors_for
from agent.graph.build import DiagnosisGraph
from agent.graph.state import DiagnosisState
from agent.incident import IncidentSummary
from agent.models import CheckResult
from agent.options import DiagnoseOptions
from agent.reasoning.base import Choice, EvidenceStrength, NodeInfo, Observation, Reasoner, Usage
from agent.reasoning.factory import make_reasoner
from agent.reasoning.offline import OfflineReasoner
from agent.report import Report
from agent.taxonomy import Taxonomy
from eval.harness.history import HistoryRetrieval
from eval.harness.problems import Problem

SHORTLIST = 12  # an LLM is offered at most this many leaves in one choice (the offline ranking picks them)
ROOT = NodeInfo(label="", description="every root cause of the taxonomy: choose the one that caused this incident")
NOT_RUN = "not run:"  # CheckRunner's summary of an unapproved check


@dataclass
class Env:
    """What a method acts with, per incident (the taxonomy, offline reasoner and retrieval live per worker)."""

    taxonomy: Taxonomy
    offline: OfflineReasoner
    retrieval: HistoryRetrieval
    hosts: list[str]
    data_dir: str
    llm: str = "offline"
    base_url: str | None = None
    model: str | None = None
    knowledge: bool = True

    def reasoner(self) -> Reasoner:
        """The offline reasoner is shared (its caches are per worker; its usage stays zero); an LLM reasoner is
        fresh per incident so its usage is the incident's."""
        return make_reasoner(self.llm, self.base_url, self.model, self.offline)

    def runner(self) -> CheckRunner:
        return CheckRunner(executors_for(self.hosts))


@dataclass
class Outcome:
    predicted: str | None  # the top confirmed (or chosen) leaf; None = escalated / unresolved
    confirmed: list[str] = field(default_factory=list)
    pipeline: int | None = None  # aidai/tgd: 1, 2, 3 or 0 (unresolved); one-shot methods: None
    path: list[str] = field(default_factory=list)
    explored: list[str] = field(default_factory=list)  # labels pipeline 3 pointed at, when unresolved
    checks: dict[str, float] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    nearest_history: float | None = None  # similarity of the closest past incident retrieved (leakage check)
    # check evidence behind `predicted` by the leaf's evidence rules: strong | weak | none; None = no prediction,
    # or a method that runs no checks (rcacopilot, did)
    evidence: str | None = None
    # the level of `predicted` (confirmed | probable; aidai and tgd) and the claim's confidence; the causes it
    # suspected when it could claim none (the view hid their tools)
    level: str | None = None
    confidence: float | None = None
    suspected: list[str] = field(default_factory=list)
    # what the conclusion was drawn from (aidai, tgd; rows carry it with --trace): every judged leaf with its
    # evidence, the diagnosis path, the similar past incidents, and how each confirmed leaf is tied to the incident
    trace: dict[str, Any] | None = None


class Method(Protocol):
    name: str
    needs_embeddings: bool

    def diagnose(self, problem: Problem, env: Env) -> Outcome: ...


def check_costs(runner: CheckRunner | None) -> dict[str, float]:
    """Checks actually run in this incident, one per (host, check) — the cache never counts one twice — and the
    manifest's expected seconds for them (what a real run would spend), split by tier."""
    ran = [r for r in (runner.cache.values() if runner else []) if not r.summary.startswith(NOT_RUN)]
    active = [r for r in ran if r.tier != "passive"]
    return {"checks_run": len(ran), "active_checks": len(active),
            "check_s": round(sum(r.expected_cost_s for r in ran), 3),
            "active_check_s": round(sum(r.expected_cost_s for r in active), 3),
            "check_wait_s": round(runner.wall_s, 3) if runner else 0.0}


def usage_of(reasoner: Reasoner, before: Usage | None = None) -> dict[str, int]:
    now = getattr(reasoner, "usage", None) or Usage()
    base = before or Usage()
    return {"llm_calls": now.calls - base.calls, "tokens_in": now.prompt_tokens - base.prompt_tokens,
            "tokens_out": now.completion_tokens - base.completion_tokens,
            "llm_fallbacks": now.fallbacks - base.fallbacks}


def _snapshot(reasoner: Reasoner) -> Usage:
    u = getattr(reasoner, "usage", None) or Usage()
    return Usage(calls=u.calls, prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens,
                 fallbacks=u.fallbacks)


# ---- ours, and TGD (the same graph) --------------------------------------------------------------------------
class _NoExploration(planning.PlanningAgent):
    """TGD: when the taxonomy walk confirms nothing the incident is escalated at once (no pipeline 3)."""

    def explore(self, state: DiagnosisState) -> dict[str, Any]:
        return {"exploration": [], "path": state.trace(2, "", "escalate", "no exploration (TGD)")}


class AidAI:
    name = "aidai"
    needs_embeddings = True
    history = True
    exploration = True

    def diagnose(self, problem: Problem, env: Env) -> Outcome:
        runner, reasoner = env.runner(), env.reasoner()
        before = _snapshot(reasoner)
        options = DiagnoseOptions(hosts=env.hosts, approval="all", llm=env.llm, base_url=env.base_url,
                                  model=env.model, data_dir=env.data_dir, history=self.history,
                                  knowledge=env.knowledge and self.exploration, max_feedback_rounds=0,
                                  checkpoint=False)
        diagnoser = Diagnoser(options, taxonomy=env.taxonomy, reasoner=reasoner, retrieval=env.retrieval,
                              runner=runner)
        if not self.exploration:
            diagnoser.graph = DiagnosisGraph(diagnoser.tools, _NoExploration).build(InMemorySaver())
        try:
            report = diagnoser.run(problem.incident)
        finally:
            diagnoser.close()
        confirmed = [c.label for c in report.root_causes]
        first = report.root_causes[0] if report.root_causes else None
        return Outcome(predicted=confirmed[0] if confirmed else None, confirmed=confirmed, pipeline=report.pipeline,
                       evidence=primary_evidence(report), level=first.level if first else None,
                       confidence=first.confidence if first else None, suspected=[s.label for s in report.suspected],
                       path=[f"p{s.pipeline} {s.node}:{s.action}" for s in report.path
                             if s.action not in ("rank", "start", "enter")],
                       explored=list(dict.fromkeys(lb for h in report.exploration for lb in h.related_labels)),
                       checks=check_costs(runner), usage=usage_of(reasoner, before),
                       nearest_history=max((p.score for p in report.similar), default=None),
                       trace=trace_of(report))


def trace_of(report: Report) -> dict[str, Any]:
    return {"judgements": [j.model_dump(mode="json") for j in report.hypotheses],
            "path": [s.model_dump(mode="json") for s in report.path if s.action != "rank"],
            "similar": [[p.label, p.score] for p in report.similar],
            "pretriage_priors": [t.priors for t in report.pretriage if t.priors],
            "links": {c.label: c.link for c in [*report.root_causes, *report.follows, *report.also_found]}}


def primary_evidence(report: Report) -> str | None:
    """Evidence strength behind the report's primary root cause: its confirming judgement (the last one, when a
    leaf was judged in several pipelines). None when nothing was confirmed."""
    if not report.root_causes:
        return None
    primary = report.root_causes[0].label
    judged = [j for j in report.hypotheses if j.label == primary and j.status == "confirmed"]
    judged = judged or [j for j in report.hypotheses if j.label == primary]
    return evidence_word(judged[-1].evidence.strength) if judged else "none"


def evidence_word(strength: EvidenceStrength) -> str:
    """The row's evidence value: 'unknown' (no check of the leaf could decide) is no evidence either."""
    return strength if strength in ("strong", "weak") else "none"


class TGD(AidAI):
    name = "tgd"
    history = False
    exploration = False


# ---- one-shot baselines --------------------------------------------------------------------------------------
def choose(env: Env, reasoner: Reasoner, summary: IncidentSummary, candidates: list[NodeInfo],
           memory: list[Observation]) -> list[Choice]:
    """One choice among `candidates` by the run's reasoner (best first). An LLM gets the offline ranking's top
    SHORTLIST (a one-shot answer must name every offered leaf once, which 60 leaves would not fit)."""
    if reasoner is not env.offline and len(candidates) > SHORTLIST:
        order = [c.label for c in env.offline.rank_children(summary, ROOT, candidates, memory, {})][:SHORTLIST]
        by_label = {c.label: c for c in candidates}
        candidates = [by_label[lb] for lb in order]
    offered = {c.label for c in candidates}
    ranked = reasoner.rank_children(summary, ROOT, candidates, memory, {})
    return [c for c in ranked if c.label in offered]


def leaf_infos(taxonomy: Taxonomy) -> list[NodeInfo]:
    return [reading.node_info(taxonomy, leaf.label) for leaf in taxonomy.leaves()]


class RCACopilot:
    name = "rcacopilot"
    needs_embeddings = True

    def diagnose(self, problem: Problem, env: Env) -> Outcome:
        reasoner = env.reasoner()
        before = _snapshot(reasoner)
        summary = env.offline.summarize(problem.incident)
        similar = planning.similar_incidents(reasoner, summary, env.retrieval.similar, env.taxonomy)
        predicted = similar[0].label if similar else None
        return Outcome(predicted=predicted, confirmed=[predicted] if predicted else [],
                       path=[f"history {p.id}:{p.label} {p.score:.2f}" for p in similar[:3]] or ["no history"],
                       checks=check_costs(None), usage=usage_of(reasoner, before),
                       nearest_history=max((p.score for p in similar), default=None))


class DID:
    name = "did"
    needs_embeddings = True

    def diagnose(self, problem: Problem, env: Env) -> Outcome:
        reasoner = env.reasoner()
        before = _snapshot(reasoner)
        summary = env.offline.summarize(problem.incident)
        ranked = choose(env, reasoner, summary, leaf_infos(env.taxonomy), [])
        predicted = ranked[0].label if ranked else None
        return Outcome(predicted=predicted, confirmed=[predicted] if predicted else [],
                       path=[f"choose {c.label} {c.score:.2f}" for c in ranked[:3]],
                       checks=check_costs(None), usage=usage_of(reasoner, before))


# tiers of evidence; "none" (checks passed) and "unknown" (none could decide) tie, so where no leaf has evidence
# the text decides among all of them, as a reader of the incident would (an unchecked leaf is not thereby likelier)
STRENGTH: dict[str, int] = {"strong": 2, "weak": 1, "unknown": 0, "none": 0}


def leaf_strengths(taxonomy: Taxonomy, results: list[CheckResult]) -> dict[str, EvidenceStrength]:
    """Every leaf's evidence strength by its own evidence rules over all results (never by a model)."""
    return {leaf.label: assess(leaf.evidence, [r for r in results if r.check in leaf.checks]).strength
            for leaf in taxonomy.leaves()}


def cvd_candidates(env: Env, reasoner: Reasoner, summary: IncidentSummary, strength: dict[str, EvidenceStrength],
                   memory: list[Observation]) -> list[NodeInfo]:
    """Offline, the leaves of the strongest evidence tier (the text breaks the tie in `choose`). An LLM decides
    from all results itself: it is offered the SHORTLIST leaves that lead by evidence, then by the offline text fit,
    so a leaf with weaker evidence can still win on the text."""
    infos = leaf_infos(env.taxonomy)
    if reasoner is env.offline:
        best = max((STRENGTH[s] for s in strength.values()), default=0)
        return [info for info in infos if STRENGTH[strength[info.label]] == best]
    fit = {c.label: i for i, c in enumerate(env.offline.rank_children(summary, ROOT, infos, memory, {}))}
    order = sorted(infos, key=lambda info: (-STRENGTH[strength[info.label]], fit[info.label]))
    return order[:SHORTLIST]


class CVD:
    name = "cvd"
    needs_embeddings = True

    def diagnose(self, problem: Problem, env: Env) -> Outcome:
        runner, reasoner = env.runner(), env.reasoner()
        runner.approve = True  # every script, active ones too: the paper's CVD verifies everything (simulated hosts)
        before = _snapshot(reasoner)
        results = runner.run(runner.passive_ids(include_active=True))  # on every host of the scenario
        summary = env.offline.summarize(problem.incident)
        strength = leaf_strengths(env.taxonomy, results)
        memory = [Observation(node="ROOT", result=r) for r in results]
        candidates = cvd_candidates(env, reasoner, summary, strength, memory)
        ranked = choose(env, reasoner, summary, candidates, memory)
        predicted = ranked[0].label if ranked else None
        tiers = Counter(strength.values())
        return Outcome(predicted=predicted, confirmed=[predicted] if predicted else [],
                       path=[f"{len(results)} results; leaves with strong evidence {tiers['strong']}, weak "
                             f"{tiers['weak']}; offered {len(candidates)}"]
                       + [f"choose {c.label} ({strength[c.label]})" for c in ranked[:3]],
                       evidence=evidence_word(strength[predicted]) if predicted else None,
                       checks=check_costs(runner), usage=usage_of(reasoner, before))


METHODS: dict[str, type] = {m.name: m for m in (AidAI, RCACopilot, TGD, DID, CVD)}


def resolve_method(spec: str) -> Method:
    """A method by name, or `package.module:Class` (tests plug fake methods in this way)."""
    if spec in METHODS:
        return METHODS[spec]()  # type: ignore[no-any-return]
    module, sep, attr = spec.partition(":")
    if not sep:
        raise KeyError(f"unknown method {spec!r}; choose from {', '.join(METHODS)} (or module:Class)")
    return getattr(importlib.import_module(module), attr)()  # type: ignore[no-any-return]


def scenario_root(work: Path, method: str, problem: Problem) -> Path:
    """Where (method, incident)'s simulated hosts live. The name is a digest, never the incident id: the path shows
    up in check summaries and LLM prompts, and an id (or method name) there would tell the diagnosis something no
    real host would. The digest of both keeps it unique per (method, incident) within a worker."""
    digest = hashlib.sha256(f"{method}\0{problem.id}".encode()).hexdigest()[:12]
    return work / f"scenario-{digest}"
