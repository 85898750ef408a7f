"""The diagnosis report: what the CLI prints, `--json` emits and the escalation ticket is written from."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agent.agents.attribution import GPU_ENTITY, Suspected
from agent.bundle import BundleInfo
from agent.graph.state import DiagnosisState, Step
from agent.incident import Attachment
from agent.inventory import DriverGpu, Expectations, HostInventory
from agent.models import CheckResult, Finding, ToolResult
from agent.reasoning.base import ExplorationHypothesis, LeafJudgement, PastIncident, Usage
from agent.slurm.jobs import SlurmJob, drain_command, job_note
from agent.taxonomy import Taxonomy


class RootCause(BaseModel):
    label: str
    confidence: float
    evidence: list[str]  # "check: finding" lines that confirmed it
    why: str
    severity: str = ""
    runbook: str = ""
    # where it is: host, GPU (index, PCI bus id, UUID, serial) or NIC, as the checks and the inventory name it
    where: list[str] = Field(default_factory=list)
    lines: list[str] = Field(default_factory=list)  # the raw tool lines behind it, verbatim
    link: str = ""  # how it is tied to the incident (or not), in one line (agents/attribution.py)
    # a root cause's level: confirmed (the incident's lines, devices or time tie it) or probable (a state the hosts
    # are in that fits the incident, nothing better found); empty for what followed from a cause or was also found
    level: str = ""
    # what the vendor recommends for the confirming findings ("drain the node, then reset GPU3 on node-1"), as the
    # checks' catalogues say it (NVIDIA's Xid catalogue for xid_scan)
    actions: list[str] = Field(default_factory=list)
    # the copy-paste `aidai drain NODE --reason ...` for each Slurm node (`--host slurm:JOBID`) an action drains;
    # only suggested: draining is the operator's decision
    drain: list[str] = Field(default_factory=list)


class Report(BaseModel):
    run_id: str
    resolved: bool
    pipeline: int  # 1 historical, 2 taxonomy DFS, 3 exploration (after feedback); 0 unresolved
    root_causes: list[RootCause] = Field(default_factory=list)
    follows: list[RootCause] = Field(default_factory=list)  # what followed from a root cause on its own device
    also_found: list[RootCause] = Field(default_factory=list)  # confirmed on the hosts, not this incident's cause
    # nothing claimed, and the likeliest causes could not be checked from here: for whoever can (never a claim)
    suspected: list[Suspected] = Field(default_factory=list)
    explanation: str = ""
    title: str = ""
    incident: str = ""
    environment: str = ""
    hosts: list[str] = Field(default_factory=list)
    inventory: list[Expectations] = Field(default_factory=list)  # per host: what it is, what it was judged by
    path: list[Step] = Field(default_factory=list)
    hypotheses: list[LeafJudgement] = Field(default_factory=list)  # every leaf tested, with its verdict
    results: list[CheckResult] = Field(default_factory=list)  # every check run, one per (host, check)
    similar: list[PastIncident] = Field(default_factory=list)
    pretriage: list[ToolResult] = Field(default_factory=list)  # L4, Reveal, preflight ... on the attachments
    exploration: list[ExplorationHypothesis] = Field(default_factory=list)
    feedback: list[str] = Field(default_factory=list)
    checks_run: int = 0
    check_seconds: float = 0.0
    reasoner: str = "offline"
    llm_calls: int = 0
    tokens: int = 0
    llm_fallbacks: int = 0
    llm_fallback_causes: dict[str, int] = Field(default_factory=dict)  # format, model, endpoint, budget
    wall_s: float = 0.0
    stopped: dict[str, str] = Field(default_factory=dict)  # {limit, message} when a limit ended the investigation
    spent: dict[str, Any] = Field(default_factory=dict)  # checks, wall_s, tokens, steps used (agent/limits.py)
    attachments: list[Attachment] = Field(default_factory=list)  # whole logs behind an excerpted incident text
    slurm_jobs: list[SlurmJob] = Field(default_factory=list)  # the jobs whose nodes were checked, with their GPUs
    # the whole output of the checks that confirmed the causes, kept before any fix (agent/bundle.py)
    evidence_bundle: BundleInfo | None = None

    def contract(self) -> dict[str, Any]:
        """The `--json` output: DESIGN.md's report contract first, the details after it."""
        head = {"resolved": self.resolved, "pipeline": self.pipeline,
                "root_causes": [{"label": c.label, "level": c.level, "confidence": c.confidence,
                                 "reasons": c.link, "evidence": c.evidence, "where": c.where}
                                for c in self.root_causes],
                "suspected": [{"label": s.label, "level": "suspected", "commands": s.commands}
                              for s in self.suspected],
                "path": [f"{s.node}:{s.action}" for s in self.path if s.action not in ("rank", "start")],
                "checks_run": self.checks_run, "check_seconds": round(self.check_seconds, 3),
                "llm_calls": self.llm_calls, "tokens": self.tokens}
        return head | {"run_id": self.run_id, "details": self.model_dump(mode="json", exclude={"incident"})
                       | {"could_not_check": {e.host: e.cannot_check for e in self.inventory if e.cannot_check}}}


