"""`aidai l4 localize|learn`: the L4 log localizer over a failed job's logs, and its fault-pattern library."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.l4.dask_stage import ENGINES
from agent.l4.patterns import FaultPattern, PatternError, PatternLibrary, library_path
from agent.l4.reader import LogError
from agent.paths import ENV_DATA_DIR

if TYPE_CHECKING:
    from agent.l4.localize import L4Result

app = typer.Typer(help="Localize faulty nodes, events, stage and iterations in a failed training job's logs.",
                  no_args_is_help=True)
console = Console(emoji=False)
err = Console(stderr=True, emoji=False)

Success = Annotated[list[Path] | None, typer.Option("--success", metavar="DIR",
                                                    help="Logs of a successful job with the same setup (repeatable).")]
Engine = Annotated[str, typer.Option(help=f"Per-file stage: {'|'.join(ENGINES)} (auto: Dask LocalCluster for "
                                          "large inputs).")]
Scheduler = Annotated[str | None, typer.Option(metavar="ADDR", help="Dask scheduler address (tcp://host:8786).")]
DataDir = Annotated[Path | None, typer.Option("--data-dir", metavar="DIR",
                                              help=f"Where the pattern library lives (env {ENV_DATA_DIR}).")]


def _bad(message: str) -> typer.Exit:
    err.print(f"[red]error:[/] {escape(message)}")
    return typer.Exit(2)


def _run(logs: Path, success: list[Path] | None, engine: str, scheduler: str | None,
         data_dir: Path | None) -> L4Result:
    if engine not in ENGINES:
        raise _bad(f"--engine {engine!r}: valid are {', '.join(ENGINES)}")
    for path in [logs, *(success or [])]:
        if not path.exists():
            raise _bad(f"{path}: no such file or directory")
    try:
        from agent.l4.localize import localize  # scikit-learn and drain3: only when localizing

        library = PatternLibrary(library_path(data_dir))
        return localize(logs, list(success or []), engine=engine, scheduler=scheduler, library=library)
    except (LogError, PatternError) as exc:
        raise _bad(str(exc)) from None


@app.command("localize")
def localize_cmd(
    logs: Annotated[Path, typer.Argument(help="Directory of the failed job's logs (<node>.log, <node>/rank<k>.log, "
                                              "gz accepted), or one launcher output with every node's lines "
                                              "(DeepSpeed/pdsh `host: ` or `srun --label` prefixes).")],
    success: Success = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    engine: Engine = "auto",
    scheduler: Scheduler = None,
    data_dir: DataDir = None,
    top: Annotated[int, typer.Option(help="Rows per table.")] = 10,
) -> None:
    """Ranked suspicious nodes, failure-indicating events, failed stage, suspicious iterations, known patterns."""
    result = _run(logs, success, engine, scheduler, data_dir)
    if as_json:
        print(json.dumps(result.model_dump(mode="json"), indent=1))
        return
    _print(result, top)


def _print(result: L4Result, top: int) -> None:
    console.print(f"{result.lines} lines in {result.files} files ({result.success_jobs} successful jobs) in "
                  f"{result.seconds:.2f} s; failed stage: [bold]{result.stage}[/]")
    for match in result.patterns:
        console.print(f"[magenta]known pattern[/] {escape(match.name)} ({match.label or 'no label'}, "
                      f"{match.score:.0%} of its events)")
    nodes = Table(title="suspicious nodes")
    for col in ("node", "score", "deviating events"):
        nodes.add_column(col, overflow="fold")
    for n in result.nodes[:top]:
        nodes.add_row(n.node, f"{n.score:.3f}", escape("\n".join(e[:100] for e in n.events[:3])))
    console.print(nodes)
    events = Table(title="failure-indicating events")
    for col in ("id", "count", "nodes", "template"):
        events.add_column(col, overflow="fold")
    for e in result.events[:top]:
        events.add_row(e.id[:8], str(e.count), ", ".join(e.nodes[:3]) + (" ..." if len(e.nodes) > 3 else ""),
                       escape(e.template[:160]))
    console.print(events)
    for it in result.iterations[:top]:
        console.print(f"suspicious iteration {it.iteration} on {', '.join(it.nodes[:5])}: "
                      f"{escape('; '.join(e[:80] for e in it.events[:3]))}")
    for skipped in result.skipped_files:
        err.print(f"[yellow]skipped[/] {escape(skipped.path)}: {escape(skipped.reason)}")


@app.command("learn")
def learn_cmd(
    logs: Annotated[Path, typer.Argument(help="Directory of the failed job's logs.")],
    name: Annotated[str, typer.Option(help="Name of the confirmed fault pattern.")],
    label: Annotated[str, typer.Option(help="Taxonomy label of the confirmed root cause.")] = "",
    description: Annotated[str, typer.Option(help="What the engineers found.")] = "",
    success: Success = None,
    events: Annotated[int, typer.Option(help="Keep this many failure-indicating events (log order).")] = 8,
    engine: Engine = "auto",
    data_dir: DataDir = None,
) -> None:
    """Store the failure-indicating events of a diagnosed job as a fault pattern, matched first on new logs."""
    if label:
        from agent.taxonomy import load_taxonomy

        if label not in load_taxonomy().labels():
            raise _bad(f"--label {label!r} is not a taxonomy label (see `aidai taxonomy`)")
    if events < 1:
        raise _bad("--events must be at least 1")
    result = _run(logs, success, engine, None, data_dir)
    if not result.events:
        raise _bad(f"{logs}: no failure-indicating events to learn from")
    pattern = FaultPattern(name=name, label=label, description=description,
                           templates=[e.template for e in result.events[:events]])
    library = PatternLibrary(library_path(data_dir))
    library.add(pattern)
    console.print(f"learned [bold]{escape(name)}[/] ({len(pattern.templates)} events) into {library.path}")
