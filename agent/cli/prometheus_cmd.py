"""`aidai prometheus HOST...`: the Prometheus pre-triage on its own: which hosts to check first from the fleet's
dcgm-exporter metrics, without a diagnosis. Exit code 0 read, 1 Prometheus not read or no series for any host,
2 bad input."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from agent.cli.options import PrometheusOpt

STYLE = {"FAIL": "bold red", "WARN": "yellow", "INFO": "dim"}


def prometheus(
    host: Annotated[list[str], typer.Argument(metavar="HOST...", help="Hosts as Prometheus knows them (node name) "
                                              "or host specs (ssh://user@node, sim:DIR, local).")],
    url: PrometheusOpt = None,
    at: Annotated[str | None, typer.Option("--at", metavar="TIME", help="The incident's time (ISO 8601; default "
                                           "now): the window is two hours before it up to an hour after.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the tool's result as JSON.")] = False,
) -> None:
    """Rank hosts from their dcgm-exporter metrics in Prometheus (XID errors, ECC and row remaps, NVLink and PCIe
    errors, throttle reasons, temperatures)."""
    err, out = Console(stderr=True, emoji=False), Console(emoji=False)
    from pathlib import Path

    from agent.incident import Incident, IncidentError
    from agent.prometheus.client import PrometheusUrlError, check_url
    from agent.prometheus.tool import prometheus_pretriage
    from agent.sim.scenario import load_scenario

    try:
        if not url:
            raise PrometheusUrlError("give the Prometheus server: --prometheus http://HOST:9090 "
                                     "(or AIDAI_PROMETHEUS_URL)")
        url = check_url(url)
        names: list[str] = []
        for item in host:  # a simulated scenario stands for its hosts, as `--host sim:DIR` does in a diagnosis
            names += list(load_scenario(Path(item[4:]))[1]) if item.startswith("sim:") else [item]
        incident = Incident(text="pre-triage from Prometheus", hosts=names, at=at)
    except (PrometheusUrlError, IncidentError, FileNotFoundError) as exc:
        err.print(f"[red]error: {escape(str(exc))}[/]", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    result = prometheus_pretriage(incident, url)
    assert result is not None
    if as_json:
        print(json.dumps(result.model_dump(mode="json"), indent=1))
    else:
        style = "red" if result.status == "error" else "bold"
        out.print(f"[{style}]{escape(result.summary or result.reason)}[/]", highlight=False, soft_wrap=True)
        if result.hosts:
            out.print(f"check first: {escape(', '.join(result.hosts))}", highlight=False)
        for f in result.findings:
            out.print(f"[{STYLE.get(f.severity, '')}]{f.severity}[/] {escape(f.message)}", highlight=False,
                      soft_wrap=True)
        if result.priors:
            top = sorted(result.priors.items(), key=lambda kv: -kv[1])[:5]
            out.print("priors: " + ", ".join(f"{label} {score:.1f}" for label, score in top), highlight=False)
    raise typer.Exit(0 if result.status == "ok" else 1)
