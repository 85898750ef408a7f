"""`aidai checks list|run`: the verification scripts from the command line."""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.checks.manifest import CheckSpec, load_manifest, load_profiles
from agent.checks.runner import Approver, CheckRunner
from agent.executors.hosts import SPEC_HELP, HostSpecError, SshOptions, executors_for
from agent.models import CheckResult, Verdict

app = typer.Typer(help="List and run verification checks on hosts.", no_args_is_help=True)
console = Console(emoji=False)

VERDICT_STYLE = {Verdict.PASS: "green", Verdict.WARN: "yellow", Verdict.FAIL: "bold red", Verdict.UNKNOWN: "magenta"}


@app.command("list")
def list_checks(as_json: Annotated[bool, typer.Option("--json", help="Print the manifest as JSON.")] = False) -> None:
    """Every check in the manifest with its tier, cost and taxonomy nodes."""
    manifest = load_manifest()
    if as_json:
        print(json.dumps([c.model_dump() for c in manifest.checks], indent=1))
        return
    table = Table(title=f"{len(manifest.checks)} verification checks")
    for col in ("id", "tier", "cost s", "needs", "description"):
        table.add_column(col)
    for c in manifest.checks:
        table.add_row(c.id, c.tier, f"{c.expected_cost_s:g}", ",".join(c.needs), c.description)
    console.print(table)


def _parse_params(values: list[str]) -> dict[str, str]:
    params = {}
    for item in values:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise typer.BadParameter(f"{item!r}: write key=value", param_hint="--param")
        params[key] = value
    return params


@app.command("run")
def run_checks(
    ids: Annotated[list[str] | None, typer.Argument(help="Check ids (see `aidai checks list`).")] = None,
    run_all: Annotated[bool, typer.Option("--all", help="Every passive check (and active ones if approved).")] = False,
    host: Annotated[list[str] | None, typer.Option("--host", help=SPEC_HELP + " (repeatable).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array of check results.")] = False,
    approve_active: Annotated[bool, typer.Option("--approve-active",
                                                 help="Allow active (benchmark) checks to run.")] = False,
    profile: Annotated[str | None, typer.Option(help="SKU profile for thresholds (default: the host's, "
                                                     "else H100-SXM-8).")] = None,
    param: Annotated[list[str] | None, typer.Option("--param", help="Extra script param key=value, "
                                                    "e.g. checkpoint_dir=/ckpt.")] = None,
    ssh_key: Annotated[str | None, typer.Option(help="Private key for ssh:// hosts (default: agent, ~/.ssh).")] = None,
    known_hosts: Annotated[str | None, typer.Option(help="known_hosts file (default ~/.ssh/known_hosts).")] = None,
    trust_new_host_keys: Annotated[bool, typer.Option(
        "--trust-new-host-keys", help="Accept and remember unknown host keys (a changed key is still refused).")
    ] = False,
    remote_env: Annotated[str | None, typer.Option(help="File on the remote host to source before each script.")
                          ] = None,
    workers: Annotated[int, typer.Option(help="Checks run in parallel.")] = 4,
) -> None:
    """Run checks on one or more hosts and print their verdicts."""
    manifest = load_manifest()
    if profile is not None and profile not in load_profiles():
        raise typer.BadParameter(f"unknown profile {profile!r}; valid: {', '.join(load_profiles())}")
    if run_all and ids:
        raise typer.BadParameter("give check ids or --all, not both")
    if not run_all and not ids:
        raise typer.BadParameter("give check ids or --all")
    if run_all:
        ids = [c.id for c in manifest.checks if c.tier == "passive" or approve_active]
    unknown = [i for i in ids or [] if i not in manifest.ids()]
    if unknown:
        raise typer.BadParameter(f"unknown check(s) {', '.join(unknown)}; valid: {', '.join(manifest.ids())}")
    try:
        executors = executors_for(host or ["local"], SshOptions(ssh_key, known_hosts, trust_new_host_keys, remote_env))
    except HostSpecError as exc:
        raise typer.BadParameter(str(exc), param_hint="--host") from None
    approve: bool | Approver = approve_active
    if not approve_active and sys.stdin.isatty() and not as_json:
        approve = _ask
    runner = CheckRunner(executors, approve=approve, profile_name=profile,
                         params=_parse_params(param or []), manifest=manifest, workers=workers)
    try:
        with console.status("taking each host's inventory", spinner="dots") if not as_json else nullcontext():
            found = runner.take_inventory()
        if not as_json:
            for expectations in found.values():
                console.print(escape(expectations.line()), style="yellow" if expectations.cannot_check else "dim",
                              highlight=False)
        with console.status("running checks", spinner="dots") if not as_json else nullcontext():
            results = runner.run(ids or [])
    finally:
        for executor in executors:
            executor.close()
    if as_json:
        print(json.dumps([r.model_dump(mode="json") for r in results], indent=1))
    else:
        print_results(results, manifest.checks)


def _ask(spec: CheckSpec, host: str) -> bool:
    """Interactive approval of one non-passive check on one host."""
    console.print(f"[yellow]{spec.tier} check[/] {spec.id} on {host}: {spec.description} "
                  f"(about {spec.expected_cost_s:.0f} s; needs {', '.join(spec.needs) or 'nothing'})")
    return typer.confirm("run it?", default=False)


def print_results(results: list[CheckResult], specs: list[CheckSpec]) -> None:
    table = Table(title="verification results", show_lines=False)
    for col in ("host", "check", "tier", "verdict", "summary"):
        table.add_column(col, overflow="fold")
    for r in results:
        style = VERDICT_STYLE[r.verdict]
        table.add_row(r.host, r.check, r.tier, f"[{style}]{r.verdict.value}[/]", r.summary)
    console.print(table)
    counts = {v: sum(r.verdict == v for r in results) for v in Verdict}
    console.print(" ".join(f"[{VERDICT_STYLE[v]}]{v.value} {n}[/]" for v, n in counts.items()))
