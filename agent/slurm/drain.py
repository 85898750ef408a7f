"""Drain and resume one Slurm node, only with an operator's approval, behind a circuit breaker, in the audit log.

The circuit breaker counts, in each partition of the node, the nodes already out of service (drained, draining,
down, failing) and refuses a drain that would put more than a share of the partition out (default 10 %; one node
may always go). Overriding it (`force`) needs the operator's explicit approval like any drain, and is recorded.
A drain's reason starts with `aidai: `, so a resume can tell a node aidai drained from one drained for another
reason (which it refuses unless forced: someone else's drain is theirs to lift).

Every decision goes to an append-only audit log (agent/audit.py): a run's own log when the drain follows a
diagnosis, else `<data dir>/runs/fleet-actions.audit.jsonl` (`aidai audit show fleet-actions`). The approval is
written before Slurm is touched, the result after.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agent.audit import AuditError, AuditLog, audit_path
from agent.audit_records import ApprovalRecord, SlurmRecord
from agent.slurm import scontrol
from agent.slurm.scontrol import SlurmError, SlurmNode

DEFAULT_MAX_DRAINED_SHARE = 0.10
REASON_PREFIX = "aidai: "
MAX_REASON_CHARS = 200
FLEET_LOG = "fleet-actions"  # the audit log's run id for fleet actions taken outside a diagnosis run

# the operator's answer to (node, question): (approved, how: "--yes", "typed the node name", ...)
Approve = Callable[[str, str], tuple[bool, str]]


@dataclass
class Breaker:
    """The circuit breaker's view of one partition of the node."""

    partition: str
    total: int  # nodes in the partition
    out: list[str]  # the partition's other nodes already out of service
    allowed: int  # most nodes that may be out of service at once
    adds: bool = True  # draining this node takes one more node out (False: it is already down)

    @property
    def after(self) -> int:
        return len(self.out) + (1 if self.adds else 0)

    @property
    def trips(self) -> bool:
        return self.after > self.allowed

    def line(self) -> str:
        out = f" ({', '.join(self.out[:8])}{', ...' if len(self.out) > 8 else ''})" if self.out else ""
        return (f"partition {self.partition}: {len(self.out)} of {self.total} nodes already out of service{out}; "
                f"after this {self.after} of {self.total}, limit {self.allowed}")


@dataclass
class Outcome:
    """What a drain or resume did: `changed` when Slurm's node changed, `refused` when aidai would not (breaker,
    someone else's drain, no approval). Both false: nothing to do."""

    message: str
    changed: bool = False
    refused: bool = False
    state: str = ""  # the node's state afterwards
    breakers: list[Breaker] = field(default_factory=list)


def allowed_out(total: int, share: float) -> int:
    """Most nodes of a partition of TOTAL that may be out of service: SHARE of it, rounded down, at least one."""
    return max(1, math.floor(share * total + 1e-9))


def breakers(target: SlurmNode, nodes: list[SlurmNode], share: float) -> list[Breaker]:
    found = []
    for partition in target.partitions:
        members = [n for n in nodes if partition in n.partitions]
        out = [n.name for n in members if n.out_of_service and n.name != target.name]
        found.append(Breaker(partition, len(members), out, allowed_out(len(members), share),
                             adds=not target.out_of_service))
    return found


def check_share(share: float) -> float:
    if not 0 < share <= 1:
        raise SlurmError(f"the largest drained share must be in (0, 1], e.g. 0.1 for 10 %; got {share}")
    return share


def slurm_reason(reason: str, run_id: str = "") -> str:
    """The reason as Slurm records it: `aidai: TEXT (run RUN)`; refused when empty, too long or not one line."""
    text = " ".join(reason.split())
    if not text:
        raise SlurmError("--reason is empty: say why the node is drained (e.g. 'Xid 79 on GPU 2')")
    if any(unicodedata.category(ch).startswith("C") for ch in text):
        raise SlurmError("--reason holds control characters; give plain text")
    if len(text) > MAX_REASON_CHARS:
        raise SlurmError(f"--reason is {len(text)} characters; keep it under {MAX_REASON_CHARS}")
    if run_id and run_id not in text:
        text += f" (run {run_id})"
    return REASON_PREFIX + text


def drained_by_aidai(node: SlurmNode) -> bool:
    return node.reason.startswith(REASON_PREFIX.strip())


def open_log(runs_dir: Path, run_id: str | None) -> AuditLog:
    """The run's audit log (it must exist: a typo must not start a new one), else the fleet-actions log."""
    if run_id:
        path = audit_path(runs_dir, run_id)
        if not path.is_file():
            raise AuditError(f"no run {run_id!r}: {path} does not exist (leave out --run to use the fleet-actions "
                             "audit log)")
        return AuditLog(path, run_id)
    return AuditLog(audit_path(runs_dir, FLEET_LOG), FLEET_LOG)


