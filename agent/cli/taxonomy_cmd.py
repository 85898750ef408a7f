"""`aidai taxonomy`: show the incident taxonomy (tree or JSON) and validate it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

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
        Console(stderr=True, emoji=False).print(f"[red]{escape(str(exc))}[/]")
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
    console = Console(emoji=False)
    if not console.is_terminal:  # piped output (grep, less): one line per node, never wrapped at 80 columns
        console = Console(width=400, emoji=False)
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


# ---- built from history: build, diff, apply, growth (agent.history) -------------------------------------------

HistoryFiles = Annotated[list[Path], typer.Option("--history", metavar="FILE",
                                                  help="Incident history, JSONL or CSV (repeatable).")]


def _bad(message: str) -> typer.Exit:
    Console(stderr=True, emoji=False).print(f"[red]error: {escape(message)}[/]", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        return read_taxonomy_file(path)
    except TaxonomyError as exc:
        raise _bad(f"{what}: {str(exc).splitlines()[0]}") from None


def _history_records(files: list[Path], skip_bad: bool) -> list[Any]:
    from agent.history.records import read_history

    records, bad = [], 0
    err = Console(stderr=True, emoji=False)
    for path in files:
        try:
            result = read_history(path)
        except (FileNotFoundError, ValueError) as exc:
            raise _bad(str(exc)) from None
        for problem in result.rejected:
            err.print(f"[yellow]bad row[/] {escape(str(path))} {escape(str(problem))}", highlight=False)
        bad += len(result.rejected)
        records += [r for _, r in result.records]
    if bad and not skip_bad:
        raise _bad(f"{bad} bad row(s): nothing built (fix them, or pass --skip-bad)")
    if not records:
        raise _bad("no incident in the history file(s)")
    return records


@app.command()
def build(
    history: HistoryFiles,
    out: Annotated[Path, typer.Option("--out", metavar="NEW.json", help="Where the candidate taxonomy goes (the "
                                      "review notes go to NEW.build.json).")],
    base: Annotated[Path | None, typer.Option("--base", metavar="FILE", help="Taxonomy to merge into (default: "
                                              "the shipped one).")] = None,
    empty: Annotated[bool, typer.Option("--empty", help="Start from an empty taxonomy (as AidAI's pass 2 does).")
                     ] = False,
    pass1: Annotated[str, typer.Option("--pass1", metavar="auto|nearest|cluster", help="Offline pass 1 for "
                                       "unlabelled records: nearest base leaf, or clusters (auto: nearest if the "
                                       "base has leaves).")] = "auto",
    ignore_labels: Annotated[bool, typer.Option("--ignore-labels", help="Do not use the records' own labels.")
                             ] = False,
    tsg_dir: Annotated[Path | None, typer.Option("--tsg-dir", metavar="DIR", help="TSG/KB markdown docs whose "
                                                 "front-matter `nodes` add labels (default knowledge/kb).")] = None,
    no_tsg: Annotated[bool, typer.Option("--no-tsg", help="Do not add labels from TSG documents.")] = False,
    library: Annotated[Path | None, typer.Option("--library", metavar="FILE", help="Taxonomy whose checks and "
                                                 "evidence rules are bound by label (default: the shipped one).")
                       ] = None,
    no_library: Annotated[bool, typer.Option("--no-library", help="Bind no checks by label: only those mapped "
                                             "from the OCE commands.")] = False,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Build from the good rows even if some are bad.")
                        ] = False,
    llm: Annotated[str, typer.Option("--llm", metavar="offline|openai", help="Who does passes 1 and 2.")
                   ] = "offline",
    base_url: Annotated[str | None, typer.Option("--base-url", metavar="URL", help="OpenAI-compatible endpoint.")
                        ] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model name for --llm openai.")] = None,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Incidents per LLM call in pass 1.")] = 8,
) -> None:
    """Build a candidate taxonomy from the history (pass 1 labels, pass 2 merge, TSG labels): a file to review
    with `aidai taxonomy diff`, never installed here."""
    from agent.history import build as builder
    from agent.paths import KNOWLEDGE_DIR

    if pass1 not in ("auto", "nearest", "cluster"):
        raise _bad(f"--pass1 {pass1!r}: use auto, nearest or cluster")
    if llm not in ("offline", "openai"):
        raise _bad(f"--llm {llm!r}: use offline or openai")
    if llm == "openai" and not model:
        raise _bad("--llm openai needs --model (and --base-url for a non-OpenAI endpoint)")
    if empty and base:
        raise _bad("--empty and --base exclude each other")
    records = _history_records(history, skip_bad)
    base_data = None if empty else _read_json(base, "--base") if base else read_taxonomy_file()
    lib = None if no_library else builder.library_from(_read_json(library, "--library") if library
                                                      else read_taxonomy_file())
    kb_root = None if no_tsg else (tsg_dir or KNOWLEDGE_DIR / "kb")
    if kb_root is not None and not kb_root.is_dir():
        raise _bad(f"--tsg-dir {kb_root}: no such directory")
    try:
        if llm == "openai":
            from agent.history.llm import build_with_llm

            result = build_with_llm(records, base_data, model=str(model), base_url=base_url, batch=batch,
                                    library=lib, kb_root=kb_root)
        else:
            result = builder.build(records, base_data, library=lib, kb_root=kb_root, mode=pass1,  # type: ignore[arg-type]
                                   use_labels=not ignore_labels)
    except ValueError as exc:
        raise _bad(str(exc)) from None
    sidecar = builder.write(result, out)
    m = result.merge
    typer.echo(f"{len(records)} incidents -> {len(result.leaf_labels())} leaves: {m.count('matched')} matched, "
               f"{m.count('merged')} merged as near-duplicates, {m.count('added')} added, "
               f"{m.count('tsg-added')} from TSGs ({result.seconds:.1f}s)")
    for event in m.events:
        if event.kind == "merged":
            typer.echo(f"  merged {event.label} -> {event.into} (similarity {event.similarity})")
    typer.echo(f"wrote {out} and {sidecar} ({len(m.review)} review item(s), {len(result.problems)} problem(s))")
    for problem in result.problems[:20]:
        typer.echo(f"  problem: {problem}")
    typer.echo(f"next: aidai taxonomy diff {out}")


@app.command()
def diff(
    candidate: Annotated[Path, typer.Argument(help="Candidate taxonomy (from `aidai taxonomy build`).")],
    against: Annotated[Path | None, typer.Option("--against", metavar="FILE", help="Taxonomy to compare with "
                                                 "(default: the shipped one).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the changes as JSON.")] = False,
) -> None:
    """Node by node, what the candidate adds, changes and removes, and the check bindings it needs."""
    from agent.history.diff import diff as compute
    from agent.history.diff import summary
    from agent.taxonomy import manifest_changes

    new = _read_json(candidate, str(candidate))
    old = _read_json(against, str(against)) if against else read_taxonomy_file()
    changes = compute(old, new)
    bindings = manifest_changes(new)
    if as_json:
        typer.echo(json.dumps({"summary": summary(changes), "changes": [c.__dict__ for c in changes],
                               "manifest_changes": bindings}, indent=1, ensure_ascii=False))
        return
    for change in changes:
        for line in change.lines():
            typer.echo(line)
    counts = summary(changes)
    typer.echo(f"{counts['added']} added, {counts['changed']} changed, {counts['removed']} removed")
    for check, delta in bindings.items():
        typer.echo(f"manifest {check}: nodes + {delta['add']} - {delta['remove']}")


@app.command()
def apply(
    candidate: Annotated[Path, typer.Argument(help="Reviewed candidate taxonomy.")],
    to: Annotated[Path | None, typer.Option("--to", metavar="FILE", help="Taxonomy file to replace (default: the "
                                            "shipped taxonomy/taxonomy.json).")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="The change was reviewed: do not ask.")] = False,
) -> None:
    """Install a reviewed candidate after validating it against the check manifest (the old file is kept as
    FILE.bak). Refuses a candidate that does not validate."""
    from agent.history.diff import apply as install
    from agent.history.diff import diff as compute
    from agent.history.diff import summary
    from agent.taxonomy import TAXONOMY_PATH, manifest_changes

    target = to or TAXONOMY_PATH
    new = _read_json(candidate, str(candidate))
    problems = validate_data(new)
    if problems:
        for problem in problems:
            typer.echo(f"- {problem}", err=True)
        for check, delta in manifest_changes(new).items():
            typer.echo(f"  manifest {check}: nodes + {delta['add']} - {delta['remove']}", err=True)
        raise _bad(f"{candidate} does not validate ({len(problems)} problem(s)): review it, add the checks and "
                   "evidence rules it needs, and the manifest bindings above")
    counts = summary(compute(read_taxonomy_file(target) if target.exists() else {"children": []}, new))
    typer.echo(f"{target}: {counts['added']} added, {counts['changed']} changed, {counts['removed']} removed")
    if not yes and not typer.confirm("apply?", default=False):
        typer.echo("not applied")
        raise typer.Exit(1)
    backup = install(new, target)
    load_taxonomy.cache_clear()
    typer.echo(f"applied to {target}" + (f" (previous kept at {backup})" if backup else ""))


@app.command()
def growth(
    history: HistoryFiles,
    base: Annotated[Path | None, typer.Option("--base", metavar="FILE", help="Count only labels this taxonomy "
                                              "lacks (default: grow from an empty taxonomy).")] = None,
    png: Annotated[Path | None, typer.Option("--png", metavar="FILE", help="Also plot it (PNG).")] = None,
    ignore_labels: Annotated[bool, typer.Option("--ignore-labels", help="Label by clustering / nearest leaf "
                                                "instead of the records' labels.")] = False,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Use the good rows even if some are bad.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the table as JSON.")] = False,
) -> None:
    """New taxonomy labels per month as the history grows (AidAI Fig. 11): a table, and a PNG with --png."""
    from agent.history import build as builder
    from agent.history import growth as grow
    from agent.history.merge import leaves

    records = _history_records(history, skip_bad)
    base_data = _read_json(base, "--base") if base else None
    result = builder.build(records, base_data, use_labels=not ignore_labels)
    rows, undated = grow.growth(result.labelled, set(leaves(base_data)) if base_data else None)
    if not rows:
        raise _bad("no record has an 'opened' date: growth needs dates")
    if as_json:
        typer.echo(json.dumps({"months": [r.__dict__ for r in rows], "undated": undated}, indent=1))
    else:
        typer.echo(grow.markdown(rows))
        if undated:
            typer.echo(f"({undated} incident(s) without a date left out)")
    if png is not None:
        grow.plot(rows, png)
        typer.echo(f"wrote {png}", err=as_json)
