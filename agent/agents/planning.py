"""Planning agent: which hypotheses are tested, in which order (AidAI Algorithm 1).

Pipeline 1 (`historical`): the root causes of the most similar past incidents, then their sibling leaves once one is
confirmed. Pipeline 2 (`dfs_init`, `dfs`): a depth-first walk of the taxonomy on an explicit stack, one move per
graph step: a node's children ranked by the reasoner and pruned, a leaf tested and judged (reflection), the branch's
memory cleared on backtracking, each node entered at most once per pass; `widen` walks again through every branch
with an untested leaf when the focused walk confirmed nothing. Pipeline 3 (`explore`): suggestions from the knowledge
base when the taxonomy is exhausted."""

from __future__ import annotations

from typing import Any

from agent.agents.conclusion import ConclusionAgent
from agent.agents.context import AgentTools, Retrieve
from agent.agents.execution import ExecutionAgent
from agent.agents.reading import IncidentReading, node_info, priors
from agent.agents.reflection import ReflectionAgent
from agent.events import ExplorationEvent, HistoryEvent, HypothesisEvent, LoopEvent, RankEvent, WidenEvent
from agent.evidence import unexplained
from agent.graph.guard import Guard
from agent.graph.state import DiagnosisState, Frame, Step
from agent.incident import IncidentSummary
from agent.models import CheckResult
from agent.reasoning.base import Choice, NodeInfo, Observation, PastIncident, Reasoner
from agent.taxonomy import Taxonomy

HISTORY_K = 8
HYPOTHESES = 2  # AidAI takes the root causes of the two most similar incidents
MIN_SIMILARITY = 0.35  # below this a past incident is not similar enough to test its root cause