# causes the customer fixes in their own code, configuration or library versions; everything else is the provider's
CUSTOMER_SIDE = ("USER_APPLICATION", "FRAMEWORK_LIBRARY")


def acting_party(report: Report) -> str:
    """Who should act on this report: 'customer' when every confirmed cause is on the customer's side of the
    machine (their code, configuration or framework versions), else 'provider' (hardware, drivers, fabric, and
    anything left unconfirmed, which only the provider can look further into)."""
    labels = [c.label for c in report.root_causes]
    if report.resolved and labels and all(label.split(".")[0] in CUSTOMER_SIDE for label in labels):
        return "customer"
    return "provider"


def _evidence_lines(judgement: LeafJudgement, results: list[CheckResult]) -> list[str]:
    """Each matched rule with the finding's own message, e.g. `xid_scan:xid_48@GPU 0000:5d (FAIL): Xid 48 ...`."""
    lines = []
    for entry in judgement.evidence.matched:
        found = _finding(entry, results)
        lines.append(f"{entry}: {found[1].message}" if found and found[1].message else entry)
    return lines


def _finding(entry: str, results: list[CheckResult]) -> tuple[CheckResult, Finding] | None:
    """The result and finding behind an evidence entry `check:finding@entity (SEVERITY)`."""
    check, _, rest = entry.partition(":")
    finding, _, where = rest.rpartition(" (")[0].partition("@")
    for result in results:
        if result.check != check:
            continue
        for f in result.findings:
            if f.id == finding and (f.entity or result.host) == where:
                return result, f
    return None


def _locate(judgement: LeafJudgement, results: list[CheckResult], inventories: dict[str, HostInventory],
            jobs: list[SlurmJob]) -> tuple[list[str], list[str]]:
    """Where the cause is (host, then GPU index with PCI bus id, UUID and serial from the host's inventory, or the
    NIC / unit the finding names; on a Slurm job's node, whether the job held that GPU) and the raw lines behind
    it."""
    where: list[str] = []
    raw: list[str] = []
    for entry in judgement.evidence.matched:
        found = _finding(entry, results)
        if found is None:
            continue
        result, finding = found
        inventory = inventories.get(result.host)
        host = (inventory.hostname if inventory and inventory.hostname else "") or result.host
        place = host if result.host in (host, "") else f"{host} ({result.host})"
        entity = finding.entity if finding.entity and finding.entity != result.host else ""
        gpu = _gpu(entity, inventory)
        index = gpu.index if gpu is not None else _gpu_index(entity)
        if gpu is not None:
            ids = ", ".join(part for part in (f"PCI {gpu.bus_id}" if gpu.bus_id else "",
                                              gpu.uuid, f"serial {gpu.serial}" if gpu.serial else "") if part)
            entity = f"GPU {gpu.index}" + (f" ({ids})" if ids else "")
        note = job_note(jobs, result.host, index)
        where.append((f"{place}: {entity}" if entity else place) + (f", {note}" if note else ""))
        if finding.raw_line:
            raw.append(f"{result.host}: {finding.raw_line.strip()}"[:400])
    return list(dict.fromkeys(where)), list(dict.fromkeys(raw))[:10]


def _actions(judgement: LeafJudgement, results: list[CheckResult]) -> list[str]:
    actions = []
    for entry in judgement.evidence.matched:
        found = _finding(entry, results)
        if found and found[1].action and found[1].action != "no action":
            actions.append(f"{found[1].action} on {found[0].host}")
    return list(dict.fromkeys(actions))


