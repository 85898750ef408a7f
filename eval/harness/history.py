"""The historical incident DB (and the KB index) a benchmark run reads, always in a fresh data directory.

The seed incidents and the KB take a minute each to embed on two cores, so they are built once into a cache
directory and copied. What a run adds (`--history FILE`, the incidents themselves for leave-one-out) is imported
into the copy. Chroma is only ever opened in short-lived processes: the cache and the run's DB are written by
a spawned process that exits before anyone copies or reads them, and each worker reads its own copy.

Leave-one-out and unseen labels are query-time filters (`IncidentDB.query(exclude_ids=, exclude_labels=)`):
the DB holds every record once, and the record under test never sees itself.
"""

from __future__ import annotations

import fcntl
import shutil
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from agent.diagnosis import Retrieval
from agent.options import DiagnoseOptions
from agent.reasoning.base import KBPassage, PastIncident

CHROMA = "chroma"


@dataclass(frozen=True)
class HistorySpec:
    seed: bool = True  # the bundled seed incidents
    history_file: str | None = None  # --history: imported into the run's DB
    loo_file: str | None = None  # --leave-one-out: the incidents under test are the history too
    knowledge: bool = True  # the KB index (pipeline 3's reading)


@dataclass
class HistoryInfo:
    """What the run's DB holds, for the report."""

    seed: int = 0
    history: int = 0
    leave_one_out: int = 0
    rejected: list[str] = field(default_factory=list)
    total: int = 0


def default_cache_dir() -> Path:
    from agent.paths import default_data_dir

    return default_data_dir() / "eval-cache"


def prepare(data_dir: Path, spec: HistorySpec, cache_dir: Path) -> HistoryInfo:
    """Build (or reuse) the cache, copy it to `data_dir`, import the run's history. Each Chroma step runs in
    its own spawned process."""
    data_dir.mkdir(parents=True, exist_ok=True)
    if spec.seed or spec.knowledge:
        _in_process(_build_cache, cache_dir, spec.seed, spec.knowledge)
        with _locked(cache_dir):
            shutil.copytree(cache_dir / CHROMA, data_dir / CHROMA, dirs_exist_ok=True)
    info: HistoryInfo = _in_process(_import, data_dir, spec)
    return info


def _in_process(fn: Any, *args: Any) -> Any:
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"), max_tasks_per_child=1) as pool:
        return pool.submit(fn, *args).result()


@contextmanager
def _locked(cache_dir: Path):  # type: ignore[no-untyped-def]
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_cache(cache_dir: Path, seed: bool, knowledge: bool) -> None:
    from agent.knowledge.incident_db import IncidentDB
    from agent.knowledge.kb_index import KnowledgeBase

    with _locked(cache_dir):
        if seed:
            IncidentDB(data_dir=cache_dir).ensure_seed()  # skipped when the seed file has not changed
        if knowledge:
            KnowledgeBase(data_dir=cache_dir).ensure()


def _import(data_dir: Path, spec: HistorySpec) -> HistoryInfo:
    from agent.knowledge import store
    from agent.knowledge.incident_db import COLLECTION, IncidentDB

    info = HistoryInfo()
    location = store.resolve_location(data_dir)
    if store.collection_exists(location, COLLECTION):
        if spec.seed:
            info.seed = IncidentDB(data_dir=data_dir).count()
        else:  # the cache held the seed for another run
            store.client(location).delete_collection(COLLECTION)
    db = IncidentDB(data_dir=data_dir)
    for path, source in ((spec.history_file, "history"), (spec.loo_file, "leave-one-out")):
        if not path:
            continue
        report = db.import_jsonl(path, source=source)
        info.rejected += [f"{source} {r}" for r in report.rejected]
        if source == "history":
            info.history = report.imported
        else:
            info.leave_one_out = report.imported
    info.total = db.count()
    return info


class HistoryRetrieval(Retrieval):
    """Retrieval over the run's DB and KB: nothing is built here, and the record under test (and removed
    labels) are filtered out at query time."""

    def __init__(self, options: DiagnoseOptions, exclude_labels: Iterable[str] = ()):
        super().__init__(options)
        self.exclude_ids: set[str] = set()
        self.exclude_labels = set(exclude_labels)

    def similar(self, text: str, k: int) -> list[PastIncident]:
        if self._db is None:
            from agent.knowledge.incident_db import IncidentDB

            self._db = IncidentDB(data_dir=self.options.data_dir)
        return self._db.query(text, k=k, exclude_ids=self.exclude_ids, exclude_labels=self.exclude_labels)

    def passages(self, text: str, k: int) -> list[KBPassage]:
        if self._kb is None:
            from agent.knowledge.kb_index import KnowledgeBase

            self._kb = KnowledgeBase(data_dir=self.options.data_dir)
        return self._kb.query(text, k=k)
