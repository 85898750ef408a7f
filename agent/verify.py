"""Verify after fix: run again, on the same hosts, the checks that confirmed each cause of a finished run, and say per
cause whether it is cleared, still failing, or could not be checked.

- **cleared**: every confirming check ran and none of its findings that confirmed the cause (or would confirm the
  cause's leaf by its evidence rules) is there any more;
- **still failing**: a confirming finding is still there (named), or the leaf's rules match a new one;
- **could not check**: a confirming check answered UNKNOWN (tool missing, refused, host unreachable, an active check
  not approved): never taken for cleared.

Time. A diagnosis judges log events against the incident's time; a verification must not: the Xid line that
confirmed the cause stays in the kernel log after the fix, and an old line is no sign of the fault now. So the log
checks count only events since the fix (params `events_since`, checklib's `Check.window`): by default since the
diagnosis ended (its evidence bundle's time) — the fix came after it — or since `--since TIME` when the operator
knows when the fix was done. Not "since the verification started": a window that begins now holds no events, and a
log check would then call every fault cleared without having seen anything. A counter (a volatile ECC count, a
pending row remap) is a state, not an event: the checks date it by its Xid lines and mark it `<id>_history` when those
are older than the window; for a verification such a finding is still there (the state was not cleared), so it
counts as still failing.

Each round is appended to the run's audit log and to `<runs>/<run>.verify.jsonl` (the ticket reads it: section
"Verification after fix").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.audit import AuditLog, audit_path, local_user, read
from agent.audit_records import ApprovalRecord, Record, VerificationRecord, VerifyRecord, check_record
from agent.bundle import MANIFEST, ConfirmingFinding, check_bundle, confirming, load_bundle
from agent.checks.runner import CheckRunner
from agent.events import ResultEvent
from agent.evidence import rule_matches
from agent.executors.base import Executor
from agent.executors.hosts import HostSpecError, SshOptions, executors_for
from agent.graph.state import DiagnosisState
from agent.models import CheckResult, Finding, Verdict
from agent.options import DiagnoseOptions
from agent.options import data_dir as data_root
from agent.reasoning.base import LeafJudgement
from agent.runs import RunNotFound, load_run, runs_dir, saved_state, verify_path
from agent.taxonomy import Taxonomy, load_taxonomy

Status = Literal["cleared", "still failing", "could not check"]
SHORT_WINDOW_S = 15 * 60  # less time than this since the fix: a quiet log says little yet


class VerifyError(ValueError):
    """Bad input to a verification (a --since that is not a time, or in the future)."""


class NothingToVerify(VerifyError):
    """The run has not concluded, or confirmed no cause: there is nothing to verify."""


class CheckAgain(BaseModel):
    """One confirming check run again on one host: its fresh result and the confirming findings still there."""

    result: CheckResult
    status: Status
    still: list[Finding] = Field(default_factory=list)
    confirmed: list[str] = Field(default_factory=list)  # the findings that confirmed the cause: "id@entity"


class CauseVerification(BaseModel):
    label: str
    role: str  # root_cause | follows | also_found
    status: Status
    why: str
    checks: list[CheckAgain] = Field(default_factory=list)


class Verification(BaseModel):
    """One verify round of a run."""

    run_id: str
    ts: str
    by: str
    since: str  # log checks counted events from this time (ISO 8601 UTC)
    since_from: str  # "--since", "the diagnosis' end (its evidence bundle)", "the diagnosis' end (its audit log)"
    window_note: str = ""
    status: Status
    causes: list[CauseVerification]
    bundle: dict[str, Any] = Field(default_factory=dict)  # {status: intact | altered | missing, problems, ...}

    @property
    def exit_code(self) -> int:
        return 0 if self.status == "cleared" else 1


class StoredRound(Verification, Record):
    """A round as the run's verification log keeps it (the raw excerpts left out)."""

    event: Literal["verification"] = "verification"


