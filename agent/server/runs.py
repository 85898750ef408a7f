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
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any

from agent.diagnosis import DiagnoseOptions, Diagnoser, Retrieval, RunNotFound
from agent.incident import Incident
from agent.report import Report
from agent.server.config import ServerConfig
from agent.server.events import Broker
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


def same_question(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def answer_with(saved: dict[str, Any] | None) -> Any:
    """The Diagnoser's answer callback: the saved answer for the question it was given to (and only that one),
    else stop the run at this interrupt (AwaitingInput, raised after the graph checkpointed it)."""
    given = [saved] if saved else []

    def answer(payload: dict[str, Any]) -> Any:
        if given and same_question(given[0]["for"], payload):
            return given.pop(0)["value"]
        raise AwaitingInput(payload)

    return answer


class RunManager:
    def __init__(self, config: ServerConfig, store: RunStore, broker: Broker):
        self.config = config
        self.store = store
        self.broker = broker
        self.pool = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="aidai-run")
        self._retrieval: SharedRetrieval | None = None
        self._retrieval_lock = threading.Lock()

    def options(self, hosts: list[str], *, llm: str, approval: str, feedback_rounds: int,
                operator: str) -> DiagnoseOptions:
        c = self.config
        # operator: who started it, the approver of record under the policies all/none
        return DiagnoseOptions(hosts=hosts, approval=approval, llm=llm, base_url=c.base_url,  # type: ignore[arg-type]
                               model=c.model, data_dir=c.data_dir, chroma_url=c.chroma_url, kb_dir=c.kb_dir,
                               max_feedback_rounds=feedback_rounds, history=c.history,
                               checkpoint_url=c.checkpoint_url, operator=operator)

    def retrieval(self, options: DiagnoseOptions) -> SharedRetrieval:
        with self._retrieval_lock:
            if self._retrieval is None:
                self._retrieval = SharedRetrieval(options)
            return self._retrieval

    # ---- life cycle ---------------------------------------------------------------------------------------
    def emit(self, run_id: str, event: dict[str, Any]) -> None:
        self.store.append(run_id, {**event, "ts": time.time()})
        self.broker.notify(run_id)

    def set_status(self, run_id: str, status: str, **fields: Any) -> None:
        self.store.update(run_id, status=status, **fields)
        self.emit(run_id, {"type": "status", "status": status,
                           **{k: v for k, v in fields.items() if k in ("error", "pending")}})

    def submit(self, run_id: str) -> None:
        self.pool.submit(self._work, run_id)

    def recover(self) -> list[str]:
        """Queue again every run a previous server left queued or running (killed mid-run)."""
        ids = [run["id"] for run in self.store.unfinished()]
        for run_id in ids:
            self.emit(run_id, {"type": "recovered", "message": "the server restarted: continuing from the last "
                                                               "checkpoint"})
            self.submit(run_id)
        return ids

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    # ---- one worker's turn --------------------------------------------------------------------------------
    def _work(self, run_id: str) -> None:
        run = self.store.get(run_id)
        if run is None or run["status"] not in ("queued", "running"):
            return
        options = DiagnoseOptions(**run["options"])
        self.set_status(run_id, "running")
        diagnoser: Diagnoser | None = None
        try:
            diagnoser = Diagnoser(options, emit=lambda event: self.emit(run_id, event),
                                  retrieval=self.retrieval(options))
            report = self._drive(diagnoser, run_id, run)
        except AwaitingInput as waiting:
            kind = waiting.payload.get("kind")
            self.emit(run_id, {"type": "approval" if kind == "approval" else "question", **waiting.payload})
            self.set_status(run_id, "waiting", pending=waiting.payload, answer=None)
            return
        except Exception as exc:  # the run fails, the server goes on; the message is the run's error
            log.exception("run %s failed", run_id)
            message = f"{type(exc).__name__}: {exc}"[:2000]
            self.emit(run_id, {"type": "error", "message": message})
            self.set_status(run_id, "failed", error=message, answer=None)
            return
        finally:
            if diagnoser is not None:
                diagnoser.close()
                for executor in getattr(diagnoser.runner, "executors", {}).values():
                    with suppress(Exception):
                        executor.close()
        self.store.update(run_id, report=report.model_dump(mode="json"), title=report.title or run["title"])
        self.emit(run_id, {"type": "done", "resolved": report.resolved, "pipeline": report.pipeline,
                           "root_causes": [c.label for c in report.root_causes]})
        self.set_status(run_id, "done", answer=None)

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
