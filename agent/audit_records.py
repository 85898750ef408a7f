"""What the audit log records: one typed record per kind of action, one union of them (agent/audit.py writes them).

The progress events (agent/events.py) tell whoever watches a run what it is doing; these records are what was done
and by whom, kept for the provider: the run's options, each host's inventory, every check executed with its output's
hash, every approval and who gave it, every LLM request, a limit that stopped the run, the conclusion, the evidence
bundle, exports of the ticket, verifications, and fleet actions (Slurm). A record's JSON is exactly its fields as
given (`AuditLog` writes `model_dump(exclude_unset=True)`), so a field a call does not give is not written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, computed_field

from agent.bundle import BundleInfo

if TYPE_CHECKING:
    from agent.models import CheckResult


class Record(BaseModel):
    """A line of an audit log: `event` names its kind."""

    model_config = ConfigDict(extra="forbid")

    event: str

    def line(self) -> dict[str, Any]:
        """The record as the log's JSON: its kind first, then the fields the call gave."""
        return {"event": self.event, **self.model_dump(mode="json", exclude_unset=True, exclude={"event"})}


class RunRecord(Record):
    """A run started (a diagnosis, or checks run through MCP): who, on which hosts, under which policy and limits."""

    event: Literal["run"] = "run"
    operator: str
    hosts: list[str]
    approval: str
    reasoner: str | None = None
    model: str | None = None
    prompt_version: str | None = None
    limits: dict[str, Any] | None = None
    redact_llm: bool | None = None
    slurm_jobs: list[str] | None = None
    via: str | None = None
    checks: list[str] | None = None


class ResumeRecord(Record):
    event: Literal["resume"] = "resume"
    operator: str
    approval: str
    limits: dict[str, Any]
    waiting_for: str | None


class InventoryRecord(Record):
    """What a host is and what its checks expect (agent/inventory.py's Expectations, without the thresholds)."""

    event: Literal["inventory"] = "inventory"
    host: str
    hostname: str
    inventory: str
    source: str
    profile: str | None
    why: str
    cannot_check: str


class CheckRecord(Record):
    """A check that executed, the same wherever it ran (a diagnosis' node, verify, MCP)."""

    event: Literal["check"] = "check"
    node: str | None
    check: str
    host: str
    tier: str
    executed: bool = True
    verdict: str
    exit_code: int | None
    output_sha256: str
    duration_s: float
    commands: list[str]
    summary: str


class ApprovalRecord(Record):
    """An active, intrusive or fleet action approved or declined, by whom and how (operator, or a policy)."""

    event: Literal["approval"] = "approval"
    node: str | None = None
    check: str
    tier: str
    approved: bool
    by: str
    via: str
    reason: str | None = None
    forced: bool | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def decision(self) -> str:
        """A refusal is recorded as what it is: the operator (or the policy) declined."""
        return "approved" if self.approved else "declined"


class StoppedRecord(Record):
    event: Literal["stopped"] = "stopped"
    node: str
    limit: str
    message: str
    spent: dict[str, Any]


class ConclusionRecord(Record):
    """What was claimed, at which level, and what else was found."""

    event: Literal["conclusion"] = "conclusion"
    resolved: bool
    pipeline: int
    root_causes: list[str]
    levels: dict[str, str]
    follows: list[str]
    also_found: list[str]
    suspected: list[str]
    stopped: dict[str, Any] | None
    spent: dict[str, Any]


class EvidenceBundleRecord(BundleInfo, Record):
    event: Literal["evidence_bundle"] = "evidence_bundle"


class LlmRecord(Record):
    """One request to the model: its task, form, prompt hash, and tokens or error."""

    event: Literal["llm"] = "llm"
    prompt_version: str | None = None
    redacted: bool | None = None  # the prompt went through the redactor
    task: str
    model: str
    format: str
    prompt_sha256: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None


class LlmFallbackRecord(Record):
    """A question the model did not answer usably, answered by the offline reasoner instead."""

    event: Literal["llm_fallback"] = "llm_fallback"
    task: str
    model: str
    cause: str
    answered_by: str


class ExportRecord(Record):
    """The ticket written to a file or posted to a webhook."""

    event: Literal["export"] = "export"
    by: str
    target: str
    result: str | int  # written | failed | the receiver's HTTP status
    detail: str


class VerifyRecord(Record):
    """A verification after a fix started: the checks that confirmed the causes, run again."""

    event: Literal["verify"] = "verify"
    operator: str
    since: str
    since_from: str
    checks: list[str]
    hosts: list[str]
    approval: str
    bundle: str | None


class VerificationRecord(Record):
    """A verification's outcome: cleared or not, per cause."""

    event: Literal["verification"] = "verification"
    status: str
    by: str
    since: str
    causes: dict[str, str]
    bundle: str | None


class SlurmRecord(Record):
    """A drain or resume of a Slurm node: the circuit breaker's view, and what happened."""

    event: Literal["slurm"] = "slurm"
    action: Literal["drain", "resume"]
    node: str
    reason: str
    by: str
    state_before: str
    forced: bool
    max_drained_share: float | None = None
    breaker: list[dict[str, Any]] | None = None
    drained_by_aidai: bool | None = None
    result: str | None = None
    detail: str | None = None
    state_after: str | None = None
    reason_after: str | None = None

    def with_outcome(self, **outcome: str | None) -> SlurmRecord:
        """The record with what happened (result, detail, the node's state after)."""
        return SlurmRecord(**self.model_dump(exclude_unset=True), **outcome)


AuditRecord = Annotated[
    RunRecord | ResumeRecord | InventoryRecord | CheckRecord | ApprovalRecord | StoppedRecord | ConclusionRecord
    | EvidenceBundleRecord | LlmRecord | LlmFallbackRecord | ExportRecord | VerifyRecord | VerificationRecord
    | SlurmRecord,
    Field(discriminator="event"),
]
AUDIT_RECORD = TypeAdapter(AuditRecord)


def check_record(result: CheckResult, node: str | None, exit_code: int | None) -> CheckRecord:
    """The audit record of a check that executed."""
    return CheckRecord(node=node, check=result.check, host=result.host, tier=result.tier, executed=True,
                       verdict=result.verdict.value, exit_code=exit_code, output_sha256=result.output_sha256,
                       duration_s=result.duration_s, commands=result.cmds, summary=result.summary[:300])
