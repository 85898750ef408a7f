"""`aidai demo` (`make demo`): the knowledge built, a bundled incident simulated on a faulty host, and the
diagnosis run end to end on it with the same progress and report as `aidai diagnose`; the ticket is written
next to the simulated host. `--checks-only` runs every passive check instead and prints the verdict table."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from agent.checks.runner import CheckRunner
from agent.cli.checks_cmd import print_results
from agent.cli.diagnose_cmd import TicketExport, clean_errors, make_incident, run_diagnosis
from agent.cli.options import EXIT_RESOLVED, EXIT_UNRESOLVED, DataDirOpt
from agent.cli.render import ProgressView, make_answer, report_panel, resume_command
from agent.executors.sim import sim_executors
from agent.models import Verdict
from agent.paths import KNOWLEDGE_DIR
from agent.sim.scenario import find_record, scenario_from_record

EXAMPLES = KNOWLEDGE_DIR / "examples" / "demo_incidents.jsonl"
console = Console(emoji=False)


def demo(
    incident: Annotated[str, typer.Option(help="Example id in knowledge/examples/demo_incidents.jsonl.")]
    = "demo-nvlink-refused",
    directory: Annotated[Path, typer.Option(help="Where to create the simulated host (and write the ticket).")]
    = Path("demo-host"),
    data_dir: DataDirOpt = None,
    checks_only: Annotated[bool, typer.Option("--checks-only", help="Only run every passive check on the "
                                                                    "simulated host and print the verdicts.")]
    = False,
) -> None:
    """Simulate a bundled incident's faulty host and diagnose it end to end (exit 0 when the expected cause is
    found)."""
    try:
        record = find_record(EXAMPLES, incident)
    except KeyError as exc:
        raise typer.BadParameter(str(exc.args[0])) from None
    console.print(Panel(escape(record["description"]), title=f"incident {record['id']}",
                        subtitle=escape(record["environment"])))
    if checks_only:
        _checks_only(record, directory)
        return
    with clean_errors(console):
        _build_knowledge(data_dir)
        scenario = scenario_from_record(directory, EXAMPLES, incident)
        console.print(f"simulated host(s) in {escape(str(scenario.root))}: faults "
                      f"{escape(str(record['faults']))}, noise {escape(str(record['noise']))}", highlight=False)
        from agent.options import DiagnoseOptions

        options = DiagnoseOptions(hosts=[f"sim:{scenario.root}"], approval="none",
                                  data_dir=str(data_dir) if data_dir else None)
        view = ProgressView(console)
        report = run_diagnosis(options, view, make_answer(view, console, interactive=False),
                               incident=make_incident(record["description"], record["environment"], options.hosts))
        console.print(report_panel(report, resume_hint=resume_command(report.run_id, options.data_dir)))
        TicketExport(scenario.root / "ticket", "both", None, None).run(report, options, console)
    found = [c.label for c in report.root_causes]
    hit = record["label"] in found
    console.print(f"expected: [bold]{escape(record['label'])}[/]   found: "
                  f"[bold]{escape(', '.join(found) or 'nothing (escalated)')}[/]   "
                  f"{'[green]match[/]' if hit else '[red]no match[/]'}", highlight=False)
    raise typer.Exit(EXIT_RESOLVED if hit else EXIT_UNRESOLVED)


def _build_knowledge(data_dir: Path | None) -> None:
    """The seed incident DB and the KB index, built or refreshed (a no-op when nothing changed)."""
    from agent.knowledge.incident_db import IncidentDB
    from agent.knowledge.kb_index import KnowledgeBase

    began = time.perf_counter()
    with console.status("building the past-incident DB and the knowledge base (first time: ~30 s)"):
        db, kb = IncidentDB(data_dir=data_dir), KnowledgeBase(data_dir=data_dir)
        seed = db.ensure_seed()
        kb_report = kb.ensure()
    state = ", ".join(f"{what} {'unchanged' if r.skipped else 'built'}" for what, r in
                      (("incident DB", seed), ("KB", kb_report)))
    console.print(f"knowledge: {db.count()} past incidents, {kb.count()} KB passages ({state}; "
                  f"{time.perf_counter() - began:.1f} s) in {escape(db.location.describe())}", highlight=False)


def _checks_only(record: dict, directory: Path) -> None:
    scenario = scenario_from_record(directory, EXAMPLES, record["id"])
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
