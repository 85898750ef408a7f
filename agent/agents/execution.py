"""Execution agent: runs the checks a hypothesis names on every host of the incident, cheapest tier first.

Passive checks (read-only, seconds) always run. Active ones (benchmarks that load the GPUs or the fabric for
minutes) run only when the passive ones leave the question open: for a leaf, when they have not already
confirmed it with strong evidence; for an inner node, when they found no failure to follow. An engineer does
the same: no 150-second DCGM diag for a GPU whose ECC counters already show the double-bit error.
"""

from __future__ import annotations

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