class PlanningAgent:
    def __init__(self, tools: AgentTools, guard: Guard, execution: ExecutionAgent, reflection: ReflectionAgent,
                 conclusion: ConclusionAgent, reading: IncidentReading):
        self.t = tools
        self.guard = guard
        self.execution = execution
        self.reflection = reflection
        self.conclusion = conclusion
        self.reading = reading

    def historical(self, state: DiagnosisState) -> dict[str, Any]:
        """Node, pipeline 1: test the causes of similar past incidents."""
        similar = (similar_incidents(self.t.reasoner, state.summarized(), self.t.retrieve, self.t.taxonomy)
                   if self.t.retrieve else [])
        self.t.emit(HistoryEvent(similar=similar[:5]))
        update: dict[str, Any] = {"similar": similar, "priors": priors(similar, state.pretriage_priors)}
        judgements = list(state.judgements)
        path = list(state.path)
        memory: list[Observation] = []
        hypotheses = history_hypotheses(similar)
        tested: set[str] = set()
        while hypotheses and not self.guard.stopped:
            label = hypotheses.pop(0)
            tested.add(label)
            results, judgement, changes = self.reflection.test(state.merged(update), label, 1)
            update.update(changes)
            memory += observations(label, results)
            judgements = [j for j in judgements if j.label != label] + [judgement]
            path.append(Step(pipeline=1, node=label, action=judgement.status, detail=judgement.why))
            if judgement.status == "confirmed":
                # a confirmed leaf's siblings share its checks: test them too, for secondary causes
                siblings = [n.label for n in self.t.taxonomy.node(label).siblings if n.is_leaf]
                hypotheses += [s for s in siblings if s not in tested and s not in hypotheses]
        confirmed = [j for j in judgements if j.status == "confirmed"]
        if confirmed and (left := unexplained(list(state.merged(update).results.values()),
                                              [self.t.taxonomy.node(j.label).evidence for j in confirmed],
                                              [leaf.evidence for leaf in self.t.taxonomy.leaves()])):
            # history found a cause, but some failure it does not explain: search the taxonomy for the rest
            path.append(Step(pipeline=1, node="ROOT", action="continue",
                             detail="not explained: " + ", ".join(left[:5])))
            confirmed = []
        merged = state.merged({**update, "judgements": judgements})
        if (confirmed and not self.conclusion.tied(merged)
                and not {j.label for j in confirmed} & set(self.reading.likeliest(merged))):
            # on the hosts, but nothing ties it to this incident and the incident does not read like it: most likely
            # an old problem the hosts carry; search on (one it reads like ends the search, as follow_reading would)
            path.append(Step(pipeline=1, node="ROOT", action="continue",
                             detail="confirmed, but nothing ties it to this incident: " + ", ".join(
                                 j.label for j in confirmed)))
            confirmed = []
        update.update({"judgements": judgements, "path": path, "memory": memory,
                       "pipeline": 1 if confirmed else 0})
        return update

    def dfs_init(self, state: DiagnosisState) -> dict[str, Any]:
        """Node: a fresh walk from the root (again after `widen` or the user's feedback)."""
        return {"stack": [Frame(label="", mark=len(state.memory))], "visited": [], "path": state.trace(2, "", "start")}

    def dfs(self, state: DiagnosisState) -> dict[str, Any]:
        """Node, pipeline 2: one move of Algorithm 1 on the explicit stack."""
        stack = [f.model_copy() for f in state.stack]
        frame = stack[-1]
        label = frame.label
        memory = list(state.memory)
        if frame.phase == "children":
            return self._next_child(state, stack, memory)
        update: dict[str, Any] = {}
        results: list[CheckResult] = []
        if label:
            results, update = self.execution.execute(state, label)
            memory += observations(label, results)
        merged = state.merged({**update, "memory": memory})
        if label and self.t.taxonomy.node(label).is_leaf:
            # judged again even if pipeline 1 or an earlier round did: checks are cached, the text may be newer
            judgement = self.reflection.judge(merged, label, 2)
            judgements = [j for j in state.judgements if j.label != label] + [judgement]
            stack.pop()
            return {**update, "stack": stack, "memory": memory[:frame.mark], "judgements": judgements,
                    "path": state.trace(2, label, judgement.status, judgement.why)}
        untested = None
        if state.widened:
            judged = {j.label for j in state.judgements}
            untested = {leaf.label for leaf in self.t.taxonomy.leaves(label)} - judged
        ranked = rank_children(self.t.reasoner, self.t.taxonomy, state.summarized(), label, merged.memory,
                               state.priors, untested)
        kept = [c.label for c in ranked if c.keep]
        self.t.emit(RankEvent(node=label or "ROOT", ranked=ranked))
        detail = "; ".join(f"{c.label.rsplit('.', 1)[-1]} {c.score:.2f}{'' if c.keep else ' (pruned)'}"
                           for c in ranked)
        path = state.trace(2, label, "rank", detail)
        if not kept:
            stack.pop()
            path.append(Step(pipeline=2, node=label, action="early_stop", detail="no child is relevant"))
            return {**update, "stack": stack, "memory": memory[:frame.mark], "path": path}
        stack[-1] = frame.model_copy(update={"phase": "children", "children": kept, "next": 0})
        return {**update, "stack": stack, "memory": memory, "path": path}

    def _next_child(self, state: DiagnosisState, stack: list[Frame], memory: list[Observation]) -> dict[str, Any]:
        """Enter the frame's next kept child, or backtrack when none is left (its branch's memory is cleared)."""
        frame = stack[-1]
        if frame.next >= len(frame.children):
            stack.pop()
            return {"stack": stack, "memory": memory[:frame.mark]}  # ClearMemory on backtrack
        child = frame.children[frame.next]
        frame.next += 1
        if child in state.visited or any(f.label == child for f in stack):
            # loop breaker: a node is entered at most once per pass of the walk
            self.t.emit(LoopEvent(node=child))
            return {"stack": stack, "path": state.trace(2, child, "loop", "already visited in this pass: skipped")}
        stack.append(Frame(label=child, mark=len(memory)))
        self.t.emit(HypothesisEvent(node=child, depth=len(stack) - 1))
        return {"stack": stack, "visited": [*state.visited, child], "path": state.trace(2, child, "enter")}

    def widen(self, state: DiagnosisState) -> dict[str, Any]:
        """Node: the focused walk confirmed nothing: walk again visiting every branch with an untested leaf (passive
        checks are read-only and cached, so this costs only the checks not run yet)."""
        self.t.emit(WidenEvent())
        return {"widened": True, "path": state.trace(2, "", "widen", "nothing confirmed: every branch")}

    def explore(self, state: DiagnosisState) -> dict[str, Any]:
        """Node, pipeline 3: hypotheses outside the taxonomy from the knowledge base, for the user to act on."""
        summary = state.summarized()
        passages = self.t.kb_query(summary.query, 4) if self.t.kb_query else []
        hypotheses = self.t.reasoner.explore(summary, state.memory, passages, state.judgements)
        self.t.emit(ExplorationEvent(hypotheses=hypotheses))
        return {"exploration": hypotheses, "path": state.trace(3, "", "explore", f"{len(hypotheses)} suggestions")}


def observations(label: str, results: list[CheckResult]) -> list[Observation]:
    """What the planner sees of a node's checks (its branch's memory)."""
    return [Observation(node=label, result=r) for r in results]


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


def rank_children(reasoner: Reasoner, taxonomy: Taxonomy, summary: IncidentSummary, label: str,
                  memory: list[Observation], prior: dict[str, float], untested: set[str] | None = None) -> list[Choice]:
    """`untested` (the widened pass): keep every child with a leaf not judged yet, whatever its rank."""
    children = [node_info(taxonomy, child.label) for child in taxonomy.children(label)]
    parent = node_info(taxonomy, label) if label else NodeInfo(label="", description="all incidents")
    ranked = reasoner.rank_children(summary, parent, children, memory, prior)
    offered = {c.label for c in children}
    # a reasoner must answer about exactly the offered children; anything else is dropped
    clean: list[Choice] = []
    seen: set[str] = set()
    for choice in ranked:
        if choice.label in offered and choice.label not in seen:
            seen.add(choice.label)
            clean.append(choice)
    clean += [Choice(label=lb, score=0.0, keep=False, why="not ranked") for lb in sorted(offered - seen)]
    if untested is None:
        return clean
    return [c.model_copy(update={"keep": True, "why": f"{c.why}; widened search"})
            if not c.keep and any(leaf.label in untested for leaf in taxonomy.leaves(c.label)) else c for c in clean]
