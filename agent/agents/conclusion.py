"""Conclusion agent: writes the explanation of the claimed root causes (agents/attribution.py decides which, at
which level), and, when none is claimed because the view hid the tools, what is suspected and how to check it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agent.agents.attribution import Attribution
from agent.incident import IncidentSummary
from agent.models import CheckResult, Verdict
from agent.reasoning.base import LeafJudgement, Observation, Reasoner
from agent.taxonomy import Taxonomy

# at most SUSPECTED leaves, among the incident's SUSPECTED_WITHIN likeliest causes (its reading), are named as
# suspected when their checks could not see
SUSPECTED = 3
SUSPECTED_WITHIN = 10


class Suspected(BaseModel):
    """A cause the text and history point to that no check here could see: suspected (not checked), with the
    commands whoever can see it (the provider, on the host) must run."""

    label: str
    rank: int  # its place in the incident's reading before any check
    why: str  # why it could not be checked here
    commands: list[str] = Field(default_factory=list)


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
    """The incident's likeliest causes whose checks could not decide (UNKNOWN: a tool missing or refused in this
    view), each with the commands its checks tried. Only when nothing was claimed: a suspicion is not an answer."""
    inconclusive = {j.label: j for j in judgements if j.status == "inconclusive" and j.evidence.unknown}
    out: list[Suspected] = []
    for label in sorted(reading, key=reading.__getitem__)[:SUSPECTED_WITHIN]:
        judgement = inconclusive.get(label)
        if judgement is None:
            continue
        if len(out) == SUSPECTED:
            break
        checks = set(taxonomy.node(label).checks)
        blind = [r for r in results if r.check in checks and r.verdict == Verdict.UNKNOWN]
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
           stopped: dict[str, Any] | None) -> dict[str, Any]:
    """The conclusion as the state keeps it, the report reads it and the faces receive it."""
    if found.also_found:
        text += " Also found on the hosts, not the cause of this incident: " + "; ".join(
            f"{j.label} ({found.links[j.label]})" for j in found.also_found) + "."
    out: dict[str, Any] = {
        "resolved": bool(found.primary), "pipeline": pipeline,
        "root_causes": [j.model_dump(mode="json") for j in found.primary],
        "follows": [j.model_dump(mode="json") for j in found.follows],
        "also_found": [j.model_dump(mode="json") for j in found.also_found], "links": found.links,
        "levels": found.levels, "claims": found.claims,
        "suspected": [s.model_dump(mode="json") for s in suspected], "explanation": text}
    if stopped:
        out["stopped"] = dict(stopped)
    return out


def audit_event(result: dict[str, Any]) -> dict[str, Any]:
    """The audit log's line for a conclusion: what was claimed, at which level, and what else was found."""
    def labels(key: str) -> list[str]:
        return [j["label"] for j in result[key]]

    return {"event": "conclusion", "resolved": result["resolved"], "pipeline": result["pipeline"],
            "root_causes": labels("root_causes"), "levels": result["levels"], "follows": labels("follows"),
            "also_found": labels("also_found"), "suspected": labels("suspected"),
            "stopped": result.get("stopped") or None}
