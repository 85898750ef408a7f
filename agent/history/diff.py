"""`aidai taxonomy diff|apply`: what a candidate taxonomy changes, and installing it once a person approved it."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.history.merge import walk

FIELDS = ("description", "severity", "signatures", "checks", "evidence", "xids", "runbook")


@dataclass
class Change:
    label: str
    kind: str  # added | removed | changed
    fields: dict[str, Any] = field(default_factory=dict)  # field -> {"+": [...], "-": [...]} or {"old", "new"}

    def lines(self) -> list[str]:
        mark = {"added": "+", "removed": "-", "changed": "~"}[self.kind]
        out = [f"{mark} {self.label}"]
        for name, delta in self.fields.items():
            if "old" in delta:
                out.append(f"    {name}: {str(delta['old'])[:100]!r} -> {str(delta['new'])[:100]!r}")
            else:
                out += [f"    {name} + {v}" for v in delta.get("+", [])]
                out += [f"    {name} - {v}" for v in delta.get("-", [])]
        return out


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """Node-by-node changes from `old` to `new`, in the new file's order (removals last)."""
    before = dict(walk(old))
    after = dict(walk(new))
    changes: list[Change] = []
    for label, node in after.items():
        if label not in before:
            changes.append(Change(label, "added", {"description": {"old": "", "new": node.get("description", "")}}))
            continue
        prev = before[label]
        fields: dict[str, Any] = {}
        for name in FIELDS:
            a, b = prev.get(name), node.get(name)
            if a == b or (not a and not b):
                continue
            if isinstance(a, list) or isinstance(b, list):
                fields[name] = {"+": [x for x in (b or []) if x not in (a or [])],
                                "-": [x for x in (a or []) if x not in (b or [])]}
            else:
                fields[name] = {"old": a, "new": b}
        if fields:
            changes.append(Change(label, "changed", fields))
    changes += [Change(label, "removed") for label in before if label not in after]
    return changes


def summary(changes: list[Change]) -> dict[str, int]:
    return {kind: sum(1 for c in changes if c.kind == kind) for kind in ("added", "changed", "removed")}


def write_atomically(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def apply(candidate: dict[str, Any], target: Path) -> Path | None:
    """Install the (validated, approved) candidate at `target`; the previous file is kept at TARGET.bak."""
    backup = None
    if target.exists():
        backup = target.with_suffix(target.suffix + ".bak")
        backup.write_bytes(target.read_bytes())
    write_atomically(target, candidate)
    return backup
