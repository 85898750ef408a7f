"""The past-incident DB (pipeline 1's memory): the seed incidents plus imported history, in the Chroma collection
"incidents", searched by embedding similarity through LlamaIndex.

Records are DESIGN.md's incident JSONL (id, description, environment, label, faults, noise, hosts, optional
resolution/source). What is embedded is the description plus the environment; the label and the rest are
metadata, never embedded. Records are upserted by id, so importing a file twice changes nothing. `ensure_seed`
rebuilds from knowledge/incidents/seed.jsonl only when the collection is missing or the file changed (its
sha256 is kept in the collection metadata), so a warm start loads no model and embeds nothing.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Collection as Container
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from agent.knowledge import store
from agent.paths import KNOWLEDGE_DIR
from agent.reasoning.base import PastIncident

COLLECTION = "incidents"
SEED_PATH = KNOWLEDGE_DIR / "incidents" / "seed.jsonl"
SEED_HASH_KEY = "seed_sha256"
SEED_SOURCE = "seed"
FORMAT_VERSION = "1"  # bump when the embedded text or stored metadata change shape: forces a seed rebuild
LABEL_PATTERN = r"^[A-Z][A-Z0-9_]*(\.[A-Z][A-Z0-9_]*)*$"
MAX_RESOLUTION_CHARS = 4000

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class Fault(BaseModel):
    model_config = ConfigDict(extra="allow")
    fault: Text


class IncidentRecord(BaseModel):
    """One line of an incident JSONL file."""

    model_config = ConfigDict(extra="ignore")
    id: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=256)]
    description: Text
    environment: str = ""
    label: Annotated[str, StringConstraints(strip_whitespace=True, pattern=LABEL_PATTERN)]
    faults: list[Fault] = Field(default_factory=list)
    noise: list[Fault | str] = Field(default_factory=list)
    hosts: list[str] = Field(default_factory=list)
    resolution: str | None = None
    source: str | None = None  # where the record came from (URL, ticket system); not the import source

    def embed_text(self) -> str:
        return "\n".join(part.strip() for part in (self.description, self.environment) if part.strip())

    def entry(self, source: str) -> store.Entry:
        meta: dict[str, store.Scalar] = {
            "incident_id": self.id, "label": self.label, "source": source,
            "reference": self.source or "", "resolution": (self.resolution or "")[:MAX_RESOLUTION_CHARS],
            "faults": ",".join(f.fault for f in self.faults),
        }
        return store.Entry(id=self.id, text=self.embed_text(), metadata=meta)


@dataclass(frozen=True)
class Rejection:
    line: int | None  # 1-based line of the JSONL file; for build(), the 1-based position in the records given
    reason: str
    id: str | None = None

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line is not None else "record"
        return f"{where}{f' (id {self.id!r})' if self.id else ''}: {self.reason}"


@dataclass
class ImportReport:
    source: str
    path: str | None = None
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0  # seed records no longer in the seed file
    rejected: list[Rejection] = field(default_factory=list)
    skipped: bool = False  # ensure_seed: nothing changed, nothing done
    seconds: float = 0.0

    @property
    def imported(self) -> int:
        return self.added + self.updated + self.unchanged

    @property
    def embedded(self) -> int:
        return self.added + self.updated


def _validation_reason(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "record"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def parse_record(obj: Any, known_labels: Container[str] | None = None) -> IncidentRecord:
    """Validate one decoded record; ValueError with a readable reason otherwise."""
    if not isinstance(obj, Mapping):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    try:
        record = IncidentRecord.model_validate(obj)
    except ValidationError as exc:
        raise ValueError(_validation_reason(exc)) from None
    if known_labels is not None and record.label not in known_labels:
        raise ValueError(f"label {record.label!r} is not a leaf of the taxonomy")
    return record


def read_jsonl(path: str | Path, known_labels: Container[str] | None = None
               ) -> tuple[list[tuple[int, IncidentRecord]], list[Rejection]]:
    """Every valid record with its line number, and every rejected line with why. Blank lines are skipped."""
    good: list[tuple[int, IncidentRecord]] = []
    rejected: list[Rejection] = []
    seen: dict[str, int] = {}
    try:
        raw_lines = Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise FileNotFoundError(f"cannot read incident file {path}: {exc.strerror or exc}") from exc
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw.decode("utf-8-sig"))
        except UnicodeDecodeError as exc:
            rejected.append(Rejection(number, f"not UTF-8 (byte {exc.start + 1})"))
            continue
        except json.JSONDecodeError as exc:
            rejected.append(Rejection(number, f"invalid JSON: {exc.msg} at column {exc.colno}"))
            continue
        rid = str(obj.get("id")) if isinstance(obj, dict) and obj.get("id") is not None else None
        try:
            record = parse_record(obj, known_labels)
        except ValueError as exc:
            rejected.append(Rejection(number, str(exc), rid))
            continue
        if record.id in seen:
            rejected.append(Rejection(number, f"duplicate id (already on line {seen[record.id]})", record.id))
            continue
        seen[record.id] = number
        good.append((number, record))
    return good, rejected


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256(FORMAT_VERSION.encode())
    digest.update(path.read_bytes())
    return digest.hexdigest()


class IncidentDB(store.StoredCollection):
    """Past incidents in Chroma. `data_dir`/`url` choose the store (see agent.knowledge.store)."""

    def __init__(self, data_dir: str | Path | None = None, url: str | None = None, *,
                 location: store.StoreLocation | None = None, collection: str = COLLECTION):
        super().__init__(data_dir, url, location, collection)

    def build(self, records: Iterable[IncidentRecord | Mapping[str, Any]], source: str = "history") -> ImportReport:
        """Upsert records by id (invalid ones are rejected with their position and reason, the rest stored)."""
        start = time.perf_counter()
        report = ImportReport(source=source)
        valid: dict[str, IncidentRecord] = {}
        for position, item in enumerate(records, start=1):
            try:
                record = item if isinstance(item, IncidentRecord) else parse_record(item)
            except ValueError as exc:
                rid = item.get("id") if isinstance(item, Mapping) else None
                report.rejected.append(Rejection(position, str(exc), str(rid) if rid is not None else None))
                continue
            if record.id in valid:
                report.rejected.append(Rejection(position, "duplicate id in this batch", record.id))
                continue
            valid[record.id] = record
        self._store(list(valid.values()), source, report)
        report.seconds = time.perf_counter() - start
        return report

    def import_jsonl(self, path: str | Path, source: str = "history",
                     known_labels: Container[str] | None = None) -> ImportReport:
        """Import an incident JSONL file; bad lines are reported by line number and the good ones imported."""
        start = time.perf_counter()
        good, rejected = read_jsonl(path, known_labels)
        report = ImportReport(source=source, path=str(path), rejected=rejected)
        self._store([record for _, record in good], source, report)
        report.seconds = time.perf_counter() - start
        return report

    def _store(self, records: list[IncidentRecord], source: str, report: ImportReport) -> None:
        counts = store.upsert(self.collection, [r.entry(source) for r in records])
        report.added, report.updated, report.unchanged = counts.added, counts.updated, counts.unchanged

    def seed_hash(self) -> str | None:
        value = (self.collection.metadata or {}).get(SEED_HASH_KEY)
        return str(value) if value else None

    def ensure_seed(self, path: str | Path | None = None) -> ImportReport:
        """Build or refresh the seed incidents when the collection is new or the seed file changed; otherwise
        return at once (skipped=True) without loading the model."""
        start = time.perf_counter()
        seed = Path(path) if path is not None else SEED_PATH
        if not seed.is_file():
            raise FileNotFoundError(f"seed incident file {seed} not found")
        digest = file_sha256(seed)
        existed = store.collection_exists(self.location, self.name)
        if existed and self.seed_hash() == digest:
            return ImportReport(source=SEED_SOURCE, path=str(seed), skipped=True,
                                seconds=time.perf_counter() - start)
        good, rejected = read_jsonl(seed)
        report = ImportReport(source=SEED_SOURCE, path=str(seed), rejected=rejected)
        self._store([record for _, record in good], SEED_SOURCE, report)
        report.removed = store.delete_except(self.collection, {r.id for _, r in good}, where={"source": SEED_SOURCE})
        store.set_collection_metadata(self.collection, **{SEED_HASH_KEY: digest})
        report.seconds = time.perf_counter() - start
        return report

    def query(self, text: str, k: int = 5, *, exclude_ids: Iterable[str] = (),
              exclude_labels: Iterable[str] = ()) -> list[PastIncident]:
        """The k past incidents most similar to `text`, best first; score = cosine similarity in [0, 1].
        `exclude_ids` / `exclude_labels` hide records (leave-one-out evaluation, unseen-label experiments)."""
        clauses: list[dict[str, Any]] = []
        if ids := sorted(set(exclude_ids)):
            clauses.append({"incident_id": {"$nin": ids}})
        if labels := sorted(set(exclude_labels)):
            clauses.append({"label": {"$nin": labels}})
        where = clauses[0] if len(clauses) == 1 else ({"$and": clauses} if clauses else None)
        return [PastIncident(id=str(hit.metadata.get("incident_id") or hit.id), text=hit.text,
                             label=str(hit.metadata.get("label", "")), score=round(hit.score, 4),
                             source=str(hit.metadata.get("source") or "history"))
                for hit in store.retrieve(self.collection, text, k, where)]
