"""The fault-pattern library (L4 §5.4): failure patterns confirmed by an engineer, stored under the aidai data
directory and matched first on new logs.

A pattern is a set of templates; `<*>` matches any parameter text. It matches a job when at least MIN_SCORE of its
templates match some canonical line shape of the job (shapes, not the job's own templates: Drain may generalise a
template differently in another job, but the shapes of the same event stay the same).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, Field

from agent.l4.templates import WILDCARD
from agent.paths import default_data_dir

FILE_NAME = "l4_patterns.json"
MIN_SCORE = 0.5


class PatternError(Exception):
    pass


class FaultPattern(BaseModel):
    name: str
    label: str = ""  # taxonomy label when the engineer confirmed one
    description: str = ""
    templates: list[str] = Field(min_length=1)
    created: str = ""


class PatternMatch(BaseModel):
    name: str
    label: str
    score: float  # fraction of the pattern's templates found
    templates: list[str]  # the ones found


def library_path(data_dir: Path | None = None) -> Path:
    return (data_dir or default_data_dir()) / FILE_NAME


def _regex(template: str) -> re.Pattern[str]:
    parts = [re.escape(p) for p in template.split(WILDCARD)]
    return re.compile(r"^\s*" + r".*?".join(parts) + r"\s*$")


class PatternLibrary:
    def __init__(self, path: Path):
        self.path = path
        self.patterns: list[FaultPattern] = []
        if path.exists():
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
                self.patterns = [FaultPattern.model_validate(p) for p in raw.get("patterns", [])]
            except (OSError, ValueError) as exc:
                raise PatternError(f"{path}: not a pattern library ({exc})") from None

    def add(self, pattern: FaultPattern) -> None:
        """Add or replace (same name) a pattern and save the library."""
        if not pattern.created:
            pattern.created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self.patterns = [p for p in self.patterns if p.name != pattern.name] + [pattern]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"patterns": [p.model_dump() for p in self.patterns]}, indent=1), encoding="utf-8")
        tmp.replace(self.path)

    def match(self, shapes: Iterable[str]) -> list[PatternMatch]:
        shapes = list(shapes)
        found = []
        for pattern in self.patterns:
            hits = [t for t in pattern.templates if any(_regex(t).match(s) for s in shapes)]
            score = len(hits) / len(pattern.templates)
            if score >= MIN_SCORE:
                found.append(PatternMatch(name=pattern.name, label=pattern.label, score=round(score, 3),
                                          templates=hits))
        return sorted(found, key=lambda m: -m.score)