def _drain(judgement: LeafJudgement, results: list[CheckResult], jobs: list[SlurmJob], run_id: str) -> list[str]:
    nodes = {node.node for job in jobs for node in job.nodes}
    commands = []
    for entry in judgement.evidence.matched:
        found = _finding(entry, results)
        if found and found[0].host in nodes and "drain" in found[1].action.lower():
            commands.append(drain_command(found[0].host, f"{judgement.label} (run {run_id})", run_id))
    return list(dict.fromkeys(commands))


def _gpu_index(entity: str) -> int | None:
    match = GPU_ENTITY.match(entity.strip())
    return int(match.group(1)) if match else None


def _gpu(entity: str, inventory: HostInventory | None) -> DriverGpu | None:
    match = GPU_ENTITY.match(entity.strip())
    if not match or inventory is None:
        return None
    return next((g for g in inventory.gpus if g.index == int(match.group(1))), None)


def _cause(judgement: LeafJudgement, taxonomy: Taxonomy, results: list[CheckResult],
           inventories: dict[str, HostInventory], link: str, jobs: list[SlurmJob], run_id: str) -> RootCause:
    node = taxonomy.node(judgement.label)
    where, raw = _locate(judgement, results, inventories, jobs)
    return RootCause(label=judgement.label, confidence=judgement.confidence,
                     evidence=_evidence_lines(judgement, results), why=judgement.why, severity=node.severity,
                     runbook=node.runbook, where=where, lines=raw, link=link, actions=_actions(judgement, results),
                     drain=_drain(judgement, results, jobs, run_id))


def build_report(run_id: str, state: DiagnosisState, taxonomy: Taxonomy, *, usage: Usage | None = None,
                 reasoner: str = "offline", wall_s: float = 0.0,
                 attachments: list[Attachment] | None = None) -> Report:
    """The report of a run's final STATE; ATTACHMENTS default to the incident's files (agent/textinput.py)."""
    conclusion = state.conclusion
    results = sorted(state.results.values(), key=lambda r: (r.host, r.check))
    views = state.inventory or {}
    inventories = {host: view.inventory for host, view in views.items()}
    links = conclusion.links if conclusion else {}
    levels = conclusion.levels if conclusion else {}
    claims = conclusion.claims if conclusion else {}
    jobs = state.incident.slurm_jobs

    def causes_of(judgements: list[LeafJudgement]) -> list[RootCause]:
        return [_cause(j, taxonomy, results, inventories, links.get(j.label, ""), jobs, run_id) for j in judgements]

    # a claimed cause's confidence is its claim's (agents/attribution.py), not the leaf's
    causes = [c.model_copy(update={"level": levels.get(c.label, "confirmed"),
                                   "confidence": claims.get(c.label, c.confidence)})
              for c in causes_of(conclusion.root_causes if conclusion else [])]
    usage = usage or Usage()
    return Report(
        run_id=run_id, resolved=bool(conclusion and conclusion.resolved),
        pipeline=conclusion.pipeline if conclusion else 0, root_causes=causes,
        follows=causes_of(conclusion.follows if conclusion else []),
        also_found=causes_of(conclusion.also_found if conclusion else []),
        suspected=conclusion.suspected if conclusion else [],
        explanation=conclusion.explanation if conclusion else "",
        title=state.summary.title if state.summary else "",
        incident=state.incident.text, environment=state.incident.environment,
        hosts=sorted({r.host for r in results} | set(views)),
        inventory=[view.expectations for view in views.values()],
        path=state.path,
        hypotheses=state.judgements, results=results, similar=state.similar, pretriage=state.pretriage,
        exploration=state.exploration, feedback=list(state.feedback), checks_run=len(results),
        check_seconds=round(sum(r.duration_s for r in results), 3), reasoner=reasoner,
        llm_calls=usage.calls, tokens=usage.tokens, llm_fallbacks=usage.fallbacks,
        llm_fallback_causes=dict(usage.fallback_causes), wall_s=round(wall_s, 3),
        stopped=dict(conclusion.stopped) if conclusion and conclusion.stopped else {},
        spent=dict(state.spent),
        evidence_bundle=BundleInfo.model_validate(conclusion.evidence_bundle)
        if conclusion and conclusion.evidence_bundle else None,
        attachments=attachments if attachments is not None else state.incident.files, slurm_jobs=jobs)
