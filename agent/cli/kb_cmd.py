"""`aidai kb build|search`: build the past-incident DB and the domain KB index, and search them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.knowledge.embeddings import EmbeddingUnavailable
from agent.knowledge.incident_db import ImportReport, IncidentDB
from agent.knowledge.kb_index import KBReport, KnowledgeBase
from agent.knowledge.store import ENV_CHROMA_URL, StoreError, StoreLocation, resolve_location
from agent.paths import ENV_DATA_DIR
from agent.reasoning.base import KBPassage, PastIncident

app = typer.Typer(help="Build and search the past-incident DB and the domain knowledge base.", no_args_is_help=True)
console = Console(emoji=False)
err = Console(stderr=True, emoji=False)

ChromaUrl = Annotated[str | None, typer.Option("--chroma-url", metavar="URL",
                                               help=f"Chroma server http://host:port (env {ENV_CHROMA_URL}).")]
DataDir = Annotated[Path | None, typer.Option("--data-dir", metavar="DIR",
                                              help=f"Data directory; Chroma lives in DIR/chroma (env {ENV_DATA_DIR}; "
                                                   "default: the per-user data dir).")]
KbDir = Annotated[Path | None, typer.Option("--kb-dir", metavar="DIR", help="Markdown KB root (default knowledge/kb).")]
SeedFile = Annotated[Path | None, typer.Option("--seed", metavar="FILE",
                                               help="Seed incident JSONL (default knowledge/incidents/seed.jsonl).")]


def _location(data_dir: Path | None, chroma_url: str | None) -> StoreLocation:
    try:
        return resolve_location(data_dir, chroma_url)
    except StoreError as exc:
        raise typer.BadParameter(str(exc), param_hint="--chroma-url") from exc


def _leaf_labels() -> set[str] | None:
    try:
        from agent.taxonomy import load_taxonomy

        return set(load_taxonomy().labels(leaves_only=True))
    except Exception as exc:
        err.print(f"[yellow]taxonomy not loadable ({escape(str(exc).splitlines()[0])}): labels are not checked[/]")
        return None


def _fail(exc: Exception) -> typer.Exit:
    err.print(f"[red]{escape(str(exc))}[/]")
    return typer.Exit(1)


def _row(table: Table, what: str, report: ImportReport | KBReport) -> None:
    rejected = len(report.rejected) if isinstance(report, ImportReport) else len(report.problems)
    file = report.path if isinstance(report, ImportReport) else report.root
    state = "unchanged (skipped)" if report.skipped else f"+{report.added} ~{report.updated} ={report.unchanged}"
    table.add_row(what, escape(str(file or "-")), state, str(report.removed),
                  f"[yellow]{rejected}[/]" if rejected else "0", f"{report.seconds:.1f}")


@app.command("build")
def build(
    history: Annotated[list[Path] | None, typer.Option("--history", metavar="FILE",
                                                       help="Incident JSONL to import (repeatable).")] = None,
    chroma_url: ChromaUrl = None,
    data_dir: DataDir = None,
    kb_dir: KbDir = None,
    seed: SeedFile = None,
    force: Annotated[bool, typer.Option("--force", help="Re-check every KB passage even if no file changed.")] = False,
    any_label: Annotated[bool, typer.Option("--any-label",
                                            help="Accept history labels that are not taxonomy leaves.")] = False,
) -> None:
    """Build or refresh the seed incident DB and the KB index, and import history files. Re-running is cheap:
    unchanged records are not embedded again. Exits 1 if any line was rejected (the others are imported)."""
    location = _location(data_dir, chroma_url)
    console.print(f"store: {escape(location.describe())}")
    db, kb = IncidentDB(location=location), KnowledgeBase(location=location, root=kb_dir)
    table = Table(title="knowledge build")
    for col in ("what", "file", "added/updated/same", "removed", "rejected", "s"):
        table.add_column(col)
    reports: list[ImportReport] = []
    try:
        reports.append(db.ensure_seed(seed))
        _row(table, "seed incidents", reports[-1])
        labels = None if any_label or not history else _leaf_labels()
        for path in history or []:
            reports.append(db.import_jsonl(path, source="history", known_labels=labels))
            _row(table, "history", reports[-1])
        kb_report = kb.ensure(force=force)
        _row(table, "KB passages", kb_report)
        totals = (db.count(), kb.count())
    except (StoreError, FileNotFoundError, EmbeddingUnavailable) as exc:
        raise _fail(exc) from exc
    console.print(table)
    console.print(f"incidents in the DB: {totals[0]}   KB passages: {totals[1]}")
    rejected = [(r.path, rej) for r in reports for rej in r.rejected]
    for where, rej in rejected:
        err.print(f"[yellow]rejected[/] {escape(str(where))} {escape(str(rej))}")
    for problem in kb_report.problems:
        err.print(f"[yellow]KB[/] {escape(problem)}")
    if rejected:
        err.print(f"[yellow]{len(rejected)} line(s) rejected; every other line was imported[/]")
        raise typer.Exit(1)


@app.command("search")
def search(
    text: Annotated[str, typer.Argument(help="What to look for: an error line or a description.")],
    k: Annotated[int, typer.Option("--k", min=1, help="How many results.")] = 5,
    in_kb: Annotated[bool, typer.Option("--kb", help="Search the KB passages instead of past incidents.")] = False,
    node: Annotated[list[str] | None, typer.Option("--node", metavar="LABEL",
                                                   help="With --kb: only docs about this taxonomy node (repeatable)."
                                                   )] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    chroma_url: ChromaUrl = None,
    data_dir: DataDir = None,
    kb_dir: KbDir = None,
    seed: SeedFile = None,
) -> None:
    """Print the past incidents (label, score) or the KB passages most similar to TEXT."""
    location = _location(data_dir, chroma_url)
    results: list[KBPassage] | list[PastIncident]
    try:
        if in_kb:
            kb = KnowledgeBase(location=location, root=kb_dir)
            kb.ensure()
            results = kb.query(text, k=k, nodes=node or None)
        else:
            db = IncidentDB(location=location)
            db.ensure_seed(seed)
            results = db.query(text, k=k)
    except (StoreError, FileNotFoundError, EmbeddingUnavailable) as exc:
        raise _fail(exc) from exc
    if as_json:
        print(json.dumps([r.model_dump() for r in results], indent=1))
        return
    if not results:
        console.print("no match (is the store empty? run `aidai kb build`)")
        return
    table = Table(title=f"{'KB passages' if in_kb else 'past incidents'} like {text[:60]!r}", show_lines=True)
    for col in ("score", "doc" if in_kb else "label", "title" if in_kb else "id (source)", "text"):
        table.add_column(col, overflow="fold")
    for r in results:
        if isinstance(r, KBPassage):
            first, second = escape(r.doc), escape(r.title)
        else:
            first, second = escape(r.label), f"{escape(r.id)}\n[dim]{escape(r.source)}[/]"
        excerpt = r.text if len(r.text) <= 400 else r.text[:400] + " …"
        table.add_row(f"{r.score:.3f}", first, second, escape(excerpt))
    console.print(table)
