"""An organisation's historical incidents (tickets) as read from JSONL or CSV, validated row by row and de-duplicated.

A history record is what a ticket system exports: description, the OCE discussion, the resolution, optionally
the confirmed root-cause label and the date it was opened. Every bad row is reported with its line number and
the reason; nothing is dropped silently (duplicates are listed too).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from agent.knowledge.incident_db import LABEL_PATTERN, IncidentRecord

Format = Literal["jsonl", "csv"]
FORMATS: tuple[str, ...] = ("jsonl", "csv")
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
LIST_FIELDS = ("faults", "noise", "hosts")  # JSON-encoded in CSV cells


class HistoryRecord(BaseModel):
    """One historical incident. `id` may be omitted: it is then derived from the description's content."""

    model_config = ConfigDict(extra="ignore")
    id: Annotated[str, StringConstraints(strip_whitespace=True, max_length=256)] = ""
    description: Text
    discussion: str = ""  # what the OCEs wrote while diagnosing: commands run, results seen
    resolution: str = ""
    label: Annotated[str, StringConstraints(strip_whitespace=True, pattern=LABEL_PATTERN)] | None = None
    opened: date | None = None
    environment: str = ""
    source: str = ""
    faults: list[dict[str, Any]] = Field(default_factory=list)
    noise: list[dict[str, Any] | str] = Field(default_factory=list)
    hosts: list[str] = Field(default_factory=list)

    @field_validator("label", mode="before")
    @classmethod
    def _blank_label_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("opened", mode="before")
    @classmethod
    def _date_or_datetime(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if not text:
                return None
            if len(text) > 10:  # an ISO timestamp: keep the day
                return datetime.fromisoformat(text.replace("Z", "+00:00")).date()
        return value

    def content_key(self) -> str:
        """Identity of the incident's text, for de-duplication (whitespace and case do not matter)."""
        norm = re.sub(r"\s+", " ", self.description).strip().lower()
        return hashlib.sha256(norm.encode("utf-8")).hexdigest()

    def text(self) -> str:
        """Everything an analysis may read: description, environment, discussion, resolution."""
        return "\n".join(p.strip() for p in (self.description, self.environment, self.discussion, self.resolution)
                         if p.strip())

    def to_incident(self, label: str) -> IncidentRecord:
        """The incident-DB record (the DB needs a label: the record's own or the one pass 1 gave it)."""
        resolution = self.resolution.strip()
        if self.discussion.strip():
            resolution = f"{resolution}\n\nOCE discussion: {self.discussion.strip()}".strip()
        return IncidentRecord.model_validate({
            "id": self.id, "description": self.description, "environment": self.environment, "label": label,
            "faults": self.faults, "noise": self.noise, "hosts": self.hosts, "resolution": resolution or None,
            "source": self.source or None})


@dataclass(frozen=True)
class RowProblem:
    line: int  # 1-based line of the file (CSV: the line the row starts on)
    reason: str
    id: str | None = None

    def __str__(self) -> str:
        return f"line {self.line}{f' (id {self.id!r})' if self.id else ''}: {self.reason}"


@dataclass
class ReadResult:
    path: str
    records: list[tuple[int, HistoryRecord]] = field(default_factory=list)
    rejected: list[RowProblem] = field(default_factory=list)  # invalid rows: block an all-or-nothing import
    duplicates: list[RowProblem] = field(default_factory=list)  # repeats of an earlier row: skipped, listed

    @property
    def ok(self) -> bool:
        return not self.rejected


def detect_format(path: Path, fmt: str | None) -> Format:
    if fmt:
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
        return fmt  # type: ignore[return-value]
    suffix = path.suffix.lower().lstrip(".")
    if suffix in ("jsonl", "ndjson", "json"):
        return "jsonl"
    if suffix in ("csv", "tsv"):
        return "csv"
    raise ValueError(f"cannot tell the format of {path.name} from its extension: pass --format jsonl|csv")


def _reason(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'record'}: {e['msg']}" for e in exc.errors())


def _rows_jsonl(raw: bytes) -> list[tuple[int, Any, str | None]]:
    """(line, decoded object or None, error) per non-blank line."""
    rows: list[tuple[int, Any, str | None]] = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line.decode("utf-8-sig")), None))
        except UnicodeDecodeError as exc:
            rows.append((number, None, f"not UTF-8 (byte {exc.start + 1})"))
        except json.JSONDecodeError as exc:
            rows.append((number, None, f"invalid JSON: {exc.msg} at column {exc.colno}"))
    return rows


