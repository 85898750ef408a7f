"""What a diagnosis tells whoever watches it, step by step: one typed event per kind, one union of them.

The agents emit these (AgentTools.emit); the CLI's progress view renders them by kind; the server stores and
streams them as JSON (`event.model_dump(mode="json")`: `type` names the kind, the other fields as declared), which is
what the page reads. A run's audit log is a different record (agent/audit.py): what was done and by whom, kept for
the provider.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_serializer

from agent.graph.state import Conclusion
from agent.incident import Entities
from agent.inventory import Expectations
from agent.models import ToolResult
from agent.reasoning.base import Choice, ExplorationHypothesis, LeafJudgement, PastIncident


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SummaryEvent(_Event):
    """The incident as the summarization agent read it (again after the user's answer)."""

    type: Literal["summary"] = "summary"
    title: str
    key_lines: list[str] = Field(default_factory=list)
    entities: Entities = Field(default_factory=Entities)
    environment: str = ""


class InventoryEvent(_Event):
    """What each host is, and the expectations its checks get (or why it cannot be checked)."""

    type: Literal["inventory"] = "inventory"
    hosts: list[Expectations]

    @field_serializer("hosts")
    def _without_values(self, hosts: list[Expectations]) -> list[dict[str, Any]]:
        return [h.model_dump(mode="json", exclude={"values"}) for h in hosts]  # the thresholds stay in the state


class PretriageEvent(_Event):
    type: Literal["pretriage"] = "pretriage"
    results: list[ToolResult]


class HistoryEvent(_Event):
    """Pipeline 1: the most similar past incidents."""

    type: Literal["history"] = "history"
    similar: list[PastIncident]


class HypothesisEvent(_Event):
    """Pipeline 2 entered a taxonomy node."""

    type: Literal["hypothesis"] = "hypothesis"
    node: str
    depth: int


class RankEvent(_Event):
    """A node's children, ranked; keep=False pruned."""

    type: Literal["rank"] = "rank"
    node: str
    ranked: list[Choice]


class LoopEvent(_Event):
    """A node already entered in this pass of the walk: skipped."""

    type: Literal["loop"] = "loop"
    node: str


class WidenEvent(_Event):
    type: Literal["widen"] = "widen"


class ChecksEvent(_Event):
    """Checks about to run for a node, on every host that can be checked."""

    type: Literal["checks"] = "checks"
    node: str
    checks: list[str]


class ResultEvent(_Event):
    """One check's result on one host (`node`: the hypothesis it ran for; empty for a verification after a fix)."""

    type: Literal["result"] = "result"
    node: str = ""
    check: str
    host: str
    verdict: str
    summary: str
    cached: bool = False
    duration_s: float = 0.0


class SkippedEvent(_Event):
    """Active checks not run because the passive ones decided the node."""

    type: Literal["skipped"] = "skipped"
    node: str
    checks: list[str]
    why: str


class JudgementEvent(LeafJudgement):
    """A leaf judged on its checks' evidence (the judgement's own fields, and the pipeline that tested it)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["judgement"] = "judgement"
    pipeline: int


class ExplorationEvent(_Event):
    """Pipeline 3: suggestions from the knowledge base when no check confirmed a cause."""

    type: Literal["exploration"] = "exploration"
    hypotheses: list[ExplorationHypothesis]


class StoppedEvent(_Event):
    """A limit or the loop breaker stopped the investigation after `node`."""

    type: Literal["stopped"] = "stopped"
    node: str
    limit: str
    message: str


class ConclusionEvent(Conclusion):
    """The conclusion as the state keeps it (agents/conclusion.py `result`)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["conclusion"] = "conclusion"


Event = Annotated[
    SummaryEvent | InventoryEvent | PretriageEvent | HistoryEvent | HypothesisEvent | RankEvent | LoopEvent
    | WidenEvent | ChecksEvent | ResultEvent | SkippedEvent | JudgementEvent | ExplorationEvent | StoppedEvent
    | ConclusionEvent,
    Field(discriminator="type"),
]


# ---- what the server adds to a run's stream (agent/server/runs.py) -------------------------------------------
class _ServerEvent(_Event):
    """Written with the fields it was given (an optional one only when there is one)."""


class StatusEvent(_ServerEvent):
    """The run's status as the store has it; `waiting_for` names the question it waits on."""

    type: Literal["status"] = "status"
    status: str
    waiting_for: str | None
    by: str | None = None  # who queued it
    error: str | None = None  # why it failed


class QuestionEvent(_ServerEvent):
    """The run waits: an approval of active checks (with the server's advice per check), or the exploration's
    question to the user."""

    type: Literal["approval", "question"]
    kind: str
    node: str | None = None
    purpose: str | None = None
    checks: list[dict[str, Any]] | None = None
    hypotheses: list[dict[str, Any]] | None = None
    question: str | None = None


class AnsweredEvent(_ServerEvent):
    """An answer the store took: which checks were approved and declined, or the user's text."""

    type: Literal["answered"] = "answered"
    kind: str
    by: str
    node: str | None = None
    checks: dict[str, Any] | None = None
    decision: str | None = None
    approved: list[str] | None = None
    declined: list[str] | None = None
    text: str | None = None


class RecoveredEvent(_ServerEvent):
    type: Literal["recovered"] = "recovered"
    message: str


class ErrorEvent(_ServerEvent):
    type: Literal["error"] = "error"
    message: str


class DoneEvent(_ServerEvent):
    """The run's report is stored: what it claimed."""

    type: Literal["done"] = "done"
    resolved: bool
    pipeline: int
    root_causes: list[str]
    levels: dict[str, str]
    suspected: list[str]


ServerEvent = StatusEvent | QuestionEvent | AnsweredEvent | RecoveredEvent | ErrorEvent | DoneEvent
# a run's stream, as the server stores it and the page reads it: the agents' events and the server's own
RunEvent = Annotated[
    SummaryEvent | InventoryEvent | PretriageEvent | HistoryEvent | HypothesisEvent | RankEvent | LoopEvent
    | WidenEvent | ChecksEvent | ResultEvent | SkippedEvent | JudgementEvent | ExplorationEvent | StoppedEvent
    | ConclusionEvent | ServerEvent,
    Field(discriminator="type"),
]
RUN_EVENT = TypeAdapter(RunEvent)


def wire(event: Event | ServerEvent) -> dict[str, Any]:
    """The event as JSON-able data (what the server stores and streams, and the page reads)."""
    if isinstance(event, _ServerEvent):
        return {"type": event.type, **event.model_dump(mode="json", exclude_unset=True, exclude={"type"})}
    if isinstance(event, ConclusionEvent):  # a conclusion names a stop or a bundle only when there is one
        return event.data()
    return event.model_dump(mode="json")


def parse(data: dict[str, Any]) -> Event | ServerEvent:
    """An event back from its wire form (a stored run's events; the time the server stamped is not the event's)."""
    return RUN_EVENT.validate_python({k: v for k, v in data.items() if k != "ts"})
