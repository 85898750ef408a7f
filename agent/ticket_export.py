"""Ticket export for ticket systems: Markdown and/or JSON files, and a webhook POST (Jira, ServiceNow, Slack, a
custom receiver) with a configurable JSON body template.

A template is a JSON file whose strings may name ticket fields as `{{field}}`: a string that is exactly one
placeholder becomes the field's value (any JSON type), a placeholder inside longer text becomes its text. The
fields are the ticket JSON's top-level keys plus `markdown` (the rendered ticket). Without a template the body is
the ticket JSON itself. Both are built from the redacted ticket: nothing unredacted is ever posted.

The webhook URL often carries a secret (Slack, Teams): messages and the audit log show only scheme://host/….
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from agent.ticket import render_markdown

FIELD = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
TICKET_FIELDS = ("run_id", "status", "title", "acting_party", "summary", "incident", "environment", "hosts",
                 "root_causes", "conclusion",
                 "hypotheses_tested", "path", "checks", "similar_incidents", "pretriage", "next_steps",
                 "customer_feedback", "attachments", "usage", "stopped", "redactions", "markdown")
DEFAULT_TIMEOUT_S = 10.0
MAX_TEMPLATE_BYTES = 256 * 1024


class ExportError(ValueError):
    """Bad export options (URL, template, format) or a receiver that did not take the ticket."""


def public_url(url: str) -> str:
    """scheme://host[:port]/… : what may be shown or logged of a webhook URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}/…"


def check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ExportError(f"--webhook {url!r} is not an http(s) URL (e.g. https://tickets.example.com/hooks/aidai)")
    return url


def load_template(path: Path) -> Any:
    """The template, parsed and with every placeholder naming a known field (checked before the diagnosis runs)."""
    if not path.is_file():
        raise ExportError(f"--webhook-template {path}: no such file")
    if path.stat().st_size > MAX_TEMPLATE_BYTES:
        raise ExportError(f"--webhook-template {path}: larger than {MAX_TEMPLATE_BYTES // 1024} KiB")
    try:
        template = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ExportError(f"--webhook-template {path}: not JSON ({exc})") from None
    unknown = sorted({name for text in _strings(template) for name in FIELD.findall(text)} - set(TICKET_FIELDS))
    if unknown:
        raise ExportError(f"--webhook-template {path}: unknown field(s) {', '.join(unknown)}; known: "
                          f"{', '.join(TICKET_FIELDS)}")
    return template


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [*_strings(k), *_strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def render_body(template: Any, data: dict[str, Any]) -> Any:
    fields = {**data, "markdown": render_markdown(data, "webhook")}

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            whole = FIELD.fullmatch(value.strip())
            if whole:
                return fields.get(whole.group(1))
            return FIELD.sub(lambda m: _as_text(fields.get(m.group(1))), value)
        if isinstance(value, dict):
            return {fill(k): fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    return fill(template) if template is not None else data


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def post(url: str, body: Any, timeout_s: float = DEFAULT_TIMEOUT_S) -> int:
    """POST the body as JSON; the HTTP status on 2xx, else ExportError naming the status (redirects are not
    followed: a ticket goes where it was told to)."""
    payload = json.dumps(body).encode("utf-8")
    try:
        response = httpx.post(check_url(url), content=payload, timeout=timeout_s, follow_redirects=False,
                              headers={"Content-Type": "application/json", "User-Agent": "aidai-ticket/1"})
    except httpx.TimeoutException:
        raise ExportError(f"webhook {public_url(url)} did not answer within {timeout_s:g} s") from None
    except httpx.HTTPError as exc:
        raise ExportError(f"webhook {public_url(url)} failed: {type(exc).__name__}: {exc}") from None
    if not 200 <= response.status_code < 300:
        detail = " ".join(response.text.split())[:200]
        raise ExportError(f"webhook {public_url(url)} answered HTTP {response.status_code}"
                          + (f": {detail}" if detail else ""))
    return response.status_code


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
