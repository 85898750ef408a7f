"""`aidai taxonomy`: show the incident taxonomy (tree or JSON) and validate it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

from agent.taxonomy import TaxNode, Taxonomy, TaxonomyError, load_taxonomy, read_taxonomy_file, validate_data

app = typer.Typer(help="Show and validate the incident taxonomy (labels, severities, checks).",
                  no_args_is_help=True)

SEVERITY_STYLE = {"critical": "bold red", "high": "red", "medium": "yellow", "low": "green"}


def _line(node: TaxNode) -> str:
    if node.is_root:
        return "[bold]ROOT[/]"
    style = SEVERITY_STYLE.get(node.severity, "white")
    checks = ", ".join(node.checks) or "-"
    return f"[bold]{escape(node.label)}[/]  [{style}]{node.severity}[/]  [dim]checks: {escape(checks)}[/]"


def _add(tree: Tree, node: TaxNode, depth: int | None) -> None:
    if depth is not None and depth <= 0:
        return
    for child in node.children:
        _add(tree.add(_line(child)), child, None if depth is None else depth - 1)


def _load(path: Path | None) -> Taxonomy:
    try:
        return load_taxonomy(path)
    except TaxonomyError as exc:
        Console(stderr=True).print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(1) from exc


@app.command()
def show(
    node: Annotated[str | None, typer.Argument(help="Label to show the subtree of, e.g. GPU.MEMORY.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the subtree as JSON.")] = False,
    depth: Annotated[int | None, typer.Option(help="Levels below NODE to show (default: all).")] = None,
    path: Annotated[Path | None, typer.Option(help="Taxonomy JSON to read instead of the shipped one.")] = None,
) -> None:
    """Print the taxonomy below ROOT (or below NODE), each node with its label, severity and checks."""
    taxonomy = _load(path)
    try:
        target = taxonomy.node(node or "")
    except KeyError as exc:
        typer.echo(str(exc.args[0]), err=True)
        raise typer.Exit(2) from exc
    if as_json:
        typer.echo(json.dumps(taxonomy.to_dict(target.label), indent=2, ensure_ascii=False))
        return
    tree = Tree(_line(target))
    _add(tree, target, depth)
    console = Console()
    if not console.is_terminal:  # piped output (grep, less): one line per node, never wrapped at 80 columns
        console = Console(width=400)
    console.print(tree)


@app.command()
def validate(
    path: Annotated[Path | None, typer.Option(help="Taxonomy JSON to check instead of the shipped one.")] = None,
) -> None:
    """Check the taxonomy against its schema, the rules and the check manifest; exit 1 on any problem."""
    try:
        data = read_taxonomy_file(path)
    except TaxonomyError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    problems = validate_data(data)
    for problem in problems:
        typer.echo(f"- {problem}")
    if problems:
        typer.echo(f"{len(problems)} problem(s) found", err=True)
        raise typer.Exit(1)
    taxonomy = Taxonomy(data)
    typer.echo(f"taxonomy OK: {len(taxonomy)} nodes, {len(taxonomy.leaves())} leaves")
