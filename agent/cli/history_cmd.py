"""`aidai history import|add-resolved`: feed an organisation's incident history and its resolved diagnoses into the
past-incident DB (pipeline 1's memory).

Exit codes: 0 done; 1 some rows were skipped (--skip-bad) or the store failed; 2 bad input (nothing imported).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from agent.cli.kb_cmd import ChromaUrl, DataDir, _location
from agent.history.feedback import ARCHIVE_NAME, append_to_archive, load_resolved
from agent.history.importer import import_history
from agent.knowledge.embeddings import EmbeddingUnavailable
from agent.knowledge.incident_db import IncidentDB
from agent.knowledge.store import StoreError
from agent.paths import default_data_dir
from agent.taxonomy import TaxonomyError, load_candidate, load_taxonomy

app = typer.Typer(help="Import incident history and resolved diagnoses into the past-incident DB.",
                  no_args_is_help=True)
err = Console(stderr=True, emoji=False)


def _bad(message: str) -> typer.Exit:
    err.print(f"[red]error: {escape(message)}[/]", highlight=False, soft_wrap=True)
    return typer.Exit(2)


@app.command("import")
def import_cmd(
    file: Annotated[Path, typer.Argument(help="History file: JSONL or CSV with id, description, discussion, "
                                              "resolution, label (optional), opened (optional date).")],
    fmt: Annotated[str | None, typer.Option("--format", metavar="jsonl|csv",
                                            help="File format (default: from the extension).")] = None,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Import the good rows even if some are bad "
                                           "(default: all-or-nothing).")] = False,
    any_label: Annotated[bool, typer.Option("--any-label", help="Accept labels that are not taxonomy leaves.")
                         ] = False,
    taxonomy_file: Annotated[Path | None, typer.Option("--taxonomy", metavar="FILE",
                                                       help="Taxonomy the labels are checked against.")] = None,
    chroma_url: ChromaUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Validate every row (bad ones are listed with line numbers and reasons), de-duplicate, label the rows
    without a label by the nearest taxonomy leaf, and upsert them into the incident DB."""
    location = _location(data_dir, chroma_url)
    try:
        taxonomy = load_candidate(taxonomy_file) if taxonomy_file else load_taxonomy()
    except TaxonomyError as exc:
        raise _bad(str(exc).splitlines()[0]) from None
    try:
        outcome = import_history(file, IncidentDB(location=location), taxonomy, fmt=fmt, skip_bad=skip_bad,
                                 any_label=any_label)
    except (FileNotFoundError, ValueError) as exc:
        raise _bad(str(exc)) from None
    except (StoreError, EmbeddingUnavailable) as exc:
        err.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(1) from None
    for problem in outcome.rejected:
        err.print(f"[yellow]bad row[/] {escape(str(file))} {escape(str(problem))}", highlight=False, soft_wrap=True)
    for dup in outcome.read.duplicates:
        err.print(f"[dim]duplicate[/] {escape(str(file))} {escape(str(dup))}", highlight=False, soft_wrap=True)
    if outcome.aborted:
        raise _bad(f"{len(outcome.rejected)} bad row(s) in {file}: nothing imported (fix them, or pass --skip-bad "
                   "to import the other rows)")
    added = sum(r.added for r in outcome.reports)
    updated = sum(r.updated for r in outcome.reports)
    typer.echo(f"{location.describe()}: {outcome.imported} imported from {file} "
                  f"(+{added} new, ~{updated} changed, {outcome.imported - added - updated} unchanged; "
                  f"{outcome.autolabelled} labelled by the nearest leaf, {len(outcome.read.duplicates)} duplicate(s) "
               f"skipped, {len(outcome.rejected)} bad row(s) skipped)")
    if outcome.rejected:
        raise typer.Exit(1)


@app.command("add-resolved")
def add_resolved(
    ticket: Annotated[Path, typer.Argument(help="A resolved diagnosis (report JSON) or a closed ticket JSON; "
                                                "'confirmed_root_cause' in it overrides the diagnosed label.")],
    archive: Annotated[Path | None, typer.Option("--archive", metavar="FILE", help="History JSONL the record is "
                                                 f"appended to (default: <data dir>/{ARCHIVE_NAME}).")] = None,
    any_label: Annotated[bool, typer.Option("--any-label", help="Accept a label that is not a taxonomy leaf.")
                         ] = False,
    chroma_url: ChromaUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Add a resolved incident, with its confirmed root cause, to the history and the incident DB, so that
    pipeline 1 retrieves it for the next similar incident."""
    location = _location(data_dir, chroma_url)
    try:
        record = load_resolved(ticket)
    except ValueError as exc:
        raise _bad(str(exc)) from None
    if not any_label and record.label not in set(load_taxonomy().labels(leaves_only=True)):
        raise _bad(f"{ticket}: label {record.label!r} is not a leaf of the taxonomy (use --any-label)")
    assert record.label is not None
    try:
        report = IncidentDB(location=location).build([record.to_incident(record.label)], source="resolved")
    except (StoreError, EmbeddingUnavailable) as exc:
        err.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(1) from None
    archive = archive or (data_dir or default_data_dir()) / ARCHIVE_NAME
    appended = append_to_archive(record, archive)
    state = "added" if report.added else "updated" if report.updated else "already there"
    typer.echo(f"{record.id} ({record.label}): {state} in {location.describe()}; "
               f"{'appended to' if appended else 'already in'} {archive}")
