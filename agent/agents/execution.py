"""Execution agent: takes each host's inventory before any hypothesis, and runs the checks a hypothesis names on
every host of the incident, cheapest tier first, asking for approval where a check needs it and writing each run to
the audit log.

Passive checks (read-only, seconds) always run. Active ones (benchmarks that load the GPUs or the fabric for
minutes) run only when the passive ones leave the question open: for a leaf, when they have not already
confirmed it with strong evidence; for an inner node, when they found no failure to follow. An engineer does
the same: no 150-second DCGM diag for a GPU whose ECC counters already show the double-bit error.
"""

from __future__ import annotations

from typing import Any

from agent.agents.context import AgentTools
from agent.audit_records import ApprovalRecord, InventoryRecord
from agent.checks.runner import CheckRunner
from agent.events import ChecksEvent, InventoryEvent, ResultEvent, SkippedEvent
from agent.evidence import assess
from agent.graph.guard import Guard
from agent.graph.state import DiagnosisState, in_state, result_key
from agent.inventory import HostView
from agent.models import CheckResult, Verdict
from agent.taxonomy import Taxonomy


class ExecutionAgent:
    def __init__(self, tools: AgentTools, guard: Guard):
        self.t = tools
        self.guard = guard

    def inventory(self, state: DiagnosisState) -> dict[str, Any]:
        """Node: each host's inventory (passive reads) and the expectations its checks get. What each host is
        decides what its checks expect, and a host that cannot be checked (unreachable, no NVIDIA GPU and no
        driver) runs nothing."""
        runner = self.t.runner
        taken = runner.take_inventory()
        event = InventoryEvent(hosts=list(taken.values()))
        self.t.emit(event)
        for host in taken.values():
            self.t.audit(InventoryRecord(**host.model_dump(exclude={"values"})))
        return {"inventory": {host: HostView(inventory=runner.inventories[host], expectations=e)
                              for host, e in taken.items()}}

    def execute(self, state: DiagnosisState, label: str, costly_too: bool = False,
                ) -> tuple[list[CheckResult], dict[str, Any]]:
        """Run the node's passive checks, then its active ones if they are still needed or `costly_too` (asking
        for approval first unless already decided: an interrupt when the policy is ask). Returns the results and
        the state's update (results, approvals)."""
        runner = self.t.runner
        for result in state.results.values():  # a resumed run reuses what the checkpoint already holds
            runner.cache.setdefault((result.host, result.check), result)
        cheap, costly = by_tier(runner, checks_for(self.t.taxonomy, runner, label))
        approvals, approvers = dict(state.approvals), dict(state.approved_by)
        results = self.run(label, cheap)
        if costly and not self.guard.stopped and (costly_too or costly_needed(self.t.taxonomy, label, results)):
            approvals, approvers = self.decide(state, label, costly, "the read-only checks did not decide it: the "
                                                                     "test confirms or rejects it")
            runner.approve = lambda spec, host: approvals.get(spec.id, False)
            results += self.run(label, costly)
        elif costly and not self.guard.stopped:
            self.t.emit(SkippedEvent(node=label, checks=costly, why="the passive checks already decided it"))
        stored = dict(state.results)
        stored.update({result_key(r): in_state(r) for r in results})
        return results, {"results": stored, "approvals": approvals, "approved_by": approvers}

    def run(self, label: str, checks: list[str]) -> list[CheckResult]:
        if not checks or self.guard.stopped:
            return []
        self.t.runner.allowed(checks)  # an id outside the manifest is refused before anything runs
        self.guard.label = label
        self.t.emit(ChecksEvent(node=label, checks=checks))
        results = run_checks(self.t.runner, checks)
        for result in results:
            self.t.emit(ResultEvent(node=label, check=result.check, host=result.host, verdict=result.verdict.value,
                                    summary=result.summary, cached=result.cached, duration_s=result.duration_s))
        return results

    def active_missing(self, state: DiagnosisState, labels: list[str]) -> dict[str, list[str]]:
        """label -> its active checks not run yet in this incident."""
        ran = {r.check for r in state.results.values()}
        return {label: [c for c in by_tier(self.t.runner, checks_for(self.t.taxonomy, self.t.runner, label))[1]
                        if c not in ran] for label in labels}

    def decide(self, state: DiagnosisState, node: str, checks: list[str], purpose: str,
               ) -> tuple[dict[str, bool], dict[str, str]]:
        """(approvals, approvers) with `checks` decided: by the operator (one LangGraph interrupt, saying what the
        answer would change) under the policy ask, else by the policy; each decision written to the audit log
        once."""
        approvals, approvers = dict(state.approvals), dict(state.approved_by)
        undecided = [c for c in dict.fromkeys(checks) if c not in approvals]
        if not undecided:
            return approvals, approvers
        manifest, policy, operator = self.t.runner.manifest, self.t.approval, self.t.operator
        if policy == "ask":
            from langgraph.types import interrupt

            answer = interrupt({"kind": "approval", "node": node, "purpose": purpose, "checks": [
                {"id": s.id, "tier": s.tier, "description": s.description, "expected_cost_s": s.expected_cost_s}
                for s in map(manifest.get, undecided)]})
            answer = answer if isinstance(answer, dict) else {}
            who, via = str(answer.get("approved_by") or operator or "unknown"), "operator"
            approvals.update({c: answer.get(c) is True for c in undecided})
        else:
            who, via = operator or "unknown", f"policy {policy}"
            approvals.update({c: policy == "all" for c in undecided})
        for check in undecided:
            approvers[check] = who
            self.t.audit(ApprovalRecord(node=node, check=check, tier=manifest.get(check).tier,
                                        approved=approvals[check], by=who, via=via))
        return approvals, approvers


def checks_for(taxonomy: Taxonomy, runner: CheckRunner, label: str) -> list[str]:
    known = set(runner.manifest.ids())
    return [c for c in taxonomy.node(label).checks if c in known]


def by_tier(runner: CheckRunner, check_ids: list[str]) -> tuple[list[str], list[str]]:
    """(passive, the rest): what runs freely, and what needs approval and costs minutes."""
    costly = [c for c in check_ids if runner.manifest.get(c).needs_approval]
    return [c for c in check_ids if c not in costly], costly


def costly_needed(taxonomy: Taxonomy, label: str, cheap: list[CheckResult]) -> bool:
    """Whether the node's active checks can still change the outcome after its passive ones ran."""
    node = taxonomy.node(label)
    if node.is_leaf:
        return assess(node.evidence, [r for r in cheap if r.check in node.checks]).strength != "strong"
    return not any(r.verdict == Verdict.FAIL for r in cheap)


def run_checks(runner: CheckRunner, check_ids: list[str]) -> list[CheckResult]:
    """Every host that can be checked, in parallel; a (host, check) already run in this incident comes from the
    cache. A host that cannot be checked was reported once, after the inventory, not once per check; where no host
    can be, the checks of the incident's attached logs still read them (on the first host: they read nothing of it)."""
    if not check_ids:
        return []
    hosts = runner.checkable()
    if not hosts:
        check_ids = [c for c in check_ids if runner.manifest.get(c).reads_attachments]
        hosts = list(runner.executors)[:1]
    return runner.run(check_ids, hosts=hosts) if check_ids else []
