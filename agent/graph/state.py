"""The diagnosis state: one typed model the agents' nodes read, and the JSON LangGraph checkpoints after every step.

The graph's state schema is `DiagnosisState` (pydantic): LangGraph validates the checkpointed channels into it
before each node, so a node reads typed members (`state.results`, `state.judgements` …) and returns an update of
typed values; the guard (agent/graph/guard.py) writes that update back as JSON (`channels`). The checkpoint holds
plain JSON only — the same keys and values as before the state was typed — so a run can be resumed by another
process or another version of aidai, and a Postgres store shared by a team holds no Python class paths.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from agent.agents.attribution import Suspected
from agent.incident import Incident, IncidentSummary
from agent.inventory import HostView
from agent.limits import Spent, Stop
from agent.models import CheckResult, ToolResult
from agent.reasoning.base import ExplorationHypothesis, LeafJudgement, Observation, PastIncident

RAW_IN_STATE = 1024  # the ticket hashes the full output; the checkpoint keeps an excerpt


class Frame(BaseModel):
    """One DFS stack entry: a taxonomy node being entered, or whose kept children are being visited."""

    label: str
    phase: Literal["enter", "children"] = "enter"
    children: list[str] = Field(default_factory=list)
    next: int = 0
    mark: int  # len(memory) when the node was entered: backtracking clears the branch's memory to here


class Step(BaseModel):
    """One step of the walk as the report's trace shows it."""

    pipeline: int
    node: str
    action: str  # enter | rank | early_stop | confirmed | rejected | inconclusive | explore | feedback | start …
    detail: str = ""


class Conclusion(BaseModel):
    """The conclusion as the state keeps it, the report reads it and the faces receive it (agents/conclusion.py)."""

    resolved: bool
    pipeline: int
    root_causes: list[LeafJudgement]
    follows: list[LeafJudgement]
    also_found: list[LeafJudgement]
    links: dict[str, str]
    levels: dict[str, str]
    claims: dict[str, float]
    suspected: list[Suspected]
    explanation: str
    stopped: Stop | None = None
    evidence_bundle: dict[str, Any] | None = None

    def data(self) -> dict[str, Any]:
        """As JSON: a stop or a bundle only where there is one."""
        return self.model_dump(mode="json", exclude={k for k in ("stopped", "evidence_bundle")
                                                     if getattr(self, k) is None})


class DiagnosisState(BaseModel):
    """Everything a run knows, checkpointed after every step (the graph's state schema)."""

    model_config = ConfigDict(extra="ignore")  # a key a later version added is not this version's business

    incident: Incident
    summary: IncidentSummary | None = None  # set by the first node
    inventory: dict[str, HostView] | None = None  # host -> what it is; None until the inventory step ran
    pretriage: list[ToolResult] = Field(default_factory=list)
    pretriage_priors: dict[str, float] = Field(default_factory=dict)
    similar: list[PastIncident] = Field(default_factory=list)
    priors: dict[str, float] = Field(default_factory=dict)
    results: dict[str, CheckResult] = Field(default_factory=dict)  # "host|check" -> everything run (ticket, resume)
    memory: list[Observation] = Field(default_factory=list)  # what the planner sees (branch-scoped during the DFS)
    stack: list[Frame] = Field(default_factory=list)
    widened: bool = False  # the second DFS pass that visits every branch with an untested leaf
    read_followed: bool = False  # the incident's likeliest causes the walk left untested were tested
    judgements: list[LeafJudgement] = Field(default_factory=list)  # every leaf tested, in order
    path: list[Step] = Field(default_factory=list)  # the walk's trace for the report
    approvals: dict[str, bool] = Field(default_factory=dict)  # check id -> the answer for an active check
    approved_by: dict[str, str] = Field(default_factory=dict)  # check id -> who answered (operator, or policy)
    visited: list[str] = Field(default_factory=list)  # nodes entered in this pass (each at most once)
    spent: Spent = Field(default_factory=lambda: Spent())  # checks, seconds, tokens and steps used so far
    stopped: Stop | None = None  # the limit that ended the investigation, if one did
    pipeline: int = 0  # the pipeline that confirmed the root cause; 0 while none has
    exploration: list[ExplorationHypothesis] = Field(default_factory=list)
    feedback: list[str] = Field(default_factory=list)
    feedback_rounds: int = 0
    conclusion: Conclusion | None = None

    def summarized(self) -> IncidentSummary:
        """The summary, which every node after `summarize` has."""
        if self.summary is None:
            raise RuntimeError("the incident has not been summarized yet")
        return self.summary

    def merged(self, update: Mapping[str, Any]) -> DiagnosisState:
        """The state as it will be after a node's (typed) update: what the node reads before it returns it."""
        return self.model_copy(update=dict(update))

    def trace(self, pipeline: int, node: str, action: str, detail: str = "") -> list[Step]:
        """The path with one step added."""
        return [*self.path, Step(pipeline=pipeline, node=node or "ROOT", action=action, detail=detail)]

    def checkable_hosts(self) -> bool:
        """Whether there is anything to check: a host the inventory found checkable (True before the inventory
        step), or the job's logs attached to the incident (their checks read them on any host)."""
        if self.inventory is None or self.incident.attachments.get("logs"):
            return True
        return not all(v.expectations.cannot_check for v in self.inventory.values())



_MEMBERS = {name: TypeAdapter(field.annotation) for name, field in DiagnosisState.model_fields.items()
            if field.annotation is not None}


def channels(update: Mapping[str, Any]) -> dict[str, Any]:
    """A node's typed update as the JSON the checkpoint keeps."""
    out: dict[str, Any] = {}
    for key, value in update.items():
        if key == "conclusion" and isinstance(value, Conclusion):
            out[key] = value.data()
        else:
            out[key] = _MEMBERS[key].dump_python(value, mode="json")
    return out


def in_state(result: CheckResult) -> CheckResult:
    """A check result as the state keeps it: the raw output cut to an excerpt."""
    if len(result.raw_excerpt) <= RAW_IN_STATE:
        return result
    return result.model_copy(update={"raw_excerpt": result.raw_excerpt[:RAW_IN_STATE]})


def incident_time(incident: Incident) -> float | None:
    """The incident's time (epoch seconds), when it gives one: the checks' `incident_at`."""
    return incident.at.timestamp() if incident.at else None


def result_key(result: CheckResult) -> str:
    return f"{result.host}|{result.check}"


def initial_state(incident: Incident) -> dict[str, Any]:
    """The graph's input: the incident and the members every run starts with, as JSON."""
    return channels({"incident": incident, "results": {}, "memory": [], "judgements": [], "path": [],
                     "approvals": {}, "approved_by": {}, "pipeline": 0, "feedback": [], "feedback_rounds": 0,
                     "spent": Spent()})
