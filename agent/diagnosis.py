"""One diagnosis, end to end: hosts, reasoner, retrieval and checkpoint wired into the LangGraph graph.

A run has an id (the LangGraph thread id). Its options are saved next to the checkpoint, so `resume(run_id)`
rebuilds the same hosts and reasoner in a new process and continues from the last finished step; the checks
finished before a kill are in the checkpointed state and are not run again.

Next to the checkpoint, each run keeps `<run_id>.audit.jsonl` (the append-only audit log, agent/audit.py),
`<run_id>.redaction.json` (0600: the placeholders of everything sent to an LLM or put in a ticket, so the local
report can show the real values; it never leaves the machine) and, when it confirms a cause, `<run_id>.evidence/`
(agent/bundle.py: the whole output of the checks that confirmed it, hashed, written before the conclusion is told).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from agent import pretriage
from agent.agents.context import AgentTools, Emit
from agent.audit import AuditLog, audit_path, local_user
from agent.audit_records import AuditRecord, EvidenceBundleRecord, ResumeRecord, RunRecord
from agent.bundle import BundledCause, BundleInfo, Spool, confirming, write_bundle
from agent.checkpoints import open_store
from agent.checks.runner import CheckRunner
from agent.executors.hosts import SshOptions, executors_for
from agent.graph.build import DiagnosisGraph
from agent.graph.state import DiagnosisState, incident_time, initial_state
from agent.incident import Incident
from agent.inventory import HostView
from agent.models import CheckResult
from agent.options import DiagnoseOptions, data_dir
from agent.preflight.collect import CHECKS as PREFLIGHT_CHECKS
from agent.reasoning.base import KBPassage, LeafJudgement, PastIncident, Reasoner
from agent.reasoning.factory import make_reasoner
from agent.reasoning.offline import OfflineReasoner
from agent.reasoning.prompts import PROMPT_VERSION
from agent.redact import Redactor
from agent.report import Report, build_report
from agent.runs import RunNotFound, mapping_path, new_run_id, runs_dir, save_run, ssh_users
from agent.slurm.jobs import jobs_of
from agent.taxonomy import Taxonomy, load_taxonomy
from agent.textinput import save_files

log = logging.getLogger(__name__)
RECURSION_LIMIT = 5000  # one super-step per DFS move: a full walk of the taxonomy is ~400 steps
Answer = Callable[[dict[str, Any]], Any]  # an interrupt's payload -> the user's answer


class Retrieval:
    """The past-incident DB and the KB, opened (and built from the repo's files when stale) on first use."""

    def __init__(self, options: DiagnoseOptions):
        self.options = options
        self._db: Any = None
        self._kb: Any = None

    def similar(self, text: str, k: int) -> list[PastIncident]:
        if self._db is None:
            from agent.knowledge.incident_db import IncidentDB

            self._db = IncidentDB(data_dir=data_dir(self.options), url=self.options.chroma_url)
            if self.options.seed:
                self._db.ensure_seed()
        return self._db.query(text, k=k)

    def passages(self, text: str, k: int) -> list[KBPassage]:
        if self._kb is None:
            from agent.knowledge.kb_index import KnowledgeBase

            self._kb = KnowledgeBase(data_dir=data_dir(self.options), url=self.options.chroma_url,
                                     root=self.options.kb_dir)
            self._kb.ensure()
        return self._kb.query(text, k=k)


class Diagnoser:
    """Builds the graph for one set of options; `run` and `resume` drive it to the end."""

    def __init__(self, options: DiagnoseOptions | None = None, *, emit: Emit | None = None,
                 taxonomy: Taxonomy | None = None, reasoner: Reasoner | None = None,
                 retrieval: Retrieval | None = None, runner: CheckRunner | None = None):
        self.options = options or DiagnoseOptions()
        self.taxonomy = taxonomy or load_taxonomy()
        offline = OfflineReasoner(self.taxonomy)
        self.reasoner = reasoner or make_reasoner(self.options.llm, self.options.base_url, self.options.model,
                                                  offline)
        self.retrieval = retrieval or Retrieval(self.options)
        self.runner = runner or CheckRunner(executors_for(self.options.hosts, SshOptions(**self.options.ssh)),
                                            profile_name=self.options.profile,
                                            max_parallel_hosts=self.options.max_parallel_hosts)
        self.operator = self.options.operator or local_user()
        self.audit: AuditLog | None = None  # the current run's log, opened by run/resume
        self.redactor: Redactor | None = None
        self.run_id: str | None = None
        self.spool: Spool | None = None  # every check's whole output until the evidence bundle is written
        self.tools = AgentTools(
            taxonomy=self.taxonomy, reasoner=self.reasoner, runner=self.runner,
            retrieve=self.retrieval.similar if self.options.history else None,
            kb_query=self.retrieval.passages if self.options.knowledge else None,
            pretriage=pretriage.tools(self.options.pretriage, self.runner, self.options.prometheus),
            emit=emit or (lambda event: None), approval=self.options.approval,
            max_feedback_rounds=self.options.max_feedback_rounds, limits=self.options.limits(),
            audit=self._audit, operator=self.operator, preserve=self._preserve,
            reader=self.reasoner if isinstance(self.reasoner, OfflineReasoner) else offline)
        self.reasoner.token_budget = self.options.max_llm_tokens
        self.reasoner.on_call = self._audit
        self._close_store: Callable[[], None] | None = None
        self._graph: Any = None
        # a team's Postgres store is opened (and refused, when unusable) here, as soon as the options are known; the
        # local SQLite store, whose saver imports LangGraph, with the graph
        self._store: Any = self._checkpointer() if self.options.checkpoint and self.options.checkpoint_url else None

    @property
    def graph(self) -> Any:
        """The compiled graph, built on first use: `run` starts the hosts' work before it imports LangGraph."""
        if self._graph is None:
            from agent.graph.lazy_sdk import defer_sdk_init

            defer_sdk_init()  # LangGraph's import of the Platform SDK's remote client is deferred (lazy_sdk.py)
            store = self._store if self._store is not None else self._checkpointer()
            self._graph = DiagnosisGraph(self.tools).build(store)
        return self._graph

    @graph.setter
    def graph(self, compiled: Any) -> None:
        self._graph = compiled

    # ---- runs ---------------------------------------------------------------------------------------------
    def run(self, incident: Incident, answer: Answer | None = None, run_id: str | None = None) -> Report:
        run_id = run_id or new_run_id()
        if not incident.hosts:  # what preflight and the ticket see: the hosts the checks run on
            incident = incident.model_copy(update={"hosts": list(self.options.hosts)})
        jobs = jobs_of(self.runner.executors.values())
        if jobs and not incident.slurm_jobs:  # which job ran on which node and GPU, for the report and ticket
            incident = incident.model_copy(update={"slurm_jobs": jobs})
        self._open(run_id, incident)  # first: a run id that cannot name files is refused before anything is saved
        self._prefetch(incident)
        # a large log's whole file (agent/textinput.py), saved next to the run: the report lists it as attachments
        incident = save_files(incident, runs_dir(self.options) / f"{run_id}.attachments")
        if self.options.checkpoint:
            save_run(self.options, run_id, incident)
        self._audit(RunRecord(operator=self.operator, hosts=list(self.runner.executors),
                              approval=self.options.approval, reasoner=self.reasoner.name,
                              model=self.options.model if self.options.llm != "offline" else None,
                              prompt_version=PROMPT_VERSION, limits=self.tools.limits.as_dict(),
                              redact_llm=self.options.redact_llm,
                              **({"slurm_jobs": [job.line() for job in incident.slurm_jobs]}
                                 if incident.slurm_jobs else {})))
        return self._drive(initial_state(incident), run_id, answer)

    def _prefetch(self, incident: Incident) -> None:
        """Start the hosts' inventory, and the passive checks preflight runs first, in the background: they overlap
        building the graph (a cold process imports LangGraph then) and the first node. The checks get the params
        the graph would give them (the incident's time); they run early only when no limit could refuse them."""
        prefetch = getattr(self.runner, "prefetch", None)
        if prefetch is None:  # a stand-in runner
            return
        self.runner.judge_events_at(incident_time(incident))  # as the graph's guard does
        attach = getattr(self.runner, "attach_logs", None)
        if attach is not None:  # the checks that read the job's logs get them (--logs DIR)
            attach(incident.attachments.get("logs"))
        limited = self.options.max_checks is not None or self.options.max_wall_s is not None
        prefetch(PREFLIGHT_CHECKS if "preflight" in self.options.pretriage and not limited else ())

    def resume(self, run_id: str, answer: Answer | None = None) -> Report:
        """Continue a run from its last checkpoint (after a kill, or after an unanswered interrupt)."""
        state = self.graph.get_state(self._config(run_id))
        if not state.values:
            raise RunNotFound(f"run {run_id!r} has no checkpoint in {runs_dir(self.options)}")
        pending = self._pending(state)
        incident = Incident.model_validate(state.values["incident"])
        self._open(run_id, incident)
        attach = getattr(self.runner, "attach_logs", None)
        if attach is not None:  # a resumed run's checks read the same logs
            attach(incident.attachments.get("logs"))
        # a process killed after a step's writes were saved but before the next checkpoint leaves no `next`, only
        # the step's tasks: continuing applies the saved writes (the step is not run again); it is not finished
        if not state.next and not state.tasks:
            return self._report(run_id, state.values, 0.0)
        self._audit(ResumeRecord(operator=self.operator, approval=self.options.approval,
                                 limits=self.tools.limits.as_dict(), waiting_for=(pending or {}).get("kind")))
        if pending is not None:
            if answer is None:
                raise RunNotFound(f"run {run_id!r} waits for an answer to: {pending.get('kind')}")
            from langgraph.types import Command

            return self._drive(Command(resume=answer(pending)), run_id, answer)
        return self._drive(None, run_id, answer)

    def _drive(self, start: Any, run_id: str, answer: Answer | None) -> Report:
        config = self._config(run_id)
        began = time.perf_counter()
        payload: Any = start
        while True:
            try:
                self.graph.invoke(payload, config)
            finally:  # whatever happened, the placeholders already sent stay restorable
                self._save_mapping(run_id)
            state = self.graph.get_state(config)
            pending = self._pending(state)
            if pending is None:
                if self.spool is not None:  # the run is over: what the bundle needed is in it
                    self.spool.remove()
                return self._report(run_id, state.values, time.perf_counter() - began)
            if answer is None:
                raise RuntimeError(f"run {run_id} stopped for {pending.get('kind')} but nobody can answer; "
                                   f"resume it with `aidai diagnose --resume {run_id}`")
            from langgraph.types import Command

            payload = Command(resume=answer(pending))

    @staticmethod
    def _pending(state: Any) -> dict[str, Any] | None:
        interrupts = getattr(state, "interrupts", ()) or ()
        return dict(interrupts[0].value) if interrupts else None

    # ---- audit and redaction ------------------------------------------------------------------------------
    def _open(self, run_id: str, incident: Incident) -> None:
        """The run's audit log, redactor (continuing a resumed run's mapping) and output spool."""
        self.run_id = run_id
        if self.options.checkpoint:
            self.audit = AuditLog(audit_path(runs_dir(self.options), run_id), run_id)
            self.spool = Spool(runs_dir(self.options) / f"{run_id}.spool")
            self.runner.raw_sink = self.spool
        self.redactor = Redactor(hostnames=[*self.runner.executors, *incident.hosts],
                                 usernames=[self.operator, *ssh_users(self.options.hosts)])
        if self.options.checkpoint:
            self.redactor.load(mapping_path(self.options, run_id))
        self.reasoner.redactor = self.redactor if self.options.redact_llm else None

    def _audit(self, record: AuditRecord) -> None:
        if self.audit is not None:
            self.audit.append(record)

    def _preserve(self, results: list[CheckResult], inventory: dict[str, HostView],
                  causes: list[tuple[str, LeafJudgement]]) -> dict[str, Any] | None:
        """The evidence bundle of the confirmed causes (AgentTools.preserve), its manifest's hash in the audit log.
        A bundle that cannot be written is said so in the report, the ticket and the log; the diagnosis goes on."""
        if not self.options.checkpoint or self.run_id is None or self.spool is None:
            return None
        bundled = [BundledCause(label=j.label, role=role, confidence=j.confidence, evidence=j.evidence.matched,
                                findings=confirming(j.evidence.matched, results)) for role, j in causes]
        try:
            info = write_bundle(runs_dir(self.options), self.run_id, bundled, results, inventory, self.runner.manifest,
                                self.spool, self.runner.exit_codes)
        except Exception as exc:  # the diagnosis is worth more than its bundle: say why there is none, go on
            log.exception("run %s: no evidence bundle", self.run_id)
            info = BundleInfo(error=f"the evidence bundle could not be written: {type(exc).__name__}: {exc}")
        self._audit(EvidenceBundleRecord(**info.model_dump()))
        return info.model_dump(mode="json")

    def _save_mapping(self, run_id: str) -> None:
        if self.options.checkpoint and self.redactor is not None and self.redactor.originals:
            self.redactor.save(mapping_path(self.options, run_id))

    def _report(self, run_id: str, values: dict[str, Any], seconds: float) -> Report:
        return build_report(run_id, DiagnosisState.model_validate(values), self.taxonomy, usage=self.reasoner.usage,
                            reasoner=self.reasoner.name, wall_s=seconds)

    def _config(self, run_id: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": run_id}, "recursion_limit": RECURSION_LIMIT}

    def _checkpointer(self) -> Any:
        if not self.options.checkpoint:
            from langgraph.checkpoint.memory import InMemorySaver

            return InMemorySaver()
        sqlite_path = runs_dir(self.options) / "checkpoints.sqlite"
        saver, self._close_store = open_store(self.options.checkpoint_url, sqlite_path)
        return saver

    def close(self) -> None:
        if self._close_store is not None:
            self._close_store()
            self._close_store = None
