"""Diagnoses in worker threads, so the event loop only serves requests.

A run that reaches an interrupt (an approval or a question) does not keep its thread: the graph has already
checkpointed the interrupt when `invoke` returns, so the worker records what is asked and ends. An answer
(saved in the store first) queues the run again, and a worker continues it with `Diagnoser.resume`. After a
restart every run that was queued or running is continued the same way, from its last checkpoint.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any

from agent.audit_records import ApprovalRecord, AuditRecord
from agent.checks.manifest import Manifest
from agent.diagnosis import Diagnoser, Retrieval
from agent.events import (
    AnsweredEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    QuestionEvent,
    RecoveredEvent,
    ServerEvent,
    StatusEvent,
    wire,
)
from agent.incident import Incident
from agent.models import CheckResult, Verdict
from agent.options import DiagnoseOptions
from agent.report import Report
from agent.runs import RunNotFound
from agent.server.config import ServerConfig
from agent.server.events import Broker
from agent.server.metrics import ServerMetrics
from agent.server.store import RunStore

log = logging.getLogger("aidai.server")


class AwaitingInput(Exception):  # a signal: the run stops at an interrupt
    def __init__(self, payload: dict[str, Any]):
        super().__init__(payload.get("kind", "input"))
        self.payload = payload


class SharedRetrieval(Retrieval):
    """One incident DB and KB for all runs (one Chroma client, the embedding model once), one query at a time."""

    def __init__(self, options: DiagnoseOptions):
        super().__init__(options)
        self._lock = threading.Lock()

    def similar(self, text: str, k: int):  # type: ignore[no-untyped-def]
        with self._lock:
            return super().similar(text, k)

    def passages(self, text: str, k: int):  # type: ignore[no-untyped-def]
        with self._lock:
            return super().passages(text, k)


ADVICE = ("suggested", "why")  # what the server adds to an approval's checks; not part of the graph's question


def question(payload: dict[str, Any]) -> dict[str, Any]:
    """The interrupt's payload as the graph asked it: without the server's advice on each check."""
    if not isinstance(payload.get("checks"), list):
        return payload
    return {**payload, "checks": [{k: v for k, v in c.items() if k not in ADVICE} if isinstance(c, dict) else c
                                  for c in payload["checks"]]}


def same_question(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (json.dumps(question(a), sort_keys=True, default=str)
            == json.dumps(question(b), sort_keys=True, default=str))


# ---- which active checks to pre-tick: the run's own evidence decides ---------------------------------------------
# findings that mean the hardware is gone: a load test cannot run on it (it fails or hangs) and can only confirm it
# (most telling first: the words shown are those of the first kind found on that hardware)
GONE = {"gpu_fallen_off_bus": "has fallen off the bus", "missing_gpu": "is missing",
        "xid_79": "has fallen off the bus", "gpu_lost": "is lost to the driver"}


def _related(a: str, b: str) -> bool:
    """Taxonomy labels on one branch below a top category (equal, or one an ancestor of the other; a check of a
    whole category such as GPU relates to nothing in particular)."""
    if "." not in a or "." not in b:
        return a == b and "." in a
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _where(host: str, entity: str) -> str:
    return host if not entity or entity == host or entity == "host" else f"{entity} on {host}"


def advise(payload: dict[str, Any], results: list[CheckResult], judgements: list[dict[str, Any]],
           inventory: dict[str, Any], manifest: Manifest) -> dict[str, Any]:
    """The approval payload with `suggested` (pre-tick it?) and `why` on each check. Nothing is suggested that the
    run's evidence says cannot run (a GPU fallen off the bus or missing, no host that can be checked) or would only
    confirm what is already known (a FAIL on the same hardware, a confirmed cause the check tests)."""
    if payload.get("kind") != "approval" or not isinstance(payload.get("checks"), list):
        return payload
    latest = {j.get("label"): j.get("status") for j in judgements}
    confirmed = [label for label, status in latest.items() if label and status == "confirmed"]
    unusable = {h for h, saved in inventory.items() if (saved.get("expectations") or {}).get("cannot_check")}
    checks = []
    for item in payload["checks"]:
        check = dict(item)
        nodes = _nodes(manifest, str(check.get("id")))
        check["suggested"], check["why"] = _advice(nodes, results, confirmed, unusable, set(inventory), manifest)
        checks.append(check)
    return {**payload, "checks": checks}


def evidence(diagnoser: Diagnoser, store: RunStore, run_id: str) -> tuple[list[CheckResult], list[dict[str, Any]],
                                                                        dict[str, Any]]:
    """What the run knows when it stops at a question: every check result (the checkpoint's, and those the
    interrupted step ran before it asked, which only the runner holds yet), every judgement in order, the
    inventory."""
    values = diagnoser.graph.get_state({"configurable": {"thread_id": run_id}}).values or {}
    results = {(r["host"], r["check"]): CheckResult.model_validate(r) for r in (values.get("results") or {}).values()}
    results.update(diagnoser.runner.cache)
    judgements = [*(values.get("judgements") or []), *store.events_of(run_id, "judgement")]
    return list(results.values()), judgements, values.get("inventory") or {}


def _advice(nodes: list[str], results: list[CheckResult], confirmed: list[str], unusable: set[str],
            hosts: set[str], manifest: Manifest) -> tuple[bool, str]:
    gone: dict[str, list[str]] = {}  # where -> "check: finding"
    what: dict[str, str] = {}
    for r in results:
        for f in r.failing():
            if f.id in GONE:
                where = _where(r.host, f.entity)
                gone.setdefault(where, []).append(f"{r.check}: {f.id}")
                if where not in what or list(GONE).index(f.id) < list(GONE).index(what[where]):
                    what[where] = f.id
    if gone:
        shown = "; ".join(f"{where} {GONE[what[where]]} ({', '.join(sorted(set(seen)))})"
                          for where, seen in list(gone.items())[:3])
        return False, (f"not pre-ticked: {shown}. A load test cannot run on hardware that is gone; it would fail or "
                       "hang and only confirm what the run already found")
    if hosts and hosts <= unusable:
        return False, "not pre-ticked: no host of this run can be checked (see the inventory), so it cannot run"
    if done := [label for label in confirmed if any(_related(label, n) for n in nodes)]:
        named = ", ".join(done[:3]) + (" is" if len(done) == 1 else " are")
        return False, f"not pre-ticked: {named} already confirmed; it would only confirm what is known"
    broken: dict[str, list[str]] = {}
    for r in results:
        if r.verdict != Verdict.FAIL or r.tier != "passive":
            continue
        same_branch = any(_related(a, b) for a in _nodes(manifest, r.check) for b in nodes)
        for f in r.findings:
            if f.severity == "FAIL" and same_branch:
                broken.setdefault(_where(r.host, f.entity), []).append(f"{r.check}: {f.id}")
    if broken:
        shown = "; ".join(f"{where} ({', '.join(dict.fromkeys(seen))})" for where, seen in list(broken.items())[:3])
        return False, (f"not pre-ticked: the run already found this hardware failing: {shown}. A load test on it "
                       "would only confirm what is known")
    return True, "nothing the run found so far says it cannot run or is already answered"


def _nodes(manifest: Manifest, check: str) -> list[str]:
    try:
        return manifest.get(check).nodes
    except KeyError:  # not in the manifest (the graph would refuse it anyway): no branch
        return []


def answer_with(saved: dict[str, Any] | None) -> Any:
    """The Diagnoser's answer callback: the saved answer for the question it was given to (and only that one),
    else stop the run at this interrupt (AwaitingInput, raised after the graph checkpointed it)."""
    given = [saved] if saved else []

    def answer(payload: dict[str, Any]) -> Any:
        if given and same_question(given[0]["for"], payload):
            return given.pop(0)["value"]
        raise AwaitingInput(payload)

    return answer


SERVER_EVENTS = {"status", "approval", "question", "answered", "recovered", "done", "error"}
VOLATILE = {"ts", "cached", "duration_s", "summary", "why", "confidence", "evidence"}


def status_event(run: dict[str, Any]) -> dict[str, Any]:
    pending = run.get("pending") or {}
    event = StatusEvent(status=run["status"], waiting_for=pending.get("kind") if pending else None,
                        **({"error": run["error"]} if run.get("error") else {}))
    return wire(event)


def replay_key(event: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in event.items() if k not in VOLATILE}, sort_keys=True, default=str)


class Replay:
    """A run continued after an approval starts the interrupted graph node again from its beginning (LangGraph
    re-executes it and `interrupt` returns the answer), so that node emits its steps a second time until it
    reaches the question. Those steps are already in the store: until the approval is taken (the graph writes it
    to the audit log), an event the run already has is not stored again, so no stream shows a step twice."""

    def __init__(self, store: RunStore, run_id: str, saved: dict[str, Any] | None):
        self.active = bool(saved) and (saved or {}).get("for", {}).get("kind") == "approval"
        self.seen: set[str] = set()
        if self.active:
            after = 0
            while batch := store.events(run_id, after):
                after = batch[-1][0]
                self.seen.update(replay_key(e) for _, e in batch if e.get("type") not in SERVER_EVENTS)

    def wrap(self, emit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
        def emitting(event: dict[str, Any]) -> None:
            if self.active and replay_key(event) in self.seen:
                return
            emit(event)

        return emitting

    def watch(self, diagnoser: Diagnoser) -> None:
        """End the replay when the graph records the approval: what follows is new."""
        if not self.active:
            return
        audit = diagnoser.tools.audit

        def audited(record: AuditRecord) -> None:
            if isinstance(record, ApprovalRecord):
                self.active = False
            audit(record)

        diagnoser.tools.audit = audited


class RunManager:
    def __init__(self, config: ServerConfig, store: RunStore, broker: Broker, metrics: ServerMetrics | None = None):
        self.config = config
        self.store = store
        self.broker = broker
        self.metrics = metrics or ServerMetrics(store, config.workers)
        self.pool = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="aidai-run")
        self._retrieval: SharedRetrieval | None = None
        self._retrieval_lock = threading.Lock()

    def options(self, hosts: list[str], *, llm: str, approval: str, feedback_rounds: int,
                operator: str, prometheus: str | None = None) -> DiagnoseOptions:
        c = self.config
        # operator: who started it, the approver of record under the policies all/none
        return DiagnoseOptions(hosts=hosts, approval=approval, llm=llm, base_url=c.base_url,  # type: ignore[arg-type]
                               model=c.model, data_dir=c.data_dir, chroma_url=c.chroma_url, kb_dir=c.kb_dir,
                               max_feedback_rounds=feedback_rounds, history=c.history,
                               checkpoint_url=c.checkpoint_url, operator=operator, prometheus=prometheus)

    def retrieval(self, options: DiagnoseOptions) -> SharedRetrieval:
        with self._retrieval_lock:
            if self._retrieval is None:
                self._retrieval = SharedRetrieval(options)
            return self._retrieval

    # ---- life cycle ---------------------------------------------------------------------------------------
    def emit(self, run_id: str, event: Event | ServerEvent) -> None:
        self.relay(run_id, wire(event))

    def relay(self, run_id: str, event: dict[str, Any]) -> None:
        """An event already in its wire form (the graph's, after the replay filter) into the run's stream."""
        self.store.append(run_id, {**event, "ts": time.time()})
        self.broker.notify(run_id)
        self.metrics.event(event)

    def set_status(self, run_id: str, status: str, **fields: Any) -> None:
        """The run's status and its `status` event, written together (one transaction), the event made from the
        row: the run list, the run record and the page's header all show the one status column."""
        self.store.transition(run_id, lambda run: {**status_event(run), "ts": time.time()}, status=status, **fields)
        self.broker.notify(run_id)

    def emit_status(self, run_id: str) -> None:
        """A `status` event that says what the store says now."""
        self.store.transition(run_id, lambda run: {**status_event(run), "ts": time.time()})
        self.broker.notify(run_id)

    def answered(self, run_id: str, event: AnsweredEvent) -> None:
        """After the store took an answer (the run is queued again): say so, then give the run to a worker."""
        self.emit(run_id, event)
        self.emit_status(run_id)
        self.submit(run_id)

    def submit(self, run_id: str) -> None:
        self.metrics.queued.inc()
        self.pool.submit(self._turn, run_id)

    def recover(self) -> list[str]:
        """Queue again every run a previous server left queued or running (killed mid-run)."""
        ids = [run["id"] for run in self.store.unfinished()]
        for run_id in ids:
            self.emit(run_id, RecoveredEvent(message="the server restarted: continuing from the last checkpoint"))
            self.submit(run_id)
        return ids

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    # ---- one worker's turn --------------------------------------------------------------------------------
    def _turn(self, run_id: str) -> None:
        self.metrics.queued.dec()
        with self.metrics.busy.track_inprogress():
            self._work(run_id)

    def _ended(self, run: dict[str, Any], status: str, resolved: bool | None) -> None:
        self.metrics.ended(status, resolved, time.time() - float(run.get("created") or time.time()))

    def _work(self, run_id: str) -> None:
        run = self.store.get(run_id)
        if run is None or run["status"] not in ("queued", "running"):
            return
        options = DiagnoseOptions(**run["options"])
        self.set_status(run_id, "running")
        diagnoser: Diagnoser | None = None
        try:
            replay = Replay(self.store, run_id, run.get("answer"))
            relay = replay.wrap(lambda event: self.relay(run_id, event))
            diagnoser = Diagnoser(options, emit=lambda event: relay(wire(event)),
                                  retrieval=self.retrieval(options))
            replay.watch(diagnoser)
            report = self._drive(diagnoser, run_id, run)
        except AwaitingInput as waiting:
            payload = waiting.payload
            if diagnoser is not None and payload.get("kind") == "approval":
                try:
                    payload = advise(payload, *evidence(diagnoser, self.store, run_id), diagnoser.runner.manifest)
                except Exception:  # advice is a courtesy: without it every check is offered unticked
                    log.exception("run %s: no advice on the approval", run_id)
                    payload = {**payload, "checks": [{**c, "suggested": False, "why": "no advice: the server "
                                                      "could not read the run's evidence"} for c in payload["checks"]]}
            # the store first: whoever sees the question can answer it at once
            question = wire(QuestionEvent(type="approval" if payload.get("kind") == "approval" else "question",
                                          **payload))
            self.store.transition(run_id, lambda run: {**question, "ts": time.time()},
                                  status="waiting", pending=payload, answer=None)
            self.emit_status(run_id)
            return
        except Exception as exc:  # the run fails, the server goes on; the message is the run's error
            log.exception("run %s failed", run_id)
            message = f"{type(exc).__name__}: {exc}"[:2000]
            self.emit(run_id, ErrorEvent(message=message))
            self.set_status(run_id, "failed", error=message, answer=None)
            self._ended(run, "failed", None)
            return
        finally:
            if diagnoser is not None:
                diagnoser.close()
                for executor in getattr(diagnoser.runner, "executors", {}).values():
                    with suppress(Exception):
                        executor.close()
        self.store.update(run_id, report=report.model_dump(mode="json"), title=report.title or run["title"])
        self.emit(run_id, DoneEvent(resolved=report.resolved, pipeline=report.pipeline,
                                    root_causes=[c.label for c in report.root_causes],
                                    levels={c.label: c.level for c in report.root_causes},
                                    suspected=[s.label for s in report.suspected]))
        self.set_status(run_id, "done", answer=None)
        self._ended(run, "done", report.resolved)

    @staticmethod
    def _drive(diagnoser: Diagnoser, run_id: str, run: dict[str, Any]) -> Report:
        # an accepted answer stays saved until the run moves on: a crash before the graph took it loses nothing,
        # and it is only ever given to the question it answers
        answer = answer_with(run.get("answer"))
        try:
            return diagnoser.resume(run_id, answer)
        except RunNotFound:
            if run.get("answer"):
                raise
            # no checkpoint yet: queued and never started, or killed before the first step finished
            return diagnoser.run(Incident.model_validate(run["incident"]), answer, run_id=run_id)
