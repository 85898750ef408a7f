"""The diagnosis state LangGraph checkpoints after every step: plain JSON-able data only, so a run can be
resumed by another process (pydantic objects are dumped on the way in and rebuilt on the way out)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypedDict

from agent.incident import Incident, IncidentSummary
from agent.limits import Spent, Stop
from agent.models import CheckResult
from agent.reasoning.base import LeafJudgement, Observation

RAW_IN_STATE = 1024  # the ticket hashes the full output; the checkpoint keeps an excerpt


class Frame(TypedDict):
    """One DFS stack entry: a taxonomy node being entered, or whose kept children are being visited."""

    label: str
    phase: str  # enter | children
    children: list[str]
    next: int
    mark: int  # len(memory) when the node was entered: backtracking clears the branch's memory to here


class DiagnosisState(TypedDict, total=False):
    incident: dict[str, Any]
    summary: dict[str, Any]
    inventory: dict[str, dict[str, Any]]  # host -> {inventory, expectations} (agent/inventory.py)
    pretriage: list[dict[str, Any]]
    pretriage_priors: dict[str, float]
    similar: list[dict[str, Any]]
    priors: dict[str, float]
    results: dict[str, dict[str, Any]]  # "host|check" -> CheckResult: everything run, for resume and ticket
    memory: list[dict[str, Any]]  # Observations the planner sees (branch-scoped during the DFS)
    stack: list[Frame]
    widened: bool  # the second DFS pass that visits every branch with an untested leaf
    read_followed: bool  # the incident's likeliest causes the walk left untested were tested (follow_reading)
    judgements: list[dict[str, Any]]  # every leaf tested, in order
    path: list[dict[str, Any]]  # {pipeline, node, action, detail}: the DFS trace for the report
    approvals: dict[str, bool]  # check id -> the user's answer for active/intrusive checks
    approved_by: dict[str, str]  # check id -> who answered (an operator's name, or the run's owner under a policy)
    visited: list[str]  # nodes entered in this pass of the DFS (the loop breaker enters each at most once)
    spent: Spent  # checks, seconds, tokens and steps used so far
    stopped: Stop  # the limit that ended the investigation, if one did
    pipeline: int  # the pipeline that confirmed the root cause; 0 while none has
    exploration: list[dict[str, Any]]
    feedback: list[str]
    feedback_rounds: int
    conclusion: dict[str, Any]


def result_key(result: CheckResult) -> str:
    return f"{result.host}|{result.check}"


def dump_result(result: CheckResult) -> dict[str, Any]:
    return result.model_dump(mode="json") | {"raw_excerpt": result.raw_excerpt[:RAW_IN_STATE]}


# The loaders read any mapping of the state's shape: a node reads the state merged with its own update so far
# ({**state, **update}) before it returns that update.
def load_results(state: Mapping[str, Any]) -> list[CheckResult]:
    return [CheckResult.model_validate(r) for r in state.get("results", {}).values()]


def load_memory(state: Mapping[str, Any]) -> list[Observation]:
    return [Observation.model_validate(o) for o in state.get("memory", [])]


def load_judgements(state: Mapping[str, Any]) -> list[LeafJudgement]:
    return [LeafJudgement.model_validate(j) for j in state.get("judgements", [])]


def load_summary(state: Mapping[str, Any]) -> IncidentSummary:
    return IncidentSummary.model_validate(state["summary"])


def dump_judgements(judgements: list[LeafJudgement]) -> list[dict[str, Any]]:
    return [j.model_dump(mode="json") for j in judgements]


def trace(state: Mapping[str, Any], pipeline: int, node: str, action: str, detail: str = "") -> list[dict[str, Any]]:
    """The state's path with one step added (the report's trace of the walk)."""
    return [*state.get("path", []), {"pipeline": pipeline, "node": node or "ROOT", "action": action,
                                     "detail": detail}]


def incident_time(incident: dict[str, Any]) -> float | None:
    """The incident's time (epoch seconds) from its checkpointed form, when it gives one: the checks' `incident_at`."""
    at = incident.get("at")
    return datetime.fromisoformat(at).timestamp() if at else None


def initial_state(incident: Incident) -> DiagnosisState:
    return {"incident": incident.model_dump(mode="json"), "results": {}, "memory": [], "judgements": [], "path": [],
            "approvals": {}, "approved_by": {}, "pipeline": 0, "feedback": [], "feedback_rounds": 0, "spent": {}}