# ---- what to verify ----------------------------------------------------------------------------------------------
def concluded_causes(state: DiagnosisState, run_id: str) -> list[tuple[str, LeafJudgement]]:
    conclusion = state.conclusion
    if conclusion is None:
        raise NothingToVerify(f"run {run_id} has not concluded: finish it first (`aidai diagnose --resume {run_id}`)")
    causes = [("root_cause", j) for j in conclusion.root_causes]
    causes += [("follows", j) for j in conclusion.follows] + [("also_found", j) for j in conclusion.also_found]
    if not causes:
        raise NothingToVerify(f"run {run_id} confirmed no cause: there is nothing to verify (its ticket escalates)")
    return causes


def bundle_state(state: DiagnosisState) -> tuple[dict[str, Any], str]:
    """(what the verification says about the evidence bundle, its creation time or '')."""
    info = (state.conclusion.evidence_bundle if state.conclusion else None) or {}
    if not info or not info.get("path") or info.get("error"):
        return {"status": "missing", "problems": [info.get("error") or "the run kept no evidence bundle"]}, ""
    path = Path(info["path"])
    problems = check_bundle(path, info.get("manifest_sha256", ""))
    # the bundle's time only when it is as written: an altered manifest's time is not evidence
    created = "" if problems else str(load_bundle(path).get("created_at") or "")
    status = "intact" if not problems else "missing" if not (path / MANIFEST).is_file() else "altered"
    return {"status": status, "problems": problems, "path": str(path),
            "manifest_sha256": info.get("manifest_sha256", "")}, created


def diagnosis_end(options: DiagnoseOptions, run_id: str) -> str:
    """When the run concluded, from its audit log ('' when it has no conclusion line)."""
    try:
        events, _ = read(audit_path(runs_dir(options), run_id))
    except ValueError:
        return ""
    return next((str(e.get("ts", "")) for e in reversed(events) if e.get("event") == "conclusion"), "")


