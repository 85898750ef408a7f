"""Execution agent: runs the checks a hypothesis names on every host of the incident, cheapest tier first.

Passive checks (read-only, seconds) always run. Active ones (benchmarks that load the GPUs or the fabric for
minutes) run only when the passive ones leave the question open: for a leaf, when they have not already
confirmed it with strong evidence; for an inner node, when they found no failure to follow. An engineer does
the same: no 150-second DCGM diag for a GPU whose ECC counters already show the double-bit error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent.checks.manifest import Manifest
from agent.checks.runner import CheckRunner
from agent.evidence import assess
from agent.models import CheckResult, Verdict
from agent.taxonomy import Taxonomy


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
    cache. A host that cannot be checked was reported once, after the inventory, not once per check."""
    return runner.run(check_ids, hosts=runner.checkable()) if check_ids else []


def decide(manifest: Manifest, policy: str, operator: str, audit: Callable[[dict[str, Any]], None],
           approvals: dict[str, bool], approvers: dict[str, str], node: str, checks: list[str], purpose: str,
           ) -> tuple[dict[str, bool], dict[str, str]]:
    """(approvals, approvers) with `checks` decided: by the operator (one LangGraph interrupt, saying what the answer
    would change) under the policy ask, else by the policy; each decision written to the audit log once."""
    undecided = [c for c in dict.fromkeys(checks) if c not in approvals]
    if not undecided:
        return approvals, approvers
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
        audit({"event": "approval", "node": node, "check": check, "tier": manifest.get(check).tier,
               "approved": approvals[check], "by": who, "via": via})
    return approvals, approvers
