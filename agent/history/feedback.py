"""The feedback loop: a resolved diagnosis (report JSON) or a closed ticket (ticket JSON, optionally with the
root cause the engineers confirmed) becomes a history record, so that pipeline 1 finds it next time.

The label is the confirmed root cause: `confirmed_root_cause` (what a person set when closing the ticket) wins
over the diagnosis' own first root cause; an escalated ticket without a confirmed root cause is refused. The
checks that confirmed it become the record's discussion (commands and findings), which is what verification
mining reads.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

from agent.history.records import HistoryRecord

ARCHIVE_NAME = "history.jsonl"


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _checks_discussion(data: dict[str, Any]) -> str:
    lines = []
    for check in data.get("checks") or data.get("results") or []:
        if not isinstance(check, dict):
            continue
        commands = check.get("commands") or check.get("cmds") or []
        findings = check.get("findings") or []
        found = [f if isinstance(f, str) else f"{f.get('severity', '')} {f.get('id', '')}: {f.get('message', '')}"
                 for f in findings][:5]
        verdict = check.get("verdict", "")
        for cmd in commands[:3]:
            lines.append(f"`{cmd}` ({check.get('check', '')}: {verdict}) {'; '.join(found)}".strip())
        if not commands and found:
            lines.append(f"{check.get('check', '')}: {verdict} {'; '.join(found)}")
    return "\n".join(lines)


def record_from_resolved(data: Any, record_id: str | None = None) -> HistoryRecord:
    """ValueError (one line) when the file holds no incident text or no confirmed root cause."""
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object (an aidai report or ticket)")
    roots = [r for r in data.get("root_causes") or [] if isinstance(r, dict) and r.get("label")]
    confirmed = _text(data.get("confirmed_root_cause"))
    resolved = data.get("resolved") is True or data.get("status") in ("resolved", "closed")
    if not confirmed:
        if not roots or not resolved:
            raise ValueError("no confirmed root cause: the diagnosis was not resolved; set 'confirmed_root_cause' "
                             "to the label the engineers confirmed")
        confirmed = str(roots[0]["label"]).strip()
    description = _text(data.get("incident")) or _text(data.get("description"))
    if not description:
        raise ValueError("no incident text ('incident' or 'description') to learn from")
    run_id = _text(data.get("run_id"))
    rid = record_id or _text(data.get("id")) or (f"resolved-{run_id}" if run_id else "")
    conclusion = _text(data.get("conclusion")) or _text(data.get("explanation")) or _text(data.get("resolution"))
    runbook = next((_text(r.get("runbook")) for r in roots if r.get("label") == confirmed and r.get("runbook")), "")
    closed = _text(data.get("closed")) or _text(data.get("opened")) or date.today().isoformat()
    return HistoryRecord.model_validate({
        "id": rid, "description": description, "environment": _text(data.get("environment")),
        "label": confirmed, "discussion": _checks_discussion(data),
        "resolution": "\n".join(p for p in (conclusion, runbook) if p), "opened": closed,
        "source": f"aidai {data.get('status') or ('resolved' if resolved else 'ticket')} {run_id}".strip(),
        "hosts": [h for h in data.get("hosts") or [] if isinstance(h, str)]})


def load_resolved(path: Path) -> HistoryRecord:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON: {exc.msg} at line {exc.lineno}") from None
    try:
        return record_from_resolved(data)
    except Exception as exc:
        raise ValueError(f"{path}: {str(exc).splitlines()[0]}") from None


def append_to_archive(record: HistoryRecord, archive: Path) -> bool:
    """Append the record to the history JSONL (False when a record with its id is already there)."""
    if archive.is_file():
        for line in archive.read_text().splitlines():
            try:
                if json.loads(line).get("id") == record.id:
                    return False
            except (json.JSONDecodeError, AttributeError):
                continue
    archive.parent.mkdir(parents=True, exist_ok=True)
    with archive.open("a") as fh:
        fh.write(json.dumps(record.model_dump(mode="json", exclude_defaults=True), ensure_ascii=False) + "\n")
    return True
