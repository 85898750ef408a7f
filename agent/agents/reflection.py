"""Reflection agent: judges each leaf hypothesis on the evidence of its checks (confirmed, rejected or left open),
and before the conclusion weighs what the walk found: when what was confirmed explains nothing of this incident it
tests the incident's likeliest causes still untested (`follow_reading`); it tests the untested leaves the taxonomy
says bring a confirmed one with them (`test_causes`: found, they are the cause); and when several confirmed causes
tie to the incident it runs the active checks their passive evidence let the walk skip and judges them again on
everything (`corroborate`), so which comes first rests on all the evidence, not on the visiting order."""

from __future__ import annotations

from typing import Any

from agent.agents.conclusion import ConclusionAgent
from agent.agents.context import AgentTools
from agent.agents.execution import ExecutionAgent
from agent.agents.reading import IncidentReading, node_info
from agent.events import JudgementEvent
from agent.evidence import assess
from agent.graph.guard import Guard
from agent.graph.state import DiagnosisState, Step
from agent.incident import IncidentSummary
from agent.models import CheckResult
from agent.reasoning.base import LeafJudgement, Reasoner
from agent.taxonomy import Taxonomy


class ReflectionAgent:
    def __init__(self, tools: AgentTools, guard: Guard, execution: ExecutionAgent, reading: IncidentReading,
                 conclusion: ConclusionAgent):
        self.t = tools
        self.guard = guard
        self.execution = execution
        self.reading = reading
        self.conclusion = conclusion

    def judge(self, state: DiagnosisState, label: str, pipeline: int) -> LeafJudgement:
        judgement = validate(self.t.reasoner, self.t.taxonomy, state.summarized(), label,
                             list(state.results.values()))
        self.t.emit(JudgementEvent(pipeline=pipeline, **judgement.model_dump()))
        return judgement

    def test(self, state: DiagnosisState, label: str, pipeline: int,
             ) -> tuple[list[CheckResult], LeafJudgement, dict[str, Any]]:
        """Run a leaf's checks and judge it: (its results, its judgement, the state's update from the checks)."""
        results, update = self.execution.execute(state, label)
        return results, self.judge(state.merged(update), label, pipeline), update

    def test_each(self, state: DiagnosisState, labels: list[str], pipeline: int, action: str, detail: str,
                  update: dict[str, Any] | None = None) -> dict[str, Any]:
        """Test these leaves in turn (until a limit stops the run): the state's update, with each one's judgement
        and a step on the path."""
        update = dict(update or {})
        judgements = list(state.judgements)
        path = state.trace(pipeline, "", action, detail)
        for label in labels:
            if self.guard.stopped:
                break
            _, judgement, changes = self.test(state.merged(update), label, pipeline)
            update.update(changes)
            judgements = [j for j in judgements if j.label != label] + [judgement]
            path.append(Step(pipeline=pipeline, node=label, action=judgement.status, detail=judgement.why))
        return {**update, "path": path, "judgements": judgements}

    def follow_reading(self, state: DiagnosisState) -> dict[str, Any]:
        """Node: what the walk confirmed does not explain this incident (old or unrelated problems the hosts carry):
        test the incident's likeliest causes the walk left untested before concluding."""
        return self.test_each(state, self.reading.unread(state), 2, "follow_reading",
                              "what was confirmed does not explain the incident", {"read_followed": True})

    def test_causes(self, state: DiagnosisState) -> dict[str, Any]:
        """The untested leaves the taxonomy says bring a confirmed leaf with them (`implies`: a node never
        provisioned has no container runtime configured): found, one of them is the cause and the confirmed leaf
        what followed from it, so they are tested before concluding."""
        confirmed = {j.label for j in state.judgements if j.status == "confirmed"}
        judged = {j.label for j in state.judgements}
        causes = [leaf.label for leaf in self.t.taxonomy.leaves()
                  if leaf.label not in judged and confirmed & set(leaf.implies)]
        if not causes:
            return {}
        return self.test_each(state, causes, state.pipeline or 2, "test_causes",
                              "what would bring what was confirmed: " + ", ".join(causes))

    def corroborate(self, state: DiagnosisState) -> dict[str, Any]:
        """Node: first the untested causes of what was confirmed (`test_causes`); then, when several confirmed
        leaves tie to the incident, run the active checks their passive evidence let us skip, and judge them again on
        everything. A confirmed leaf nothing ties to the incident is not this incident's cause whatever its
        strength, so minutes of load on the hosts would not change the answer: it is reported as found."""
        causes = self.test_causes(state)
        state = state.merged(causes) if causes else state
        return {**causes, **self._corroborate(state)}

    def _corroborate(self, state: DiagnosisState) -> dict[str, Any]:
        confirmed = self.conclusion.tied(state)
        if len(confirmed) < 2:
            return {}
        update: dict[str, Any] = {}
        path = list(state.path)
        pipeline = state.pipeline or 2
        missing = self.execution.active_missing(state, [j.label for j in confirmed])
        if not any(missing.values()) or self.guard.stopped:
            return {}
        # one question for every cause: asked once, it is not asked again when the node resumes
        purpose = (", ".join(j.label for j in confirmed) + " are each confirmed and tied to the incident: the tests "
                   "decide which of them comes first in the answer")
        approvals, approvers = self.execution.decide(state, "corroborate", [c for v in missing.values() for c in v],
                                                     purpose)
        update["approvals"], update["approved_by"] = approvals, approvers
        for judgement in confirmed:
            if self.guard.stopped:
                break
            if missing[judgement.label]:
                _, changes = self.execution.execute(state.merged(update), judgement.label, costly_too=True)
                update.update(changes)
                path.append(Step(pipeline=pipeline, node=judgement.label, action="corroborate",
                                 detail=", ".join(missing[judgement.label])))
        if not update:
            return {}
        results = list(state.merged(update).results.values())
        fresh = {j.label: validate(self.t.reasoner, self.t.taxonomy, state.summarized(), j.label, results)
                 for j in confirmed}
        judgements = [fresh.get(j.label, j) for j in state.judgements]
        return {**update, "path": path, "judgements": judgements}


def validate(reasoner: Reasoner, taxonomy: Taxonomy, summary: IncidentSummary, label: str,
             results: list[CheckResult]) -> LeafJudgement:
    """The reasoner's judgement of one leaf on its checks' evidence; only check evidence confirms."""
    leaf = taxonomy.node(label)
    mine = [r for r in results if r.check in leaf.checks]
    evidence = assess(leaf.evidence, mine, leaf.undecided, leaf.unseen)
    judgement = reasoner.validate_leaf(summary, node_info(taxonomy, label), evidence, mine)
    if judgement.status == "confirmed" and evidence.strength not in ("strong", "weak"):
        # whatever a reasoner says, no evidence means not confirmed
        judgement = judgement.model_copy(update={"status": "inconclusive", "why": "no check evidence; "
                                                 + judgement.why})
    return judgement.model_copy(update={"evidence": evidence})
