"""`aidai demo`: a bundled incident on a simulated faulty host, every passive check run against it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.panel import Panel

from agent.checks.runner import CheckRunner
from agent.cli.checks_cmd import print_results
from agent.executors.sim import sim_executors
from agent.models import Verdict
from agent.paths import KNOWLEDGE_DIR
from agent.sim.scenario import find_record, scenario_from_record

EXAMPLES = KNOWLEDGE_DIR / "examples" / "demo_incidents.jsonl"
console = Console()


def demo(
    incident: Annotated[str, typer.Option(help="Example id in knowledge/examples/demo_incidents.jsonl.")]
    = "demo-nvlink-refused",
    directory: Annotated[Path, typer.Option(help="Where to create the simulated host.")] = Path("demo-host"),
) -> None:
    """Simulate a bundled incident's faulty host and run every passive check on it."""
    try:
        record = find_record(EXAMPLES, incident)
    except KeyError as exc:
        raise typer.BadParameter(str(exc.args[0])) from None
    console.print(Panel(record["description"], title=f"incident {record['id']}", subtitle=record["environment"]))
    scenario = scenario_from_record(directory, EXAMPLES, incident)
    console.print(f"simulated host(s) in {scenario.root}: faults {record['faults']}, noise {record['noise']}")
    executors = sim_executors(scenario.root)
    runner = CheckRunner(executors)
    with console.status("running every passive check", spinner="dots"):
        results = runner.run(runner.passive_ids())
    print_results(results, runner.manifest.checks)
    failed = [r for r in results if r.verdict == Verdict.FAIL]
    nodes = sorted({n for r in failed for n in runner.manifest.get(r.check).nodes})
    console.print(f"[bold]checks that FAIL[/]: {', '.join(r.check for r in failed) or 'none'}")
    console.print(f"[bold]taxonomy nodes they verify[/]: {', '.join(nodes) or 'none'}")
    console.print(f"[dim]expected leaf: {record['label']}[/]")
