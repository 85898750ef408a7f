"""Checks run directly over MCP (no diagnosis): the manifest's scripts on the server's hosts, under the page's rules.

A passive check runs for any caller. An active or intrusive one runs only when the server allows active checks
(`aidai mcp --allow-active`), the caller is an operator, and the call says so (`approve_active`); otherwise nothing
runs and the refusal says which of the three is missing. Every batch gets an audit log in the runs folder, like a
diagnosis (`aidai audit show ID`): who asked, who approved which check, and every check executed.
"""

from __future__ import annotations

from typing import Any

from agent.audit import AuditLog, audit_path
from agent.audit_records import ApprovalRecord, RunRecord, check_record
from agent.checks.manifest import CheckSpec, Manifest, load_manifest
from agent.checks.runner import CheckRunner
from agent.executors.hosts import executors_for
from agent.models import CheckResult
from agent.options import DiagnoseOptions
from agent.runs import new_run_id, runs_dir
from agent.server.config import Caller, ServerConfig
from agent.server.inputs import BadInput

VIA = "mcp run_checks"


def admitted(config: ServerConfig, manifest: Manifest, hosts: list[str], check_ids: list[str], who: Caller, *,
             allow_active: bool, approve_active: bool) -> list[CheckSpec]:
    """The specs to run, or a BadInput that says why none may (hosts outside the allowlist, unknown ids, an active
    check the server, the role or the call does not allow)."""
    if not hosts:
        raise BadInput("name at least one host (see the server_info tool)")
    if unknown := [h for h in hosts if h not in config.targets]:
        raise BadInput(f"unknown host {unknown[0]!r}: this server checks only {', '.join(config.targets)}", 403)
    if len(set(hosts)) != len(hosts):
        raise BadInput("a host is named twice")
    if not check_ids:
        raise BadInput("name at least one check id (see the list_checks tool)")
    if unknown := [c for c in check_ids if c not in manifest.ids()]:
        raise BadInput(f"unknown check(s) {', '.join(unknown)}: not in the manifest; valid: "
                       f"{', '.join(manifest.ids())}")
    specs = [manifest.get(c) for c in dict.fromkeys(check_ids)]
    if costly := [s.id for s in specs if s.needs_approval]:
        named = ", ".join(costly)
        if not allow_active:
            raise BadInput(f"{named}: active checks are not allowed on this server (it runs passive checks only; "
                           "an administrator allows them with `aidai mcp --allow-active`)", 403)
        if not who.operator:
            raise BadInput(f"{named}: {who.name} is a viewer: approving active checks needs the operator role", 403)
        if not approve_active:
            raise BadInput(f"{named}: active checks load the GPUs or the network; call again with "
                           "approve_active=true to approve them as the operator")
    return specs


def run_checks(config: ServerConfig, hosts: list[str], specs: list[CheckSpec], who: Caller) -> dict[str, Any]:
    """Run `specs` on `hosts` (blocking), auditing the batch under a new id; the results as the runner gives them."""
    batch = new_run_id()
    audit = AuditLog(audit_path(runs_dir(DiagnoseOptions(data_dir=config.data_dir)), batch), batch)
    costly = [s for s in specs if s.needs_approval]
    audit(RunRecord(operator=who.name, hosts=hosts, approval="operator" if costly else "none", via=VIA,
                    checks=[s.id for s in specs]))
    for spec in costly:  # admitted() let them through: the caller is an operator who approved them in the call
        audit(ApprovalRecord(node=None, check=spec.id, tier=spec.tier, approved=True, by=who.name,
                             via=f"operator ({VIA})"))
    executors = executors_for(hosts)
    runner = CheckRunner(executors, approve=bool(costly), manifest=load_manifest())

    def executed(result: CheckResult) -> None:
        audit(check_record(result, None, runner.exit_codes.get((result.host, result.check))))

    runner.listeners.append(executed)
    try:
        results = runner.run([s.id for s in specs])
    finally:
        for executor in executors:
            executor.close()
    return {"audit_id": batch, "results": [r.model_dump(mode="json", exclude={"cached"}) for r in results]}
