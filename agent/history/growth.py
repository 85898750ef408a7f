"""Temporal analysis of the taxonomy (AidAI Fig. 11): how many new labels each month of history adds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agent.history.labeling import Labelled


@dataclass
class MonthRow:
    month: str  # YYYY-MM
    incidents: int
    new_labels: list[str]
    total_labels: int


def growth(labelled: list[Labelled], known: set[str] | None = None) -> tuple[list[MonthRow], int]:
    """Per month (every month between the first and last incident, empty ones included): incidents, labels not
    seen before (nor in `known`, the base taxonomy's leaves), and the running total. Also how many incidents had
    no date (they are left out of the table)."""
    dated = sorted((i for i in labelled if i.record.opened), key=lambda i: (i.record.opened, i.record.id))
    undated = len(labelled) - len(dated)
    if not dated:
        return [], undated
    seen = set(known or ())
    by_month: dict[str, list[Labelled]] = {}
    for item in dated:
        by_month.setdefault(item.record.opened.strftime("%Y-%m"), []).append(item)  # type: ignore[union-attr]
    first, last = dated[0].record.opened, dated[-1].record.opened
    assert first is not None and last is not None
    rows = []
    year, month = first.year, first.month
    while (year, month) <= (last.year, last.month):
        key = f"{year:04d}-{month:02d}"
        items = by_month.get(key, [])
        new = sorted({i.label for i in items} - seen)
        seen |= set(new)
        rows.append(MonthRow(key, len(items), new, len(seen - set(known or ()))))
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return rows, undated


def markdown(rows: list[MonthRow]) -> str:
    out = ["| month | incidents | new labels | labels so far |", "|---|---:|---:|---:|"]
    out += [f"| {r.month} | {r.incidents} | {len(r.new_labels)} | {r.total_labels} |" for r in rows]
    return "\n".join(out)


def plot(rows: list[MonthRow], path: Path, title: str = "New taxonomy labels per month") -> Path:
    """A bar chart of new labels per month with the cumulative count (PNG, matplotlib's Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    months = [r.month for r in rows]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(rows) + 2), 3.5))
    try:
        ax.bar(months, [len(r.new_labels) for r in rows], color="#4a7ab5", label="new labels")
        ax.set_ylabel("new labels")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(title)
        ax.tick_params(axis="x", rotation=45)
        twin = ax.twinx()
        twin.plot(months, [r.total_labels for r in rows], color="#c0504d", marker="o", label="labels so far")
        twin.set_ylabel("labels so far")
        twin.yaxis.set_major_locator(MaxNLocator(integer=True))
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
    return path