def parse_time(text: str) -> datetime:
    """ISO 8601; UTC unless it names a zone."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise VerifyError(f"--since {text!r}: not an ISO 8601 time (e.g. 2026-11-25T09:30:00Z)") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# ---- the hosts, as the run named them ------------------------------------------------------------------------------
def rebuild_hosts(options: DiagnoseOptions) -> tuple[list[Executor], list[str]]:
    """The run's hosts as executors again, each spec on its own: one that no longer resolves (a scenario that is
    gone, a bad spec) is a problem for its hosts, not for the others."""
    executors: list[Executor] = []
    problems: list[str] = []
    for spec in options.hosts or ["local"]:
        try:
            executors += executors_for([spec], SshOptions(**options.ssh))
        except HostSpecError as exc:
            problems.append(f"{spec}: {exc}")
    return executors, problems


# ---- judging ---------------------------------------------------------------------------------------------------
def still_there(result: CheckResult, confirmed: list[ConfirmingFinding], rules: list[str]) -> list[Finding]:
    """The findings of a fresh result that keep the cause: one the leaf's evidence rules match (FAIL or WARN), or a
    confirming finding only dated out of the window (`<id>_history`: the state is still there)."""
    confirming_ids = {(f.finding, f.entity) for f in confirmed}
    kept = []
    for finding in result.findings:
        entity = finding.entity or result.host
        by_rule = finding.severity in ("FAIL", "WARN") and rule_matches(rules, result.check, finding.id)
        as_before = (finding.id.removesuffix("_history"), entity) in confirming_ids and (
            finding.severity in ("FAIL", "WARN") or finding.id.endswith("_history"))
        if by_rule or as_before:
            kept.append(finding)
    return kept


def judge_check(result: CheckResult, confirmed: list[ConfirmingFinding], rules: list[str]) -> CheckAgain:
    named = [f"{f.finding}@{f.entity}" for f in confirmed]
    if result.verdict == Verdict.UNKNOWN:
        return CheckAgain(result=result, status="could not check", confirmed=named)
    still = still_there(result, confirmed, rules)
    return CheckAgain(result=result, status="still failing" if still else "cleared", still=still, confirmed=named)


def still_entry(result: CheckResult, finding: Finding) -> str:
    """A finding still there, in the evidence entry's words (`check:finding@entity (FAIL)`); a state only dated out of
    the window says so."""
    where = finding.entity or result.host
    if finding.id.endswith("_history"):
        return (f"{result.check}:{finding.id.removesuffix('_history')}@{where} (still set; its Xid lines are older "
                "than the window)")
    return f"{result.check}:{finding.id}@{where} ({finding.severity}): {finding.message[:160]}"


def judge_cause(label: str, role: str, checks: list[CheckAgain]) -> CauseVerification:
    failing = [c for c in checks if c.status == "still failing"]
    unknown = [c for c in checks if c.status == "could not check"]
    if failing:
        named = "; ".join(f"on {c.result.host}: " + ", ".join(still_entry(c.result, f) for f in c.still[:3])
                          for c in failing)
        return CauseVerification(label=label, role=role, status="still failing", why=named, checks=checks)
    if unknown or not checks:
        why = "; ".join(f"{c.result.check} on {c.result.host}: {c.result.reason or c.result.summary}"
                        for c in unknown) or "no confirming check could be found in the run's results"
        return CauseVerification(label=label, role=role, status="could not check", why=why, checks=checks)
    return CauseVerification(label=label, role=role, status="cleared", checks=checks,
                             why="every confirming check ran and none of its confirming findings is there: "
                                 + ", ".join(f"{c.result.check} on {c.result.host} {c.result.verdict.value}"
                                             for c in checks))


def overall(causes: list[CauseVerification]) -> Status:
    statuses = {c.status for c in causes}
    if "still failing" in statuses:
        return "still failing"
    return "could not check" if "could not check" in statuses else "cleared"


def unreachable(host: str, check: str, why: str) -> CheckResult:
    return CheckResult(check=check, host=host, verdict=Verdict.UNKNOWN, summary=f"not run: {why}", reason=why)


# ---- one round ---------------------------------------------------------------------------------------------------
class Verifier:
    """Verifies one saved run; `run()` returns the round after saving it (verify.jsonl, audit log)."""

    def __init__(self, run_id: str, data_dir: str | None = None, *, approve_active: bool = False,
                 since: str | None = None, operator: str | None = None,
                 emit: Callable[[ResultEvent], None] | None = None, taxonomy: Taxonomy | None = None):
        self.run_id = run_id
        self.options, _ = load_run(run_id, data_dir)
        self.options.data_dir = str(data_root(DiagnoseOptions(data_dir=data_dir)))  # where the run was found
        self.approve_active = approve_active
        self.since_text = since
        self.operator = operator or local_user()
        self.emit = emit or (lambda event: None)
        self.taxonomy = taxonomy or load_taxonomy()
        self.runs = runs_dir(self.options)
        state = saved_state(self.options, run_id)
        if state is None:
            raise RunNotFound(f"run {run_id!r} has no checkpoint in {self.runs}")
        self.state = state
        self.causes = concluded_causes(self.state, run_id)
        self.audit = AuditLog(audit_path(self.runs, run_id), run_id)

    def window(self, bundle_created: str) -> tuple[datetime, str]:
        if self.since_text:
            moment = parse_time(self.since_text)
            if moment.timestamp() > time.time():
                raise VerifyError(f"--since {self.since_text}: that is in the future")
            return moment, "--since"
        if bundle_created:
            return parse_time(bundle_created), "the diagnosis' end (its evidence bundle)"
        ended = diagnosis_end(self.options, self.run_id)
        if ended:
            return parse_time(ended), "the diagnosis' end (its audit log)"
        raise NothingToVerify(f"run {self.run_id}: no time the diagnosis ended is recorded; give --since TIME")

    def run(self) -> Verification:
        results = list(self.state.results.values())
        bundle, created = bundle_state(self.state)
        since, since_from = self.window(created)
        wanted = {j.label: confirming(j.evidence.matched, results) for _, j in self.causes}
        checks = sorted({f.check for found in wanted.values() for f in found})
        # each check on every host that ran it in the diagnosis: a cross-host comparison needs its peers again
        ran_on = {check: sorted({r.host for r in results if r.check == check}) for check in checks}
        executors, spec_problems = rebuild_hosts(self.options)
        now = time.time()
        runner = CheckRunner(executors, approve=self.approve_active, profile_name=self.options.profile,
                             params={"incident_at": now, "events_since": since.timestamp()},
                             max_parallel_hosts=self.options.max_parallel_hosts)
        runner.listeners.append(lambda result: self._ran(result, runner.exit_codes.get((result.host, result.check))))
        self.audit.append(VerifyRecord(operator=self.operator, since=since.isoformat(), since_from=since_from,
                                       checks=checks, hosts=sorted(runner.executors),
                                       approval="all" if self.approve_active else "none", bundle=bundle.get("status")))
        fresh: dict[tuple[str, str], CheckResult] = {}
        batches: dict[tuple[str, ...], list[str]] = {}  # the checks that ran on the same hosts go in one batch
        for check in checks:
            self._approval(runner, check)
            for host in (h for h in ran_on[check] if h not in runner.executors):
                why = (f"host {host} is not among the run's hosts now ({'; '.join(spec_problems)})"
                       if spec_problems else f"host {host} is not among the run's hosts now")
                fresh[(host, check)] = unreachable(host, check, why)
            here = tuple(h for h in ran_on[check] if h in runner.executors)
            if here:
                batches.setdefault(here, []).append(check)
        try:
            for hosts, batch in batches.items():
                for result in runner.run(batch, hosts=list(hosts)):
                    fresh[(result.host, result.check)] = result
                    self.emit(ResultEvent(check=result.check, host=result.host, verdict=result.verdict.value,
                                          summary=result.summary, cached=result.cached,
                                          duration_s=result.duration_s))
        finally:
            for executor in executors:
                executor.close()
        verified = []
        for role, judgement in self.causes:
            rules = self.taxonomy.node(judgement.label).evidence if judgement.label in self.taxonomy.labels() else []
            by_key: dict[tuple[str, str], list[ConfirmingFinding]] = {}
            for found in wanted[judgement.label]:
                by_key.setdefault((found.host, found.check), []).append(found)
            again = [judge_check(fresh.get(key) or unreachable(*key, "the check did not run again"), found, rules)
                     for key, found in by_key.items()]
            verified.append(judge_cause(judgement.label, role, again))
        round_ = Verification(run_id=self.run_id, ts=datetime.now(UTC).isoformat(timespec="seconds"),
                              by=self.operator, since=since.isoformat(timespec="seconds"), since_from=since_from,
                              window_note=window_note(since, now, runner, checks), status=overall(verified),
                              causes=verified, bundle=bundle)
        self._save(round_)
        return round_

    def _approval(self, runner: CheckRunner, check: str) -> None:
        spec = runner.manifest.get(check)
        if spec.needs_approval:
            self.audit.append(ApprovalRecord(node="verify", check=check, tier=spec.tier, approved=self.approve_active,
                                             by=self.operator,
                                             via="--approve-active" if self.approve_active else "policy none"))

    def _ran(self, result: CheckResult, exit_code: int | None) -> None:
        self.audit.append(check_record(result, "verify", exit_code))

    def _save(self, round_: Verification) -> None:
        stored = round_.model_dump(mode="json")
        for cause in stored["causes"]:  # the ticket shows summaries and findings; the excerpts stay out
            for check in cause["checks"]:
                check["result"]["raw_excerpt"] = ""
        AuditLog(verify_path(self.runs, self.run_id), self.run_id).append(StoredRound(**stored))
        self.audit.append(VerificationRecord(status=round_.status, by=round_.by, since=round_.since,
                                             causes={c.label: c.status for c in round_.causes},
                                             bundle=round_.bundle.get("status")))


def window_note(since: datetime, now: float, runner: CheckRunner, checks: list[str]) -> str:
    logs = [c for c in checks if runner.manifest.get(c).events]
    if not logs:
        return ""
    age = max(now - since.timestamp(), 0.0)
    note = (f"log checks ({', '.join(logs)}) counted only events since {since.isoformat(timespec='seconds')} "
            f"({age / 60:.0f} min before this check); older events are history")
    if age < SHORT_WINDOW_S:
        note += ("; that is little time: a quiet log says more once the workload has run on the host again "
                 "(verify again later)")
    return note
