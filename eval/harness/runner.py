"""Run methods over problems in worker processes and collect one row per (method, incident).

Each worker (spawned, so no inherited threads or open stores) copies the run's data directory, loads the
taxonomy, the offline reasoner and the retrieval once, and diagnoses one incident per task on freshly built
simulated hosts. A method that raises, or runs past the per-incident timeout (SIGALRM in the worker; not with
--workers 0), gives an error row. A worker that dies (segfault, OOM kill, os._exit) breaks the pool: the
incidents it had in flight are re-run one at a time in a fresh pool, and the one that kills its worker again is
recorded as an error row. A worker stuck where no signal reaches it is killed after twice the timeout.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eval.harness.history import HistoryInfo, HistoryRetrieval, HistorySpec, default_cache_dir, prepare
from eval.harness.problems import Problem, remove_labels

if TYPE_CHECKING:
    from agent.taxonomy import Taxonomy

Row = dict[str, Any]
OnRow = Callable[[Row], None]
STARTUP_GRACE_S = 180.0  # a fresh worker imports the stack and loads the embedding model before its first task


@dataclass
class RunConfig:
    methods: list[str] = field(default_factory=lambda: ["aidai"])
    llm: str = "offline"
    base_url: str | None = None
    model: str | None = None
    seed: bool = True
    history_file: str | None = None
    leave_one_out: bool = False
    remove: list[str] = field(default_factory=list)
    knowledge: bool = True
    workers: int = 2  # 0: in this process, one incident after another (debugging, tests)
    timeout_s: float = 600.0
    cache_dir: str | None = None  # seed DB and KB index built once (default: <aidai data dir>/eval-cache)
    taxonomy_file: str | None = None  # a taxonomy other than the shipped one (e.g. built from history)
    trace: bool = False  # rows carry the method's trace (Outcome.trace): what its conclusion was drawn from
    data_dir: str = ""  # set by run_benchmark: the run's prepared DB
    work_dir: str = ""  # set by run_benchmark: simulated hosts live here


@dataclass
class RunResult:
    rows: list[Row]
    history: HistoryInfo
    removed: list[str]
    wall_s: float
    before_rows: list[Row] = field(default_factory=list)  # with --remove-label: affected incidents, full taxonomy


class IncidentTimeout(Exception):
    pass


# ---- the worker side ---------------------------------------------------------------------------------------
_WORKER: dict[str, Any] = {}


def run_taxonomy(config: RunConfig) -> Taxonomy:
    """The shipped taxonomy, or the run's --taxonomy file validated against its own check bindings."""
    from agent.taxonomy import load_candidate, load_taxonomy

    return load_candidate(Path(config.taxonomy_file)) if config.taxonomy_file else load_taxonomy()


def init_worker(config: RunConfig, in_process: bool = False) -> None:
    """Per worker: a private copy of the DB, the (possibly reduced) taxonomy, the offline reasoner, retrieval."""
    from agent.options import DiagnoseOptions
    from agent.reasoning.offline import OfflineReasoner
    from eval.harness.methods import resolve_method

    if not in_process:
        os.environ.setdefault("AIDAI_EMBED_THREADS", "1")  # one worker per core
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    private = Path(tempfile.mkdtemp(prefix="w-", dir=config.work_dir))
    data = private / "data"
    shutil.copytree(config.data_dir, data, dirs_exist_ok=True)
    taxonomy = run_taxonomy(config)
    removed: list[str] = []
    if config.remove:
        taxonomy, removed = remove_labels(taxonomy, config.remove)
    offline = OfflineReasoner(taxonomy)
    options = DiagnoseOptions(data_dir=str(data), checkpoint=False)
    retrieval = HistoryRetrieval(options, exclude_labels=removed)  # past incidents of removed labels are hidden
    methods = {spec: resolve_method(spec) for spec in config.methods}
    _WORKER.update(config=config, taxonomy=taxonomy, offline=offline, retrieval=retrieval, methods=methods,
                   data=str(data), private=private, in_process=in_process)
    if any(getattr(m, "needs_embeddings", False) for m in methods.values()):
        from agent.knowledge.embeddings import embed

        embed(["warm-up"])  # load the model now, not inside the first incident's wall time


