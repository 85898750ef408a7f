"""The task format on disk (JSONL, one task a line: {id, hosts, metrics: {name: [30 numbers]}, logs, label}) and
the metrics CSV the agent tool reads. Missing metrics are allowed, unknown ones ignored; a null or NaN sample is
missing. Series longer than 30 keep their last 30 samples, shorter ones are missing at the start."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError, field_validator

from agent.kaiops import CLASSES, METRICS, KaiopsError

TIME_COLUMNS = {"timestamp", "time", "minute", "ts", "t"}


class Task(BaseModel):
    id: str
    hosts: list[str] = Field(default_factory=list)
    metrics: dict[str, list[float | None]] = Field(default_factory=dict)
    logs: list[str] = Field(default_factory=list)
    label: str | None = None

    @field_validator("label")
    @classmethod
    def _label(cls, value: str | None) -> str | None:
        if value is not None and value not in CLASSES:
            raise ValueError(f"label {value!r} is not one of {', '.join(CLASSES)}")
        return value

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, value: dict[str, list[float | None]]) -> dict[str, list[float | None]]:
        return {k: [None if v is None or math.isnan(v) else float(v) for v in vs] for k, vs in value.items()
                if k in METRICS}


def read_tasks(path: Path) -> list[Task]:
    if not path.is_file():
        raise KaiopsError(f"{path}: no such file")
    tasks: list[Task] = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                tasks.append(Task.model_validate_json(line))
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise KaiopsError(f"{path}:{n}: not a task ({where}: {first['msg']})") from exc
    if not tasks:
        raise KaiopsError(f"{path}: no tasks")
    return tasks


def write_tasks(tasks: Iterable[dict | Task], path: Path) -> int:
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        for task in tasks:
            data = task.model_dump() if isinstance(task, Task) else {k: task[k] for k in Task.model_fields}
            fh.write(json.dumps(data, separators=(",", ":")) + "\n")
            n += 1
    return n


def as_tasks(rows: Iterable[dict]) -> list[Task]:
    return [Task.model_validate({k: r[k] for k in Task.model_fields if k in r}) for r in rows]


def read_metrics_csv(path: Path) -> dict[str, list[float | None]]:
    """A CSV with one column per metric (known names; a time column and other columns are ignored), one row a
    minute, oldest first."""
    if not path.is_file():
        raise KaiopsError(f"{path}: no such file")
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        fields = [f.strip() for f in reader.fieldnames or []]
        known = [f for f in fields if f in METRICS]
        if not known:
            raise KaiopsError(f"{path}: no known metric column (expected some of {', '.join(METRICS)}; "
                              f"found {', '.join(fields) or 'no header'})")
        out: dict[str, list[float | None]] = {name: [] for name in known}
        for n, row in enumerate(reader, 2):
            row = {(k or "").strip(): v for k, v in row.items()}
            for name in known:
                cell = (row.get(name) or "").strip()
                try:
                    value = float(cell) if cell else None
                except ValueError:
                    raise KaiopsError(f"{path}:{n}: {name} = {cell!r} is not a number") from None
                out[name].append(None if value is None or math.isnan(value) else value)
    if not any(out.values()):
        raise KaiopsError(f"{path}: no data rows")
    return out
