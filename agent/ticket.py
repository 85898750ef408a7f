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
from agent.reasoning.text_signals import clip_words
from agent.redact import Redactor
from agent.report import Report, acting_party
from agent.slurm.jobs import SlurmJob

MAX_FINDINGS = 5


def ticket_data(report: Report, hostnames: list[str] | None = None, redactor: Redactor | None = None,
                verifications: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """VERIFICATIONS: the run's `aidai verify` rounds (agent/verify.py, `<run>.verify.jsonl`), oldest first."""
    redactor = redactor or Redactor([*(hostnames or []), *report.hosts])
    named = [*(hostnames or []), *report.hosts, *(e.hostname for e in report.inventory if e.hostname)]
    redactor.hostnames = sorted({*redactor.hostnames, *(h for h in named if h not in ("local", "localhost"))},
                                key=len, reverse=True)
    status = "resolved" if report.resolved else "escalated"
    data = {
        "run_id": report.run_id,
        "status": status,
        "acting_party": acting_party(report),
        "summary": report.title,
        "incident": report.incident,
        "environment": report.environment,
        "hosts": report.hosts,
        # the Slurm jobs the hosts came from: which job held which node and GPU
        "slurm_jobs": [job.model_dump(mode="json") for job in report.slurm_jobs],
        # what each host is and what it was judged by; the hosts nothing could be checked on, and why
        "host_inventory": [e.model_dump(mode="json", exclude={"values"}) for e in report.inventory],
        "root_causes": [c.model_dump(mode="json") for c in report.root_causes],
        "follows": [c.model_dump(mode="json") for c in report.follows],
        "also_found": [c.model_dump(mode="json") for c in report.also_found],
        "suspected": [s.model_dump(mode="json") for s in report.suspected],
        "conclusion": report.explanation,
        "hypotheses_tested": [{"label": j.label, "status": j.status, "confidence": j.confidence, "why": j.why}
                              for j in report.hypotheses],
        "path": [s.model_dump(mode="json") for s in report.path if s.action != "rank"],
        "checks": [{"check": r.check, "host": r.host, "tier": r.tier, "verdict": r.verdict.value,
                    "summary": r.summary, "reason": r.reason, "commands": r.cmds,
                    "findings": [f"{f.severity} {f.id} {f.entity}: {f.message}".strip()
                                 for f in r.failing()[:MAX_FINDINGS]],
                    "lines": [f.raw_line.strip() for f in r.failing()[:MAX_FINDINGS] if f.raw_line.strip()],
                    "duration_s": r.duration_s, "output_sha256": r.output_sha256} for r in report.results],
        "similar_incidents": [{"id": p.id, "label": p.label, "score": p.score} for p in report.similar[:5]],
        "pretriage": [{"tool": t.tool, "status": t.status, "summary": t.summary or t.reason, "hosts": t.hosts[:10],
                       "findings": [f"{f.severity} {f.id} {f.entity}: {f.message}".strip()
                                    for f in t.findings[:MAX_FINDINGS]],
                       "priors": dict(sorted(t.priors.items(), key=lambda kv: -kv[1])[:5])}
                      for t in report.pretriage],
        "next_steps": [h.model_dump(mode="json") for h in report.exploration],
        "customer_feedback": report.feedback,
        "attachments": [a.model_dump(mode="json") for a in report.attachments],
        "usage": {"reasoner": report.reasoner, "llm_calls": report.llm_calls, "tokens": report.tokens},
        "stopped": report.stopped or None,
        "evidence_bundle": _bundle(report),
        "verifications": [_round(v) for v in verifications or []],
    }
    redacted = redactor.data(data)
    redacted["redactions"] = dict(sorted(redactor.counts.items()))  # counts only: the values stay local
    redacted["title"] = ticket_title(redacted)
    return redacted


def _bundle(report: Report) -> dict[str, Any] | None:
    """The evidence bundle as the ticket names it: by its name in the data dir's runs/ (the full path is local)."""
    info = report.evidence_bundle
    if info is None:
        return None
    return {"name": Path(info.path).name if info.path else "", "manifest_sha256": info.manifest_sha256,
            "results": info.results, "files": info.files, "bytes": info.bytes, "capped": info.capped,
            "not_kept": info.not_kept, "error": info.error}


def _round(stored: dict[str, Any]) -> dict[str, Any]:
    """One verify round as the ticket carries it: when, who, the window, and per cause its result and checks."""
    return {"ts": stored.get("ts", ""), "by": stored.get("by", ""), "status": stored.get("status", ""),
            "since": stored.get("since", ""), "since_from": stored.get("since_from", ""),
            "window_note": stored.get("window_note", ""), "bundle": (stored.get("bundle") or {}).get("status", ""),
            "causes": [{"label": c["label"], "role": c.get("role", ""), "status": c["status"], "why": c.get("why", ""),
                        "checks": [{"host": k["result"]["host"], "check": k["result"]["check"],
                                    "verdict": k["result"]["verdict"], "status": k["status"],
                                    "summary": k["result"].get("reason") or k["result"].get("summary", ""),
                                    "output_sha256": k["result"].get("output_sha256", "")}
                                   for k in c.get("checks", [])]}
                       for c in stored.get("causes", [])]}


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# how a user of each channel allows the active checks a run skipped for want of approval
APPROVE_HOW = {"cli": "re-run with `--approve-active` (or `--ask` to approve them one step at a time)",
               "chat": "run `aidai chat` again and answer yes when it asks to run them",
               "page": "start the run again from the page and tick them in its approval box",
               "webhook": "approve them in aidai (the page's approval box, `aidai chat`, or `--approve-active`)",
               "mcp": "start the diagnosis again with approval=ask on an `aidai mcp --allow-active` server and have an "
                      "operator approve them with the `approve` tool"}
CHANNELS = tuple(APPROVE_HOW)
TITLE_CHARS = 110


def ticket_title(data: dict[str, Any]) -> str:
    causes = data["root_causes"]
    if data["status"] == "resolved" and causes:
        where = causes[0]["where"][0].split(" (")[0] if causes[0].get("where") else ""
        head = f"{causes[0]['label']}" + (f" on {where}" if where else "")
        return clip_words(f"Resolved: {head} ({data['summary']})" if data["summary"] else f"Resolved: {head}",
                          TITLE_CHARS)
    return clip_words(f"Escalation: {data['summary'] or 'unresolved incident'}", TITLE_CHARS)


def render_markdown(data: dict[str, Any], channel: str = "cli") -> str:
    """The ticket as a person reads it: the cause, where it is, what to do and the raw lines behind it first; the
    customer's answers next; the incident, hosts and every check after; the search path last, folded."""
    if channel not in APPROVE_HOW:
        raise ValueError(f"unknown ticket channel {channel!r}; choose one of {', '.join(CHANNELS)}")
    party = data.get("acting_party", "provider")
    who = ("the customer: the cause is in their code, configuration or library versions" if party == "customer"
           else "the provider: " + ("the cause is in the machine, its drivers or its fabric" if data["root_causes"]
                                    else "no cause could be confirmed from inside the machine"))
    out = [f"# {ticket_title(data)}", "",
           f"**{data['status'].capitalize()}** · who should act: **{who}** · run `{data['run_id']}`", ""]
    if data.get("stopped"):
        out += [f"> **Investigation stopped** ({data['stopped']['limit']}): {data['stopped']['message']}", ""]
    out += _causes(data) if data["root_causes"] else _no_cause(data)
    out += _evidence_bundle(data) + _verifications(data)
    if data["customer_feedback"]:
        out += ["## What the customer said", ""] + [f"- {f}" for f in data["customer_feedback"]] + [""]
    out += ["## Incident", "", "```", data["incident"].strip()[:4000], "```", ""]
    if data.get("attachments"):
        out += ["## Attached logs (whole, kept with the run)", ""]
        out += [f"- {a['name']}: {a['bytes']:,} bytes, sha256 `{a['sha256']}`, at `{a['path']}`"
                + (f" (the incident holds {a['excerpted_lines']} of its lines)" if a.get("excerpted_lines") else "")
                for a in data["attachments"]]
        out.append("")
    inventory = data.get("host_inventory") or []
    unchecked = {h["host"] for h in inventory if h["cannot_check"]}
    checked = [h for h in data["hosts"] if h not in unchecked]
    out += ["## Environment and hosts", "", f"- **Environment:** {data['environment'] or 'not given'}",
            f"- **Hosts checked:** {', '.join(checked) or 'none'}"
            + (f" (could not check: {', '.join(sorted(unchecked))})" if unchecked else "")]
    out += [f"- {_md_escape(Expectations.model_validate(host).line())}" for host in inventory]
    out += [f"- {_md_escape(SlurmJob.model_validate(job).line())}" for job in data.get("slurm_jobs") or []]
    out.append("")
    if data.get("also_found"):
        out += ["## Also found on the hosts (not the cause of this incident)", ""]
        for cause in data["also_found"]:
            where = f" on {'; '.join(cause['where'])}" if cause.get("where") else ""
            out.append(f"- **{cause['label']}**{where}: {cause.get('link', '')}")
            out += [f"   - recommended action: {action}" for action in cause.get("actions", [])]
            out += [f"   - evidence: `{line}`" for line in cause["evidence"]]
        out.append("")
    if not data["checks"] and not data["hypotheses_tested"]:  # nothing ran: no empty tables to read through
        out += ["## Checks run", "", "None: no host could be checked."]
        return _tail(data, out, channel)
    out += ["## Checks run", "", "| host | check | tier | verdict | key findings | output sha256 |",
            "|---|---|---|---|---|---|"]
    for check in data["checks"]:
        findings = "<br>".join(_md_escape(f) for f in check["findings"]) or _md_escape(
            check["reason"] or check["summary"])
        out.append(f"| {check['host']} | {check['check']} | {check['tier']} | {check['verdict']} | {findings} | "
                   f"`{check['output_sha256'][:16]}` |")
    out += ["", "## Hypotheses tested", "", "| hypothesis | verdict | confidence | why |", "|---|---|---|---|"]
    out += [f"| {h['label']} | {h['status']} | {h['confidence']:.2f} | {_md_escape(h['why'])} |"
            for h in data["hypotheses_tested"]]
    return _tail(data, out, channel)


def _causes(data: dict[str, Any]) -> list[str]:
    out = ["## Root cause" if len(data["root_causes"]) == 1 else "## Root causes", ""]
    for i, cause in enumerate(data["root_causes"], 1):
        level = cause.get("level") or "confirmed"
        out.append(f"{i}. **{cause['label']}** ({level}, confidence {cause['confidence']:.2f}, {cause['severity']})")
        out += [f"   - {level}: {cause['link']}"] if cause.get("link") else []
        out += [f"   - where: {'; '.join(cause['where'])}"] if cause.get("where") else []
        actions = cause.get("actions") or []
        out += [f"   - action: {action}" for action in actions]
        if not actions and cause.get("runbook"):
            out.append(f"   - action: {clip_words(cause['runbook'], 300)}")
        out += [f"   - drain it in Slurm (asks for approval): `{command}`" for command in cause.get("drain", [])]
        out += [f"   - line: `{line}`" for line in cause.get("lines", [])[:4]]
        out += [f"   - evidence: `{line}`" for line in cause["evidence"][:4]]
        if cause["why"] and cause["why"] not in data["conclusion"]:
            out.append(f"   - why: {cause['why']}")
    for cause in data.get("follows") or []:
        out.append(f"- what followed from it: **{cause['label']}** ({cause.get('link', '')})")
    out += ["", data["conclusion"], ""] if data["conclusion"] else [""]
    return out


def _evidence_bundle(data: dict[str, Any]) -> list[str]:
    bundle = data.get("evidence_bundle")
    if not bundle:
        return []
    if bundle.get("error"):
        return [f"**Evidence bundle not kept:** {bundle['error']}", ""]
    line = (f"**Evidence bundle** (the confirming checks' whole output, kept before any fix): `{bundle['name']}` in "
            f"the data dir's `runs/`, manifest sha256 `{bundle['manifest_sha256']}` ({bundle['results']} check "
            f"result(s), {bundle['files']} files, {bundle['bytes']:,} bytes)")
    out = [line]
    out += [f"- cut at the size cap: {item}" for item in bundle.get("capped", [])]
    out += [f"- whole output not kept: {item}" for item in bundle.get("not_kept", [])]
    return [*out, ""]


def _verifications(data: dict[str, Any]) -> list[str]:
    rounds = data.get("verifications") or []
    if not rounds:
        return []
    out = ["## Verification after fix", ""]
    for n, item in enumerate(rounds, 1):
        out.append(f"{n}. {item['ts'].replace('T', ' ')} by {item['by']}: **{item['status']}** (log events counted "
                   f"since {item['since'].replace('T', ' ')}, {item['since_from']}; evidence bundle "
                   f"{item['bundle'] or 'not checked'})")
        for cause in item["causes"]:
            out.append(f"   - {cause['label']}: **{cause['status']}**: {_md_escape(cause['why'])[:400]}")
            out += [f"      - {c['host']} {c['check']}: {c['status']} (now {c['verdict']}: "
                    f"{_md_escape(c['summary'])[:200]})" for c in cause["checks"]]
        if item.get("window_note"):
            out.append(f"   - {_md_escape(item['window_note'])}")
    return [*out, ""]


def _no_cause(data: dict[str, Any]) -> list[str]:
    """An escalation: what failed on the hosts (with its lines), the leads still open, what the provider should
    look at."""
    out = ["## No root cause confirmed", ""]
    out += ["The checks below ran and none confirmed a known cause; the provider needs to look at what they "
            "could not see.", ""] if data["checks"] else [data["conclusion"], ""]
    failing = [c for c in data["checks"] if c["verdict"] in ("FAIL", "WARN") and c["findings"]]
    if failing:
        out += ["**What the checks found** (none of it explains the incident on its own):", ""]
        for check in failing[:6]:
            out.append(f"- {check['host']} {check['check']} {check['verdict']}: {_md_escape(check['findings'][0])}")
            out += [f"  - line: `{line[:300]}`" for line in check.get("lines", [])[:2]]
        out.append("")
    if data.get("suspected"):
        out += ["**Suspected (not checked: the view the diagnosis ran in cannot see it).** Run on the host:", ""]
        for s in data["suspected"]:
            out.append(f"- {s['label']} (likely cause no. {s['rank']} of the incident's text): {_md_escape(s['why'])}")
            out += [f"  - `{command}`" for command in s["commands"][:6]]
        out.append("")
    open_leads = [h for h in data["hypotheses_tested"] if h["status"] not in ("rejected", "confirmed")]
    if open_leads:
        out += ["**Leads not settled:** " + "; ".join(f"{h['label']} ({h['status']})" for h in open_leads[:5]), ""]
    return out


def _tail(data: dict[str, Any], out: list[str], channel: str) -> str:
    """Pre-triage, similar incidents, next steps, the search path and commands folded, the redaction note."""
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
    waiting = [c["check"] for c in data["checks"] if c["verdict"] == "UNKNOWN" and "approv" in c["reason"]]
    if data["next_steps"] or waiting:
        out += ["", "## Suggested next steps", ""]
        if waiting:
            out.append(f"- **Run the load tests that were not approved** ({', '.join(dict.fromkeys(waiting))}): "
                       f"{APPROVE_HOW[channel]}.")
        for step in data["next_steps"]:
            out.append(f"- **{step['title']}**: {step['why']}")
            out += [f"  - {s}" for s in step["steps"]]
    if data["path"]:
        out += ["", f"<details><summary>Search path through the taxonomy ({len(data['path'])} steps)</summary>", ""]
        out += [f"{i}. p{step['pipeline']} {step['node']}: {step['action']}"
                + (f" ({_md_escape(step['detail'])[:160]})" if step["detail"] else "")
                for i, step in enumerate(data["path"], 1)]
        out += ["", "</details>"]
    commands = [(c["check"], cmd) for c in data["checks"] for cmd in c["commands"]]
    if commands:
        out += ["", "<details><summary>commands</summary>", "", "```"]
        out += [f"# {check}: {cmd}" for check, cmd in dict.fromkeys(commands)]
        out += ["```", "</details>"]
    redactions = ", ".join(f"{n} {kind}" for kind, n in data["redactions"].items()) or "nothing found"
    out += ["", f"_Redacted before export: {redactions}. Reasoner: {data['usage']['reasoner']}, "
            f"{data['usage']['llm_calls']} LLM call(s)._", ""]
    return "\n".join(out)


def write_ticket(report: Report, path: str | Path, hostnames: list[str] | None = None,
                 redactor: Redactor | None = None, channel: str = "cli") -> tuple[Path, Path]:
    """PATH.md and PATH.json (the suffix of PATH, if any, is replaced)."""
    md, js = write_formats(ticket_data(report, hostnames, redactor), path, ("md", "json"), channel)
    return md, js


def write_formats(data: dict[str, Any], path: str | Path, formats: Iterable[str], channel: str = "cli") -> list[Path]:
    """PATH.md and/or PATH.json from ticket data, each written whole (a temporary file renamed into place)."""
    base = Path(path)
    base = base.with_suffix("") if base.suffix in (".md", ".json") else base
    base.parent.mkdir(parents=True, exist_ok=True)
    render = {"md": lambda d: render_markdown(d, channel), "json": lambda d: json.dumps(d, indent=2)}
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
