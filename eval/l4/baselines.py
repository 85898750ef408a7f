"""The node-ranking baselines of L4 §6.1 (Error_time: earliest error log first; Error_count: most error logs first)
and an error-level event baseline, read straight from the raw files."""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict

from agent.l4.reader import LogError, discover, read_bytes

ERROR = re.compile(r"\b(ERROR|Error|error|WARN|FATAL|Traceback|terminate called)\b|\[E\d{4} |^E\d{4} |\bXid\b")
ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ _](\d\d):(\d\d):(\d\d)(?:[,.](\d+))?")
GLOG = re.compile(r"\b[EWI](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+)")


def _time(line: str) -> float | None:
    m = ISO.search(line)
    if m:
        y, mo, d, h, mi, s, frac = m.groups()
        base = dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s)).timestamp()
        return base + (float("0." + frac) if frac else 0.0)
    m = GLOG.search(line)
    if m:
        mo, d, h, mi, s, frac = m.groups()
        return dt.datetime(2025, int(mo), int(d), int(h), int(mi), int(s)).timestamp() + float("0." + frac)
    return None


def error_baselines(logs: str) -> tuple[list[str], list[str], list[str]]:
    """(Error_time ranking, Error_count ranking, error lines' example texts). Lines without a timestamp take the
    last one seen in their file (NCCL and kernel lines carry none by default)."""
    first: dict[str, float] = {}
    count: dict[str, int] = defaultdict(int)
    errors: list[str] = []
    for log in discover(logs):
        try:
            text = read_bytes(log.path).decode("utf-8", "replace")
        except LogError:
            continue
        last = 0.0
        for line in text.splitlines():
            t = _time(line)
            if t is not None:
                last = t
            if ERROR.search(line):
                count[log.node] += 1
                first[log.node] = min(first.get(log.node, float("inf")), last)
                errors.append(line)
    by_time = sorted(first, key=lambda n: (first[n], n))
    by_count = sorted(count, key=lambda n: (-count[n], n))
    return by_time, by_count, errors