def _rows_csv(raw: bytes, delimiter: str) -> list[tuple[int, Any, str | None]]:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return [(1, None, f"not UTF-8 (byte {exc.start + 1}): the whole file is unreadable")]
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    rows: list[tuple[int, Any, str | None]] = []
    if not reader.fieldnames or "description" not in reader.fieldnames:
        return [(1, None, f"the header must name a 'description' column (got {reader.fieldnames or []})")]
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            rows.append((start, None, f"malformed CSV: {exc}"))
            break  # the parser cannot resynchronise after a broken quote
        if None in row:
            rows.append((start, None, f"{len(row[None])} more cell(s) than the header has columns"))  # type: ignore[index]
            continue
        if not any((v or "").strip() for v in row.values()):
            continue
        obj: dict[str, Any] = {k: v for k, v in row.items() if v is not None and v != ""}
        problem = None
        for key in LIST_FIELDS:
            if key in obj:
                try:
                    obj[key] = json.loads(obj[key])
                except json.JSONDecodeError:
                    problem = f"{key}: not a JSON list"
        rows.append((start, obj if problem is None else None, problem))
    return rows


def read_history(path: str | Path, fmt: str | None = None) -> ReadResult:
    """Parse and validate every row; ids must be unique, repeated incidents (same id and text, or the same
    text under another id) are listed as duplicates. FileNotFoundError / ValueError for an unreadable file."""
    path = Path(path)
    kind = detect_format(path, fmt)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise FileNotFoundError(f"cannot read history file {path}: {exc.strerror or exc}") from exc
    rows = _rows_jsonl(raw) if kind == "jsonl" else _rows_csv(raw, "\t" if path.suffix.lower() == ".tsv" else ",")
    result = ReadResult(path=str(path))
    by_id: dict[str, tuple[int, str]] = {}
    by_content: dict[str, tuple[int, str]] = {}
    for line, obj, error in rows:
        rid = str(obj["id"]) if isinstance(obj, dict) and obj.get("id") not in (None, "") else None
        if error is not None:
            result.rejected.append(RowProblem(line, error, rid))
            continue
        if not isinstance(obj, dict):
            result.rejected.append(RowProblem(line, f"expected a JSON object, got {type(obj).__name__}"))
            continue
        try:
            record = HistoryRecord.model_validate(obj)
        except (ValidationError, ValueError) as exc:
            reason = _reason(exc) if isinstance(exc, ValidationError) else str(exc)
            result.rejected.append(RowProblem(line, reason, rid))
            continue
        key = record.content_key()
        if not record.id:
            record.id = f"hist-{key[:12]}"
        if record.id in by_id:
            first, first_key = by_id[record.id]
            if first_key == key:
                result.duplicates.append(RowProblem(line, f"repeats line {first} (same id and text)", record.id))
            else:
                result.rejected.append(RowProblem(line, f"id already used on line {first} for another incident",
                                                  record.id))
            continue
        if key in by_content:
            first, first_id = by_content[key]
            result.duplicates.append(RowProblem(line, f"same description as line {first} (id {first_id!r})",
                                                record.id))
            continue
        by_id[record.id] = (line, key)
        by_content[key] = (line, record.id)
        result.records.append((line, record))
    return result