def run_task(method_spec: str, record: dict[str, Any]) -> Row:
    """One (method, incident): build its hosts, diagnose, score. Never raises: errors become the row's error."""
    from eval.harness.methods import Env, scenario_root

    config: RunConfig = _WORKER["config"]
    problem = Problem(record)
    method = _WORKER["methods"][method_spec]
    name = getattr(method, "name", method_spec)
    row: Row = {"method": name, "id": problem.id, "label": problem.label, "predicted": None, "confirmed": [],
                "pipeline": None, "path": [], "explored": [], "error": None, **problem.scenario_fields()}
    root = scenario_root(Path(_WORKER["private"]) / "hosts", name, problem)
    began = time.perf_counter()
    try:
        limit = 0.0 if _WORKER["in_process"] else config.timeout_s  # the caller's own SIGALRM stays untouched
        with Deadline(limit, f"{name} on {problem.id}"):
            hosts = problem.materialize(root)
            retrieval: HistoryRetrieval = _WORKER["retrieval"]
            retrieval.exclude_ids = {problem.id}  # the record never retrieves itself (leave-one-out)
            env = Env(taxonomy=_WORKER["taxonomy"], offline=_WORKER["offline"], retrieval=retrieval, hosts=hosts,
                      data_dir=_WORKER["data"], llm=config.llm, base_url=config.base_url, model=config.model,
                      knowledge=config.knowledge)
            outcome = method.diagnose(problem, env)
        row.update(predicted=outcome.predicted, confirmed=list(outcome.confirmed), pipeline=outcome.pipeline,
                   path=list(outcome.path), explored=list(outcome.explored), nearest_history=outcome.nearest_history,
                   evidence=outcome.evidence, level=outcome.level, confidence=outcome.confidence,
                   suspected=list(outcome.suspected), **outcome.checks, **outcome.usage)
        if config.trace and outcome.trace:
            row["trace"] = outcome.trace
    except Exception as exc:  # a method's bug or a timeout: the run goes on
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        row["traceback"] = traceback.format_exc(limit=6)[-2000:]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    row["wall_s"] = round(time.perf_counter() - began, 3)
    row["reason_s"] = round(row["wall_s"] - row.get("check_wait_s", 0.0), 3)  # the method's own time
    row.update(problem.evaluate(row["predicted"]))
    return row


class Deadline:
    """SIGALRM after `seconds` raises IncidentTimeout in the main thread (a no-op elsewhere)."""

    def __init__(self, seconds: float, what: str):
        self.seconds, self.what = seconds, what
        self.armed = seconds > 0 and threading.current_thread() is threading.main_thread()

    def _fire(self, signum: int, frame: Any) -> None:
        raise IncidentTimeout(f"{self.what} ran past {self.seconds:g}s")

    def __enter__(self) -> None:
        if self.armed:
            self.previous = signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc: Any) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)


# ---- the parent side ---------------------------------------------------------------------------------------
@dataclass
class _Task:
    index: int
    method: str  # the spec: a name or module:Class
    name: str
    record: dict[str, Any]
    isolate: bool = False  # in flight when a worker died: re-run alone to find out whether it is the cause


def error_row(task: _Task, message: str) -> Row:
    problem = Problem(task.record)
    return {"method": task.name, "id": problem.id, "label": problem.label, "predicted": None, "confirmed": [],
            "pipeline": None, "path": [], "explored": [], "error": message, "wall_s": None,
            **problem.scenario_fields(), **problem.evaluate(None)}


def run_tasks(config: RunConfig, problems: list[Problem], on_row: OnRow | None = None) -> list[Row]:
    from eval.harness.methods import resolve_method

    names = {spec: getattr(resolve_method(spec), "name", spec) for spec in config.methods}
    tasks = [_Task(i, spec, names[spec], p.record) for i, (spec, p) in
             enumerate((spec, p) for spec in config.methods for p in problems)]
    rows: dict[int, Row] = {}

    def done(task: _Task, row: Row) -> None:
        rows[task.index] = row
        if on_row:
            on_row(row)

    if config.workers <= 0:
        init_worker(config, in_process=True)
        try:
            for task in tasks:
                done(task, run_task(task.method, task.record))
        finally:
            shutil.rmtree(_WORKER.get("private", ""), ignore_errors=True)
            _WORKER.clear()
        return [rows[i] for i in range(len(tasks))]
    pending = deque(tasks)
    while pending:
        pending = _one_pool(config, pending, done)
    return [rows[i] for i in range(len(tasks))]


