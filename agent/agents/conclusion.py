"""Conclusion agent: which confirmed causes are this incident's (agents/attribution.py's claim model), at which
level (confirmed: tied by the incident's own lines, devices or time; probable: present, fitting, nothing better),
the explanation the reasoner writes for them, and the verdict the report and ticket carry. When nothing is claimed
because the view hid the tools, it names what is suspected and the commands that would check it; when no host could
be checked, or a limit stopped the run, it says so plainly without asking a reasoner."""

from __future__ import annotations

from typing import Any

from agent import limits as L
from agent.agents.attribution import Attribution, Suspected, attribute
from agent.agents.context import AgentTools
from agent.agents.reading import IncidentReading
from agent.audit_records import ConclusionRecord
from agent.events import ConclusionEvent
from agent.evidence import info_findings
from agent.graph.state import Conclusion, DiagnosisState
from agent.incident import IncidentSummary
from agent.models import CheckResult, Verdict
from agent.reasoning.base import LeafJudgement, Observation, Reasoner
from agent.taxonomy import Taxonomy

# at most SUSPECTED leaves, among the incident's SUSPECTED_WITHIN likeliest causes (its reading), are named as
# suspected when their checks could not see
SUSPECTED = 3
SUSPECTED_WITHIN = 10


class ConclusionAgent:
    def __init__(self, tools: AgentTools, reading: IncidentReading):
        self.t = tools
        self.reading = reading

    def attribute(self, state: DiagnosisState) -> Attribution:
        """Which confirmed leaves are this incident's causes, at which level (agents/attribution.py)."""
        confirmed = [j for j in state.judgements if j.status == "confirmed"]
        if not confirmed:
            return Attribution()
        hosts = len(state.inventory or {}) or len(state.incident.hosts)
        return attribute(self.t.taxonomy, state.summarized(), confirmed, state.judgements, self.reading.ranks(state),
                         hosts)

    def tied(self, state: DiagnosisState) -> list[LeafJudgement]:
        """The causes the incident's own lines, devices or time tie (level confirmed). The walk's decisions rest on
        these alone, never on a claim's score: the checks a run makes do not depend on the claim model's weights."""
        found = self.attribute(state)
        return [j for j in found.primary if found.levels.get(j.label) == "confirmed"]

    def conclude(self, state: DiagnosisState) -> dict[str, Any]:
        """Node: the conclusion, its evidence bundle kept before anyone reads it, the audit log's line."""
        found = self.attribute(state)
        ordered = found.primary
        stopped = state.stopped
        suspects: list[Suspected] = []
        results = list(state.results.values())
        if not state.checkable_hosts():  # nothing was looked at: say so plainly, no reasoner needed
            text = cannot_check_explanation(state)
        elif stopped:  # no LLM call: the budget may be what ran out, and the stop must be said plainly
            text = stopped_explanation(stopped, state, ordered)
        else:
            text = explain(self.t.reasoner, state.summarized(), found, state.memory)
            if state.inventory and all(v.expectations.cannot_check for v in state.inventory.values()):
                # the job's logs carried the diagnosis: say what could not be looked at
                text = " ".join([*unchecked(state), "Only the job's attached logs were read.", text])
            if not ordered:
                suspects = suspected(self.t.taxonomy, state.judgements, results, self.reading.ranks(state))
                text += suspected_sentence(suspects)
        # the pipeline that first confirmed the primary cause (after the user's feedback, pipeline 2 counts as 3)
        pipeline = next((step.pipeline for step in state.path if ordered
                         and step.node == ordered[0].label and step.action == "confirmed"), 0)
        if pipeline == 2 and state.feedback:
            pipeline = 3
        out = result(found, suspects, text, pipeline, stopped)
        causes = roles(found)
        if causes and self.t.preserve is not None:  # before anyone reads the conclusion and acts on it
            out.evidence_bundle = self.t.preserve(results, state.inventory or {}, causes)
        self.t.emit(ConclusionEvent(**dict(out)))
        self.t.audit(audit_record(out, state.spent))
        return {"conclusion": out, "pipeline": pipeline}


def explain(reasoner: Reasoner, summary: IncidentSummary, found: Attribution, memory: list[Observation]) -> str:
    text = reasoner.conclude(summary, found.primary, memory)
    if found.primary and found.levels.get(found.primary[0].label) == "probable":
        head = found.primary[0]
        claim = f"{head.label} (claim {found.claims[head.label]:.2f})"
        text = f"Probable cause: {claim}: {found.links[head.label]}. {text}"
    if found.follows:
        text += " What followed from it: " + "; ".join(
            f"{j.label} ({found.links[j.label]})" for j in found.follows) + "."
    return text


