"""What check results say about one taxonomy leaf, by the leaf's evidence rules (never by a model).

A rule is `check:finding_regex` (the regex must match the whole finding id). A FAIL finding that a rule
matches is strong evidence, a WARN finding weak; checks of the leaf that ran and found nothing the rules
match reject it; checks that could not decide (UNKNOWN) never reject, nor does one whose INFO finding an
`undecided` rule matches (it saw the state and cannot judge it: a version its known-bad list does not name). A check
that was only not given its input (`needs`: `job_logs` without `--logs`, a checkpoint check without its directory)
does not hold open a leaf its other checks decided. One whose INFO finding an `unseen` rule matches could not see what
this leaf needs (a host package's version from inside a container) while it decided the others: for this leaf it is
UNKNOWN.
"""

from __future__ import annotations

import re
from functools import lru_cache

from agent.models import CheckResult, Finding, Verdict
from agent.reasoning.base import Evidence


@lru_cache(maxsize=1024)
def _rule(rule: str) -> tuple[str, re.Pattern[str]]:
    check, _, pattern = rule.partition(":")
    return check, re.compile(pattern or ".*")


def assess(rules: list[str], results: list[CheckResult], undecided: list[str] | tuple[str, ...] = (),
           unseen: list[str] | tuple[str, ...] = ()) -> Evidence:
    compiled = [_rule(r) for r in rules]
    wanted = {check for check, _ in compiled}
    strong: list[str] = []
    weak: list[str] = []
    passed: list[str] = []
    unknown: list[str] = []
    still_open: list[str] = []
    unasked: list[str] = []
    mine = [r for r in results if r.check in wanted]
    decided = any(r.verdict != Verdict.UNKNOWN for r in mine)
    for result in mine:
        where = f"{result.check}@{result.host}"
        if result.verdict == Verdict.UNKNOWN:
            if result.needs:
                # it was not given what it reads (the job's logs): nothing was hidden, the checks that ran decide
                if not decided:
                    unasked.append(f"{where}: {result.reason or result.summary}"[:200])
                continue
            unknown.append(f"{where}: {result.reason or result.summary}"[:200])
            continue
        hits = [f for f in result.findings if f.severity in ("FAIL", "WARN")
                and any(check == result.check and pattern.fullmatch(f.id) for check, pattern in compiled)]
        for finding in hits:
            entry = f"{result.check}:{finding.id}@{finding.entity or result.host} ({finding.severity})"
            (strong if finding.severity == "FAIL" else weak).append(entry)
        cannot_judge, cannot_see = info_findings(result, undecided), info_findings(result, unseen)
        if not hits and cannot_see:
            unknown.extend(f"{where}: {f.message}"[:200] for f in cannot_see)
        elif not hits and cannot_judge:
            still_open.extend(f"{where}: {f.message}"[:200] for f in cannot_judge)
        elif not hits:
            passed.append(where)
    if strong:
        strength = "strong"
    elif weak:
        strength = "weak"
    elif passed and not still_open:
        strength = "none"
    else:  # a host where it could not be ruled out keeps it open, whatever the others say
        strength = "unknown"
    return Evidence(strength=strength, matched=_unique(strong + weak), rejected_by=_unique(passed),
                    unknown=_unique(unknown), unasked=_unique(unasked), open=_unique(still_open))


def info_findings(result: CheckResult, rules: list[str] | tuple[str, ...]) -> list[Finding]:
    """The result's INFO findings that one of the rules (`undecided`, `unseen`) names."""
    return [f for f in result.findings if f.severity == "INFO" and rule_matches(rules, result.check, f.id)]


def rule_matches(rules: list[str] | tuple[str, ...], check: str, finding_id: str) -> bool:
    """Whether one of the rules names `check` and matches the finding id whole."""
    return any(c == check and pattern.fullmatch(finding_id) for c, pattern in map(_rule, rules))


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def unexplained(results: list[CheckResult], explaining: list[list[str]], explainable: list[list[str]]) -> list[str]:
    """FAIL findings that the rules of some leaf (`explainable`) would match but none of the `explaining` leaves'
    rules do: evidence of a cause not found yet."""
    def matches(rule_sets: list[list[str]], check: str, finding: str) -> bool:
        return any(c == check and pattern.fullmatch(finding) for rules in rule_sets for c, pattern in map(_rule, rules))

    out = []
    for result in results:
        for finding in result.findings:
            if (finding.severity == "FAIL" and not matches(explaining, result.check, finding.id)
                    and matches(explainable, result.check, finding.id)):
                out.append(f"{result.check}:{finding.id}@{finding.entity or result.host}")
    return _unique(out)
