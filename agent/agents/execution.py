"""Execution agent: runs the checks a hypothesis names on every host of the incident."""

from __future__ import annotations

from agent.checks.runner import CheckRunner
from agent.models import CheckResult
from agent.taxonomy import Taxonomy


def checks_for(taxonomy: Taxonomy, runner: CheckRunner, label: str) -> list[str]:
    known = set(runner.manifest.ids())
    return [c for c in taxonomy.node(label).checks if c in known]


def needs_approval(runner: CheckRunner, check_ids: list[str]) -> list[str]:
    return [c for c in check_ids if runner.manifest.get(c).needs_approval]


def run_checks(runner: CheckRunner, check_ids: list[str]) -> list[CheckResult]:
    """Every host, in parallel; a (host, check) already run in this incident comes from the cache."""
    return runner.run(check_ids) if check_ids else []