def suspected(taxonomy: Taxonomy, judgements: list[LeafJudgement], results: list[CheckResult],
              reading: dict[str, int]) -> list[Suspected]:
    """The incident's likeliest causes whose checks could not see (UNKNOWN: a tool missing or refused in this
    view, or a check that said it could not see what this leaf needs), each with the commands its checks tried. Only
    when nothing was claimed: a suspicion is not an answer. A check that was only not given an input (a checkpoint
    directory, the job's logs) hid nothing: no suspicion."""
    inconclusive = {j.label: j for j in judgements if j.status == "inconclusive" and j.evidence.unknown}
    out: list[Suspected] = []
    for label in sorted(reading, key=reading.__getitem__)[:SUSPECTED_WITHIN]:
        judgement = inconclusive.get(label)
        if judgement is None:
            continue
        if len(out) == SUSPECTED:
            break
        leaf = taxonomy.node(label)
        blind = [r for r in results if r.check in leaf.checks
                 and ((r.verdict == Verdict.UNKNOWN and not r.needs) or info_findings(r, leaf.unseen))]
        if not blind:
            continue
        commands = list(dict.fromkeys(cmd for r in blind for cmd in r.cmds))
        commands += [f"aidai checks run {check} --host <the host>" for check in sorted({r.check for r in blind})]
        out.append(Suspected(label=label, rank=reading[label], why="; ".join(judgement.evidence.unknown[:3]),
                             commands=commands))
    return out


def suspected_sentence(found: list[Suspected]) -> str:
    if not found:
        return ""
    return " Suspected (not checked: this view cannot see it): " + "; ".join(
        f"{s.label} (likely cause no. {s.rank} of the incident's text; {s.why})" for s in found) + \
        ". Whoever can see the hosts (the provider) should run: " + "; ".join(
        dict.fromkeys(c for s in found for c in s.commands[:4])) + "."


def roles(found: Attribution) -> list[tuple[str, LeafJudgement]]:
    """Every confirmed leaf with its role in the conclusion: root_cause | follows | also_found."""
    return ([("root_cause", j) for j in found.primary] + [("follows", j) for j in found.follows]
            + [("also_found", j) for j in found.also_found])


def result(found: Attribution, suspected: list[Suspected], text: str, pipeline: int,
           stopped: L.Stop | None) -> Conclusion:
    """The conclusion as the state keeps it, the report reads it and the faces receive it."""
    if found.also_found:
        text += " Also found on the hosts, not the cause of this incident: " + "; ".join(
            f"{j.label} ({found.links[j.label]})" for j in found.also_found) + "."
    return Conclusion(resolved=bool(found.primary), pipeline=pipeline, root_causes=found.primary,
                      follows=found.follows, also_found=found.also_found, links=found.links, levels=found.levels,
                      claims=found.claims, suspected=suspected, explanation=text, stopped=stopped or None)


def audit_record(result: Conclusion, spent: L.Spent) -> ConclusionRecord:
    """The audit log's record of a conclusion: what was claimed, at which level, and what else was found."""
    def labels(items: list[LeafJudgement] | list[Suspected]) -> list[str]:
        return [j.label for j in items]

    return ConclusionRecord(resolved=result.resolved, pipeline=result.pipeline, root_causes=labels(result.root_causes),
                            levels=result.levels, follows=labels(result.follows), also_found=labels(result.also_found),
                            suspected=labels(result.suspected),
                            stopped=dict(result.stopped) if result.stopped else None, spent=dict(spent))


def cannot_check_explanation(state: DiagnosisState) -> str:
    """The answer when no host could be checked: which, why, and that nothing was confirmed or rejected."""
    return " ".join([*unchecked(state), "Nothing was confirmed or rejected: no verification ran. Run aidai on the "
                     "GPU node, or name the node with --host; escalate with this ticket if the node itself cannot be "
                     "reached."])


def unchecked(state: DiagnosisState) -> list[str]:
    """Each host the inventory found and why its checks could not run, as sentences."""
    lines = [view.expectations.line() + "." for view in (state.inventory or {}).values()]
    return [line[0].upper() + line[1:] for line in lines]


def stopped_explanation(stop: L.Stop, state: DiagnosisState, confirmed: list[LeafJudgement]) -> str:
    """The conclusion of a stopped run: which limit, and what was tried before it (for the escalation)."""
    results = state.results.values()
    judged = state.judgements
    counts = {s: sum(j.status == s for j in judged) for s in ("confirmed", "rejected", "inconclusive")}
    last = next((step.node for step in reversed(state.path) if step.node not in ("", "ROOT")), "")
    parts = [f"Investigation stopped: {stop['message']}.",
             f"Tried so far: {state.spent.get('checks', len(results))} check run(s) on "
             f"{len({r.host for r in results}) or 'the'} host(s); "
             f"{len(judged)} hypothesis(es) tested ({counts['confirmed']} confirmed, {counts['rejected']} rejected, "
             f"{counts['inconclusive']} inconclusive)" + (f"; last node {last}." if last else ".")]
    if confirmed:
        parts.append("Confirmed before the stop: " + ", ".join(j.label for j in confirmed) + ".")
    else:
        parts.append("No root cause was confirmed before the stop: escalate with this ticket, or run it again "
                     "with a higher limit.")
    return " ".join(parts)
