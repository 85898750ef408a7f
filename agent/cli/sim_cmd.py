"""`aidai sim create|exporter|faults|profiles`: simulated hosts with faults from FAULTS.md, built from SKU profiles,
and their GPUs served as dcgm-exporter serves them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from agent.checks.manifest import load_profiles
from agent.sim.faults import REGISTRY, FaultError
from agent.sim.faults.registry import parse_cli_spec
from agent.sim.scenario import DEFAULT_VIEW, VIEWS, create_scenario, scenario_from_record

app = typer.Typer(help="Simulated GPU hosts that render real tool output.", no_args_is_help=True)
console = Console(emoji=False)


@app.command("create")
def create(
    directory: Annotated[Path, typer.Argument(help="Directory to create (replaced if it holds a scenario).")],
    fault: Annotated[list[str] | None, typer.Option("--fault", help="ID[:k=v,...] (repeatable).")] = None,
    noise: Annotated[list[str] | None, typer.Option("--noise", help="ID[:k=v,...] (repeatable).")] = None,
    profile: Annotated[str, typer.Option(help="Healthy host profile (list them: aidai sim profiles).")] = "H100-SXM-8",
    hosts: Annotated[str | None, typer.Option(help="Comma-separated host names, e.g. node-1,node-2.")] = None,
    record: Annotated[Path | None, typer.Option(help="Incident JSONL file to take the scenario from.")] = None,
    record_id: Annotated[str | None, typer.Option("--id", help="Record id inside --record.")] = None,
    view: Annotated[str | None, typer.Option(
        help=f"What the diagnosis can see: {' | '.join(VIEWS)} (default: the record's, else {DEFAULT_VIEW}).")] = None,
) -> None:
    """Create a simulated scenario; run checks on it with `--host sim:DIR`."""
    if profile not in load_profiles():
        raise typer.BadParameter(f"unknown profile {profile!r}; valid: {', '.join(load_profiles())}")
    try:
        if record is not None:
            if record_id is None or fault or noise:
                raise typer.BadParameter("--record needs --id and takes no --fault/--noise")
            scenario = scenario_from_record(directory, record, record_id, view)
        else:
            if record_id is not None:
                raise typer.BadParameter("--id needs --record")
            scenario = create_scenario(directory, [parse_cli_spec(f) for f in fault or []],
                                       [parse_cli_spec(n) for n in noise or []], profile,
                                       [h.strip() for h in hosts.split(",") if h.strip()] if hosts else None,
                                       view or DEFAULT_VIEW)
    except (FaultError, KeyError, ValueError, FileExistsError, OSError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        raise typer.BadParameter(str(message)) from None
    names = ", ".join(h.hostname for h in scenario.hosts)
    console.print(f"created {scenario.root} ({scenario.profile}; view {scenario.view}; hosts: {names})")
    console.print(f"run: aidai checks run --all --host sim:{scenario.root}")


@app.command("exporter")
def exporter(
    directory: Annotated[Path, typer.Argument(help="A scenario made by `aidai sim create`.")],
    port: Annotated[int, typer.Option("--port", help="Port of the first host; the others take the next ports "
                                                     "(0: a free port each).")] = 9400,
    address: Annotated[str, typer.Option("--address", help="Address to listen on.")] = "127.0.0.1",
    collectors: Annotated[Path | None, typer.Option(
        "--collectors", "-f", metavar="CSV", help="dcgm-exporter collectors file (FIELD, type, help per line); "
                                                  "default: agent/sim/exporter/counters.csv.")] = None,
    no_hostname: Annotated[bool, typer.Option("--no-hostname", help="Omit the Hostname label, as dcgm-exporter "
                                                                   "--no-hostname does.")] = False,
) -> None:
    """Serve every host's GPUs as dcgm-exporter does (GET /metrics, its metric names and labels), one listener
    per host, until interrupted. Prints one JSON line per host: {"host", "url"}."""
    import threading

    from agent.sim.exporter.render import DEFAULT_COUNTERS, CountersError
    from agent.sim.exporter.serve import ExporterFleet

    try:
        fleet = ExporterFleet(directory, address=address, port=port, counters=collectors or DEFAULT_COUNTERS,
                              hostname=not no_hostname)
        urls = fleet.start()
    except (CountersError, FileNotFoundError, OSError) as exc:
        raise typer.BadParameter(str(exc)) from None
    for name, url in urls.items():
        print(json.dumps({"host": name, "url": url}), flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        fleet.stop()


@app.command("faults")
def list_faults(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Every fault and noise id with its params and taxonomy leaf."""
    rows = [{"id": d.id, "leaf": d.leaf, "params": {p.name: p.default for p in d.params}, "scope": d.scope,
             "summary": d.summary} for d in sorted(REGISTRY.values(), key=lambda d: (d.is_noise, d.id))]
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    table = Table(title=f"{len(rows)} fault and noise ids")
    for col in ("id", "leaf", "params"):
        table.add_column(col, overflow="fold")
    for d in sorted(REGISTRY.values(), key=lambda d: (d.is_noise, d.id)):
        table.add_row(d.id, d.leaf or "(noise)", ", ".join(f"{p.name}={p.default}" for p in d.params))
    console.print(table)


@app.command("profiles")
def list_profiles(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Every SKU profile a simulated host can be built from, with its key facts."""
    rows = [{"profile": name, "gpu": p["gpu_name"], "pci_device_id": p["pci_device_id"],
             "gpu_count": p["gpu_count"], "gpu_counts": p.get("gpu_counts"), "form_factor": p.get("form_factor"),
             "nvlink": p.get("topo_nvlink"), "nvswitch": bool(p.get("nvswitch")), "rdma": _rdma(p),
             "machine": (p.get("sim_machine") or {}).get("instance")} for name, p in load_profiles().items()]
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    table = Table(title=f"{len(rows)} profiles (verification_scripts/profiles.yaml)")
    for col in ("profile", "gpu", "device", "GPUs", "rented as", "NVLink", "NVSwitch", "RDMA", "simulated as"):
        table.add_column(col, overflow="fold")
    for row in rows:
        counts = ",".join(map(str, row["gpu_counts"] or []))
        table.add_row(row["profile"], row["gpu"], f"10de:{row['pci_device_id']}", str(row["gpu_count"]), counts,
                      row["nvlink"] or "-", "yes" if row["nvswitch"] else "-", row["rdma"], row["machine"] or "-")
    console.print(table)


def _rdma(profile: dict[str, Any]) -> str:
    count = int(profile.get("hca_count") or 0)
    return f"{count} x {profile.get('ib_rate')} Gb/s {profile.get('link_layer')}" if count else "-"