def _one_pool(config: RunConfig, pending: deque[_Task], done: Callable[[_Task, Row], None]) -> deque[_Task]:
    """Run tasks in one pool until they are done or a worker dies; returns what is left to run."""
    workers = config.workers
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"), initializer=init_worker,
                               initargs=(config,))
    inflight: dict[Future[Row], tuple[_Task, float]] = {}
    suspects: list[_Task] = []
    first = True
    try:
        while pending or inflight:
            isolating = any(t.isolate for t, _ in inflight.values())
            while pending and len(inflight) < workers and not isolating:
                if pending[0].isolate and inflight:
                    break
                task = pending.popleft()
                inflight[pool.submit(run_task, task.method, task.record)] = (task, time.monotonic())
                isolating = task.isolate
            finished, _ = wait(list(inflight), timeout=2.0, return_when=FIRST_COMPLETED)
            broken = False
            for future in finished:
                task, _ = inflight.pop(future)
                try:
                    done(task, future.result())
                    first = False
                except BrokenProcessPool:
                    broken = True
                    suspects.append(task)
                except Exception as exc:  # the row could not come back (e.g. not picklable)
                    done(task, error_row(task, f"{type(exc).__name__}: {exc}"))
            limit = 2 * config.timeout_s + (STARTUP_GRACE_S if first else 30.0)
            stuck = [f for f, (_, began) in inflight.items() if time.monotonic() - began > limit]
            if stuck and not broken:
                for future in stuck:
                    task, _ = inflight.pop(future)
                    done(task, error_row(task, f"IncidentTimeout: no answer after {limit:.0f}s; worker killed"))
                _kill(pool)
                broken = True
            if broken:
                suspects += [task for task, _ in inflight.values()]
                inflight.clear()
                break
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    for task in sorted(suspects, key=lambda t: -t.index):
        if task.isolate:  # it killed its worker running alone
            done(task, error_row(task, "WorkerCrashed: the worker process died running this incident"))
        else:
            task.isolate = True
            pending.appendleft(task)
    return pending


def _kill(pool: ProcessPoolExecutor) -> None:
    for process in list((getattr(pool, "_processes", None) or {}).values()):  # no public way to stop a stuck task
        process.kill()


# ---- one benchmark run -------------------------------------------------------------------------------------
def run_benchmark(config: RunConfig, problems: list[Problem], incidents_file: str | None = None,
                  on_row: OnRow | None = None, on_stage: Callable[[str], None] | None = None) -> RunResult:
    """Prepare the run's DB in a fresh temp dir, run every method on every problem, clean up. With removed
    labels, the affected problems are run again with the full taxonomy (the "before" of AidAI Table 4)."""
    began = time.perf_counter()
    removed: list[str] = []
    if config.remove:
        _, removed = remove_labels(run_taxonomy(config), config.remove)  # fail early on an unknown label
    if config.leave_one_out and not incidents_file:
        raise ValueError("leave-one-out needs the incidents file (it is the history)")
    uses_kb = config.knowledge and "aidai" in config.methods
    spec = HistorySpec(seed=config.seed, history_file=config.history_file,
                       loo_file=incidents_file if config.leave_one_out else None, knowledge=uses_kb)
    stage = on_stage or (lambda text: None)
    with tempfile.TemporaryDirectory(prefix="aidai-") as tmp:
        stage("preparing the historical DB" + (" and the KB index" if uses_kb else ""))
        info = prepare(Path(tmp) / "data", spec, Path(config.cache_dir) if config.cache_dir else default_cache_dir())
        run = RunConfig(**{**asdict(config), "data_dir": str(Path(tmp) / "data"), "work_dir": tmp,
                           "knowledge": uses_kb})
        stage(f"diagnosing {len(problems)} incidents x {len(config.methods)} method(s) with "
              f"{config.workers or 'no'} worker process(es)")
        rows = run_tasks(run, problems, on_row)
        before: list[Row] = []
        affected = [p for p in problems if p.label in set(removed)]
        if affected:
            stage(f"the {len(affected)} incident(s) with a removed label again, with the full taxonomy")
            before = run_tasks(RunConfig(**{**asdict(run), "remove": []}), affected, on_row)
    return RunResult(rows=rows, history=info, removed=removed, wall_s=round(time.perf_counter() - began, 1),
                     before_rows=before)
