"""What the five agents act with: the taxonomy, the reasoner they ask, the check runner, retrieval, the pre-triage
tools, and the run's channels (events for whoever watches, the audit log, the evidence bundle). None of it is
checkpointed: the graph state is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agent import limits as L
from agent.audit_records import AuditRecord
from agent.checks.runner import CheckRunner
from agent.events import Event
from agent.incident import Incident
from agent.inventory import HostView
from agent.models import CheckResult, ToolResult
from agent.reasoning.base import KBPassage, LeafJudgement, PastIncident, Reasoner
from agent.taxonomy import Taxonomy

Emit = Callable[[Event], None]  # to whoever watches the run (agent/events.py)
Audit = Callable[[AuditRecord], None]  # the run's append-only audit log (agent/audit.py)
Approval = Literal["all", "none", "ask"]
PreTriage = Callable[[Incident], ToolResult | None]  # None: nothing for this tool in the incident
Retrieve = Callable[[str, int], list[PastIncident]]
# keeps the evidence of the confirmed causes ((role, judgement): root_cause | follows | also_found) from the run's
# results and hosts before the conclusion is told to anyone; returns what the report and ticket say about it
# (agent/bundle.py's BundleInfo), or None
Preserve = Callable[[list[CheckResult], dict[str, HostView], list[tuple[str, LeafJudgement]]], dict[str, Any] | None]


@dataclass
class AgentTools:
    taxonomy: Taxonomy
    reasoner: Reasoner
    runner: CheckRunner
    retrieve: Retrieve | None = None
    kb_query: Callable[[str, int], list[KBPassage]] | None = None
    pretriage: list[PreTriage] = field(default_factory=list)
    emit: Emit = lambda event: None
    approval: Approval = "none"
    max_feedback_rounds: int = 0  # 0: nobody to ask (batch runs); the chat asks
    limits: L.Limits = field(default_factory=L.Limits)
    audit: Audit = lambda event: None
    operator: str = ""  # who started the run: the approver of record under the policies all/none
    # reads the incident before any check, for attribution (default: the reasoner); the Diagnoser gives the offline
    # reasoner, so which confirmed cause is claimed rests on the same deterministic reading whatever the model
    reader: Reasoner | None = None
    preserve: Preserve | None = None  # the evidence bundle (agent/bundle.py), written by the Diagnoser
