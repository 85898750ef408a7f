"""Version arithmetic the product shares: version keys and the known-bad version table
(verification_scripts/known_bad.yaml) as preflight and the simulator read it."""

from __future__ import annotations

import re
from typing import Any


def vkey(text: str) -> tuple[int, ...]:
    """(535, 161, 8) for '535.161.08'; local suffixes ('+cu121', '-1') are dropped."""
    core = re.split(r"[+\s~-]", str(text).strip().lstrip("vV"), maxsplit=1)[0]
    parts = []
    for piece in core.split("."):
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group(0)))
    return tuple(parts)


def pattern_matches(pattern: str, version: str) -> bool:
    """known_bad.yaml patterns: exact ('2.20.5'), minor ('2.20.*') or driver branch ('525')."""
    have = vkey(version)
    if not have:
        return False
    if pattern.endswith(".*"):
        prefix = vkey(pattern[:-2])
        return have[:len(prefix)] == prefix
    if "." not in pattern:
        return have[:1] == vkey(pattern)
    return have == vkey(pattern)


def known_bad_entry(kind: str, version: str, table: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The known_bad.yaml entry that lists `version` under `kind`, honouring fixed_in; None if not listed."""
    if table is None:
        from agent.checks.manifest import load_known_bad

        table = load_known_bad()
    for entry in table.get(kind) or []:
        if entry.get("fixed_in") and vkey(version) >= vkey(str(entry["fixed_in"])):
            continue
        if any(pattern_matches(str(p), version) for p in entry.get("versions") or []):
            return entry
    return None
