"""The pre-triage tools the graph runs before pipeline 1: preflight on the hosts (always: a few passive checks
the DFS would run anyway, shared through the runner's cache), when the incident has them attached, L4 on the
job's logs, Reveal on host telemetry and KAIOPS on the job's minute-level metrics, and with `--prometheus URL` the
fleet's dcgm-exporter metrics for the hosts and the incident's window. A tool's module is imported
only when the incident has its attachment: L4 and Reveal pull in drain3, Dask and pandas, KAIOPS torch and its
checkpoint, seconds of import a plain diagnosis should not pay."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

from agent.agents.context import PreTriage
from agent.checks.runner import CheckRunner
from agent.incident import Incident
from agent.installation import missing_extra
from agent.models import ToolResult

# name -> (the attachment it reads, None: always, PROMETHEUS: the --prometheus URL), "module:function"
PROMETHEUS = "--prometheus"
TOOLS: dict[str, tuple[str | None, str]] = {
    "preflight": (None, "agent.preflight.tool:preflight_pretriage"),
    "l4": ("logs", "agent.l4.tool:l4_pretriage"),
    "reveal": ("telemetry", "agent.reveal.tool:reveal_pretriage"),
    "kaiops": ("metrics", "agent.kaiops.tool:kaiops_pretriage"),
    "prometheus": (PROMETHEUS, "agent.prometheus.tool:prometheus_pretriage"),
}


@contextmanager
def _extra_hint() -> Iterator[None]:
    """A tool whose extra is not installed fails (reported, the diagnosis goes on) saying which extra brings it."""
    try:
        yield
    except ModuleNotFoundError as exc:
        hint = missing_extra(exc)
        if hint is None:
            raise
        raise ModuleNotFoundError(hint, name=exc.name) from exc


def _load(target: str) -> Callable[..., ToolResult | None]:
    """The tool's function: preflight's also takes the runner, Prometheus' the URL and the runner."""
    module, _, function = target.partition(":")
    with _extra_hint():
        return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]


def _when_attached(kind: str, target: str, incident: Incident) -> ToolResult | None:
    if not incident.attachments.get(kind):
        return None
    with _extra_hint():  # KAIOPS imports torch only when it classifies
        return _load(target)(incident)


def _with_url(target: str, url: str | None, runner: CheckRunner, incident: Incident) -> ToolResult | None:
    if not url:
        return None
    return _load(target)(incident, url=url, runner=runner)


def tools(names: list[str], runner: CheckRunner, prometheus: str | None = None) -> list[PreTriage]:
    """The named tools, ready for AgentTools.pretriage; preflight runs on the diagnosis' own runner, the Prometheus
    source (when given a URL) on its hosts and their inventories."""
    unknown = [n for n in names if n not in TOOLS]
    if unknown:
        raise ValueError(f"unknown pre-triage tool(s) {', '.join(unknown)}; choose from {', '.join(TOOLS)}")
    out: list[PreTriage] = []
    for name in names:
        kind, target = TOOLS[name]
        if kind is None:
            tool = partial(_load(target), runner=runner)
        elif kind == PROMETHEUS:
            tool = partial(_with_url, target, prometheus, runner)
        else:
            tool = partial(_when_attached, kind, target)
        tool.__name__ = name  # type: ignore[attr-defined]
        out.append(tool)
    return out
