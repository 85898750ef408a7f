"""`aidai history import`: historical incidents into the incident DB, all-or-nothing unless bad rows are skipped.

Rows that carry no label get pass 1's offline label (the nearest leaf of the taxonomy) and are stored with the
source `history-autolabel`, so they can be told apart from confirmed ones; a label that is not a leaf of the
taxonomy rejects the row (unless any label is allowed).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from agent.history.labeling import nearest_leaves
from agent.history.records import ReadResult, RowProblem, read_history
from agent.knowledge.incident_db import ImportReport, IncidentDB
from agent.taxonomy import Taxonomy

SOURCE = "history"
AUTOLABEL_SOURCE = "history-autolabel"


@dataclass
class HistoryImport:
    read: ReadResult
    reports: list[ImportReport] = field(default_factory=list)
    autolabelled: int = 0
    aborted: bool = False  # bad rows and no --skip-bad: nothing was imported

    @property
    def rejected(self) -> list[RowProblem]:
        return self.read.rejected

    @property
    def imported(self) -> int:
        return sum(r.imported for r in self.reports)


def check_labels(result: ReadResult, known: Collection[str]) -> None:
    """Move rows whose label is not a known leaf from the good ones to the rejected ones."""
    keep = []
    for line, record in result.records:
        if record.label and record.label not in known:
            result.rejected.append(RowProblem(line, f"label {record.label!r} is not a leaf of the taxonomy",
                                              record.id))
        else:
            keep.append((line, record))
    result.records = keep
    result.rejected.sort(key=lambda p: p.line)


def import_history(path: str | Path, db: IncidentDB, taxonomy: Taxonomy, *, fmt: str | None = None,
                   skip_bad: bool = False, any_label: bool = False) -> HistoryImport:
    result = read_history(path, fmt)
    if not any_label:
        check_labels(result, set(taxonomy.labels(leaves_only=True)))
    outcome = HistoryImport(result)
    if result.rejected and not skip_bad:
        outcome.aborted = True
        return outcome
    labelled = [r for _, r in result.records if r.label]
    unlabelled = [r for _, r in result.records if not r.label]
    auto = nearest_leaves(unlabelled, taxonomy.leaves())
    outcome.autolabelled = len(auto)
    for source, items in ((SOURCE, [(r, r.label) for r in labelled]),
                          (AUTOLABEL_SOURCE, [(a.record, a.label) for a in auto])):
        if items:
            report = db.build([record.to_incident(str(label)) for record, label in items], source=source)
            report.path = str(path)
            outcome.reports.append(report)
    return outcome