def _describe(node: SlurmNode) -> str:
    by = f" (set by {node.reason_by})" if node.reason_by else ""
    return f"{node.state}, reason {node.reason!r}{by}" if node.reason else node.state


def drain(name: str, reason: str, *, approve: Approve, audit: AuditLog, operator: str,
          share: float = DEFAULT_MAX_DRAINED_SHARE, force: bool = False) -> Outcome:
    """Drain NAME (no new jobs; running ones finish) once the breaker and the operator allow it."""
    check_share(share)
    text = slurm_reason(reason, audit.run_id if audit.run_id != FLEET_LOG else "")
    node = scontrol.node(name)
    if node.drained and not force:
        return Outcome(f"{name} is already drained ({_describe(node)}); nothing changed (--force replaces the "
                       "reason)", refused=not drained_by_aidai(node), state=node.state)
    checks = breakers(node, scontrol.show_nodes(), share)
    tripped = [b for b in checks if b.trips]
    record = SlurmRecord(action="drain", node=name, reason=text, by=operator, state_before=node.state,
                         max_drained_share=share, forced=force,
                         breaker=[asdict(b) | {"after": b.after, "trips": b.trips} for b in checks])
    if tripped and not force:
        message = (f"refused by the circuit breaker: draining {name} would put more than {share:.0%} of a partition "
                   f"out of service ({'; '.join(b.line() for b in tripped)}). Look at why so many nodes are out "
                   "first; --force drains it anyway (with your approval, audited)")
        audit.append(record.with_outcome(result="refused", detail=message))
        return Outcome(message, refused=True, state=node.state, breakers=checks)
    question = (f"Drain {name} in Slurm with reason {text!r}? No new job starts on it; running jobs go on.\n"
                + "\n".join(f"  {b.line()}" for b in checks)
                + (f"\n  OVERRIDING the circuit breaker (--force) for {', '.join(b.partition for b in tripped)}"
                   if tripped else "")
                + (f"\n  REPLACING the reason of a drained node: {_describe(node)}" if node.drained else ""))
    return _act(node, {"State": "DRAIN", "Reason": text}, question, record, approve, audit, checks,
                done=lambda after: after.drained and after.reason == text)


def resume(name: str, *, approve: Approve, audit: AuditLog, operator: str, force: bool = False) -> Outcome:
    """Resume NAME (drained or down) once the operator allows it; a drain that is not aidai's needs `force`."""
    node = scontrol.node(name)
    if not node.out_of_service:
        return Outcome(f"{name} is not drained or down ({node.state}); nothing to resume", state=node.state)
    ours = drained_by_aidai(node)
    whose = (f"drained by aidai: {_describe(node)}" if ours
             else f"out of service for another reason than aidai's: {_describe(node)}")
    record = SlurmRecord(action="resume", node=name, reason=node.reason, by=operator, state_before=node.state,
                         drained_by_aidai=ours, forced=force)
    if not ours and not force:
        message = (f"{name} is {whose}. Resume it only once that is dealt with; --force resumes it anyway (with your "
                   "approval, audited)")
        audit.append(record.with_outcome(result="refused", detail=message))
        return Outcome(message, refused=True, state=node.state)
    question = f"Resume {name} in Slurm? It is {whose}. Jobs may start on it again."
    outcome = _act(node, {"State": "RESUME"}, question, record, approve, audit, [],
                   done=lambda after: not after.out_of_service)
    outcome.message = f"{outcome.message} (it was {whose})" if outcome.changed else outcome.message
    return outcome


def _act(node: SlurmNode, settings: dict[str, str], question: str, record: SlurmRecord, approve: Approve,
         audit: AuditLog, checks: list[Breaker], done: Callable[[SlurmNode], bool]) -> Outcome:
    """Ask, record the answer, change the node, read it back and record what Slurm says now."""
    action = record.action
    approved, via = approve(node.name, question)
    audit.append(ApprovalRecord(check=f"slurm {action} {node.name}", tier="fleet", node=node.name, approved=approved,
                                by=record.by, via=via, reason=record.reason, forced=record.forced))
    if not approved:
        return Outcome(f"not approved, {node.name} is unchanged: {via}", refused=True, state=node.state,
                       breakers=checks)
    try:
        scontrol.update_node(node.name, **settings)
    except SlurmError as exc:
        audit.append(record.with_outcome(result="failed", detail=str(exc)))
        raise
    after = scontrol.node(node.name)
    ok = done(after)
    audit.append(record.with_outcome(result="done" if ok else "unconfirmed", state_after=after.state,
                                     reason_after=after.reason))
    if not ok:
        raise SlurmError(f"scontrol accepted the {action} of {node.name} but the node now reads {_describe(after)}")
    verb = "drained" if action == "drain" else "resumed"
    return Outcome(f"{node.name} {verb}: {_describe(after)}", changed=True, state=after.state, breakers=checks)
