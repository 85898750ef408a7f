"""Signature regexes mined from incident text: the error lines and quoted messages that recur in a label's
incidents, with the parts that vary between machines (numbers, hex addresses, PCI ids) generalised."""

from __future__ import annotations

import re
from collections.abc import Sequence

from agent.history.verification import TOOLS

_ERRORISH = re.compile(r"error|fail|xid|warn|timeout|timed out|fatal|exception|refused|unable|not found|mismatch|"
                       r"denied|abort|lost|unsupported|illegal|corrupt|invalid", re.IGNORECASE)
_QUOTED = re.compile(r"`([^`\n]{12,160})`|'([^'\n]{12,160})'|\"([^\"\n]{12,160})\"")
MIN_CHARS = 12
MAX_CHARS = 100


_VARIABLE = re.compile(r"0x[0-9a-fA-F]+|(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]|\d+|\s+")


def _generic(token: str) -> str:
    if token.isspace():
        return r"\s+"
    if token.isdigit():
        return r"\d+"
    return r"0x[0-9a-f]+" if token.lower().startswith("0x") else r"[0-9a-f:.]+"


def generalise(text: str) -> str:
    """A literal turned into a regex that also matches the same message from another machine (numbers, hex
    addresses, PCI bus ids and spacing may differ)."""
    text = text.strip()[:MAX_CHARS]
    parts, pos = [], 0
    for match in _VARIABLE.finditer(text):
        parts += [re.escape(text[pos:match.start()]), _generic(match.group())]
        pos = match.end()
    parts.append(re.escape(text[pos:]))
    return "".join(parts)


def candidates(text: str) -> list[str]:
    found: list[str] = []
    for match in _QUOTED.finditer(text):
        span = next(g for g in match.groups() if g)
        if _ERRORISH.search(span) and span.split()[0].rsplit("/", 1)[-1] not in TOOLS:
            found.append(span)
    for line in text.splitlines():
        line = line.strip()
        if _ERRORISH.search(line) and MIN_CHARS <= len(line) <= 200 and "`" not in line:
            start = _ERRORISH.search(line)
            assert start is not None
            # the error phrase and what follows, not the timestamp/hostname prefix
            found.append(line[max(0, start.start() - 40):][:MAX_CHARS])
    return [c for c in found if len(c.strip()) >= MIN_CHARS]


def mine_signatures(texts: list[str], existing: Sequence[str] = (), limit: int = 4,
                    others: Sequence[str] = ()) -> list[str]:
    """Up to `limit` regexes, most widely shared across `texts` first, none already matched by `existing` and
    none that matches as many of `others` (other labels' incidents) as of `texts`: a signature must point here."""
    compiled = [re.compile(s, re.IGNORECASE) for s in existing]
    counts: dict[str, int] = {}
    order: list[str] = []
    for text in texts:
        for cand in candidates(text):
            if any(p.search(cand) for p in compiled):
                continue
            pattern = generalise(cand)
            try:
                rx = re.compile(pattern, re.IGNORECASE)
            except re.error:
                continue
            if rx.search("") or pattern in counts:
                continue
            counts[pattern] = sum(1 for t in texts if rx.search(t))
            if sum(1 for t in others if rx.search(t)) * 2 >= counts[pattern]:
                continue
            order.append(pattern)
    first = {p: i for i, p in enumerate(order)}
    return sorted(order, key=lambda p: (-counts[p], first[p]))[:limit]
