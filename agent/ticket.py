"""The escalation ticket (DESIGN.md): what the provider needs to act without asking the customer again.

Markdown for people and JSON for the provider's tooling, both from the same redacted data: summary,
environment signature, hypotheses tested with the DFS path, every check run (command, verdict, key findings,
output hash), similar past incidents, pre-triage results and suggested next steps. With the run's Redactor, the
ticket uses the same placeholders as the prompts the LLM saw; the mapping itself is never part of a ticket.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agent.inventory import Expectations
from agent.redact import Redactor
from agent.report import Report

MAX_FINDINGS = 5


def ticket_data(report: Report, hostnames: list[str] | None = None, redactor: Redactor | None = None,
                ) -> dict[str, Any]:
    redactor = redactor or Redactor([*(hostnames or []), *report.hosts])
    named = [*(hostnames or []), *report.hosts, *(e.hostname for e in report.inventory if e.hostname)]
    redactor.hostnames = sorted({*redactor.hostnames, *(h for h in named if h not in ("local", "localhost"))},
                                key=len, reverse=True)
    status = "resolved" if report.resolved else "escalated"
    data = {
        "run_id": report.run_id,
        "status": status,
        "summary": report.title,
        "incident": report.incident,
        "environment": report.environment,
        "hosts": report.hosts,
        # what each host is and what it was judged by; the hosts nothing could be checked on, and why
        "host_inventory": [e.model_dump(mode="json", exclude={"values"}) for e in report.inventory],
        "root_causes": [c.model_dump(mode="json") for c in report.root_causes],
        "also_found": [c.model_dump(mode="json") for c in report.also_found],
        "conclusion": report.explanation,
        "hypotheses_tested": [{"label": j.label, "status": j.status, "confidence": j.confidence, "why": j.why}
                              for j in report.hypotheses],
        "path": [s.model_dump(mode="json") for s in report.path if s.action != "rank"],
        "checks": [{"check": r.check, "host": r.host, "tier": r.tier, "verdict": r.verdict.value,
                    "summary": r.summary, "reason": r.reason, "commands": r.cmds,
                    "findings": [f"{f.severity} {f.id} {f.entity}: {f.message}".strip()
                                 for f in r.failing()[:MAX_FINDINGS]],
                    "duration_s": r.duration_s, "output_sha256": r.output_sha256} for r in report.results],
        "similar_incidents": [{"id": p.id, "label": p.label, "score": p.score} for p in report.similar[:5]],
        "pretriage": [{"tool": t.tool, "status": t.status, "summary": t.summary or t.reason, "hosts": t.hosts[:10],
                       "findings": [f"{f.severity} {f.id} {f.entity}: {f.message}".strip()
                                    for f in t.findings[:MAX_FINDINGS]],
                       "priors": dict(sorted(t.priors.items(), key=lambda kv: -kv[1])[:5])}
                      for t in report.pretriage],
        "next_steps": [h.model_dump(mode="json") for h in report.exploration],
        "customer_feedback": report.feedback,
        "usage": {"reasoner": report.reasoner, "llm_calls": report.llm_calls, "tokens": report.tokens},
        "stopped": report.stopped or None,
    }
    redacted = redactor.data(data)
    redacted["redactions"] = dict(sorted(redactor.counts.items()))  # counts only: the values stay local
    return redacted


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(data: dict[str, Any]) -> str:
    inventory = data.get("host_inventory") or []
    unchecked = {h["host"] for h in inventory if h["cannot_check"]}
    checked = [h for h in data["hosts"] if h not in unchecked]
    out = [f"# aidai escalation ticket: {data['summary'] or 'unresolved incident'}", "",
           f"- **Status:** {data['status']}", f"- **Run:** `{data['run_id']}`",
           f"- **Environment:** {data['environment'] or 'not given'}",
           f"- **Hosts checked:** {', '.join(checked) or 'none'}"
           + (f" (could not check: {', '.join(sorted(unchecked))})" if unchecked else ""), ""]
    if inventory:
        out += ["## Hosts", ""]
        out += [f"- {_md_escape(Expectations.model_validate(host).line())}" for host in inventory]
        out.append("")
    if data.get("stopped"):
        out += [f"> **Investigation stopped** ({data['stopped']['limit']}): {data['stopped']['message']}", ""]
    out += ["## Incident", "", "```",
           data["incident"].strip()[:4000], "```", ""]
    if data["root_causes"]:
        out += ["## Confirmed root causes", ""]
        for i, cause in enumerate(data["root_causes"], 1):
            out.append(f"{i}. **{cause['label']}** (confidence {cause['confidence']:.2f}, {cause['severity']}): "
                       f"{cause['why']}")
            out += [f"   - where: {'; '.join(cause['where'])}"] if cause.get("where") else []
            out += [f"   - recommended action: {action}" for action in cause.get("actions", [])]
            out += [f"   - evidence: `{line}`" for line in cause["evidence"]]
            out += [f"   - line: `{line}`" for line in cause.get("lines", [])]
        out += ["", data["conclusion"], ""]
    if data.get("also_found"):
        out += ["## Also found on the hosts (not the cause of this incident)", ""]
        for cause in data["also_found"]:
            where = f" on {'; '.join(cause['where'])}" if cause.get("where") else ""
            out.append(f"- **{cause['label']}**{where}: {cause.get('link', '')}")
            out += [f"   - recommended action: {action}" for action in cause.get("actions", [])]
            out += [f"   - evidence: `{line}`" for line in cause["evidence"]]
        out.append("")
    else:
        out += ["## No root cause confirmed", ""]
        out += ["The checks below ran and none confirmed a known cause; the provider needs to look at what they "
                "could not see.", ""] if data["checks"] else [data["conclusion"], ""]
    if not data["checks"] and not data["hypotheses_tested"]:  # nothing ran: no empty tables to read through
        out += ["## Checks run", "", "None: no host could be checked."]
        return _tail(data, out)
    out += ["## Hypotheses tested", "", "| hypothesis | verdict | confidence | why |", "|---|---|---|---|"]
    out += [f"| {h['label']} | {h['status']} | {h['confidence']:.2f} | {_md_escape(h['why'])} |"
            for h in data["hypotheses_tested"]]
    out += ["", "## Path through the taxonomy", ""]
    out += [f"{i}. p{step['pipeline']} {step['node']}: {step['action']}"
            + (f" ({_md_escape(step['detail'])[:160]})" if step["detail"] else "")
            for i, step in enumerate(data["path"], 1)]
    out += ["", "## Checks run", "", "| host | check | tier | verdict | key findings | output sha256 |",
            "|---|---|---|---|---|---|"]
    for check in data["checks"]:
        findings = "<br>".join(_md_escape(f) for f in check["findings"]) or _md_escape(
            check["reason"] or check["summary"])
        out.append(f"| {check['host']} | {check['check']} | {check['tier']} | {check['verdict']} | {findings} | "
                   f"`{check['output_sha256'][:16]}` |")
    commands = [(c["check"], cmd) for c in data["checks"] for cmd in c["commands"]]
    if commands:
        out += ["", "<details><summary>commands</summary>", "", "```"]
        out += [f"# {check}: {cmd}" for check, cmd in dict.fromkeys(commands)]
        out += ["```", "</details>"]
    return _tail(data, out)


def _tail(data: dict[str, Any], out: list[str]) -> str:
    """Pre-triage, similar incidents, next steps, the customer's words and the redaction note."""
    if data["pretriage"]:
        out += ["", "## Pre-triage", ""]
        for tool in data["pretriage"]:
            out.append(f"- **{tool['tool']}** ({tool['status']}): {_md_escape(tool['summary'])}")
            if tool["hosts"]:
                out.append(f"  - check first: {', '.join(tool['hosts'])}")
            out += [f"  - {_md_escape(f)}" for f in tool["findings"]]
    if data["similar_incidents"]:
        out += ["", "## Similar past incidents", ""]
        out += [f"- {p['id']}: {p['label']} (similarity {p['score']:.2f})" for p in data["similar_incidents"]]
    if data["next_steps"]:
        out += ["", "## Suggested next steps", ""]
        for step in data["next_steps"]:
            out.append(f"- **{step['title']}**: {step['why']}")
            out += [f"  - {s}" for s in step["steps"]]
    if data["customer_feedback"]:
        out += ["", "## What the customer added", ""] + [f"- {f}" for f in data["customer_feedback"]]
    redactions = ", ".join(f"{n} {kind}" for kind, n in data["redactions"].items()) or "nothing found"
    out += ["", f"_Redacted before export: {redactions}. Reasoner: {data['usage']['reasoner']}, "
            f"{data['usage']['llm_calls']} LLM call(s)._", ""]
    return "\n".join(out)


def write_ticket(report: Report, path: str | Path, hostnames: list[str] | None = None,
                 redactor: Redactor | None = None) -> tuple[Path, Path]:
    """PATH.md and PATH.json (the suffix of PATH, if any, is replaced)."""
    md, js = write_formats(ticket_data(report, hostnames, redactor), path, ("md", "json"))
    return md, js


def write_formats(data: dict[str, Any], path: str | Path, formats: Iterable[str]) -> list[Path]:
    """PATH.md and/or PATH.json from ticket data, each written whole (a temporary file renamed into place)."""
    base = Path(path)
    base = base.with_suffix("") if base.suffix in (".md", ".json") else base
    base.parent.mkdir(parents=True, exist_ok=True)
    render = {"md": render_markdown, "json": lambda d: json.dumps(d, indent=2)}
    written = []
    for fmt in formats:
        if fmt not in render:
            raise ValueError(f"unknown ticket format {fmt!r}; choose md or json")
        target = base.with_name(f"{base.name}.{fmt}")  # "ticket.v2" keeps its ".v2"
        atomic_write(target, render[fmt](data))
        written.append(target)
    return written


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
