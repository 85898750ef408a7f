"""Problems (AIOpsLab's shape): an incident record, the simulated scenario its faults and noise build, and the
evaluator that scores a prediction against the record's label at three levels (leaf, MAIN.SUB, MAIN).

Also the unseen-incident set-up (AidAI Table 4): a taxonomy with some labels removed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agent.checks.manifest import Manifest
from agent.incident import Incident
from agent.knowledge.incident_db import read_jsonl
from agent.sim.scenario import DEFAULT_VIEW, create_scenario
from agent.taxonomy import Taxonomy

Level = Literal["leaf", "sub", "main"]
LEVELS: tuple[Level, ...] = ("leaf", "sub", "main")
DEFAULT_PROFILE = "H100-SXM-8"


def at_level(label: str | None, level: Level) -> str | None:
    """GPU.MEMORY.UNCORRECTABLE_ECC → itself (leaf), GPU.MEMORY (sub), GPU (main); None stays None."""
    if not label:
        return None
    parts = label.split(".")
    return {"leaf": label, "sub": ".".join(parts[:2]), "main": parts[0]}[level]


@dataclass(frozen=True)
class Problem:
    """One incident under test. `record` is the JSONL object as read (faults keep their parameters)."""

    record: dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.record["id"])

    @property
    def label(self) -> str:
        return str(self.record["label"])

    @property
    def incident(self) -> Incident:
        # a record's time is the ticket's open time: the diagnosis may know it (FAULTS.md, `at`)
        return Incident(text=self.record["description"], environment=self.record.get("environment", "") or "",
                        at=self.record.get("at") or None)

    @property
    def control(self) -> bool:
        """A control (`aidai eval --controls`): the cause's faults were removed, nothing explains the incident."""
        return bool(self.record.get("control"))

    def materialize(self, root: Path) -> list[str]:
        """Build the record's simulated host(s) under `root`; the host specs a method runs checks on."""
        scenario = create_scenario(root, self.record.get("faults", []), self.record.get("noise", []),
                                   self.record.get("profile") or DEFAULT_PROFILE, self.record.get("hosts") or None,
                                   self.record.get("view") or DEFAULT_VIEW, self.record.get("at") or None,
                                   self.record.get("latent") or [])
        return [f"sim:{scenario.root}"]

    def scenario_fields(self) -> dict[str, Any]:
        """What a row carries so `aidai sim create DIR --record rows.jsonl --id ID` re-creates this scenario (the
        record's own fields, drawn or not), and the confound facts the metrics split by."""
        r = self.record
        hosts = list(r.get("hosts") or ["node-1"])
        return {"faults": r.get("faults", []), "noise": r.get("noise", []), "latent": r.get("latent") or [],
                "view": r.get("view") or DEFAULT_VIEW, "hosts": hosts, "at": r.get("at"),
                "profile": r.get("profile") or DEFAULT_PROFILE, "nodes": len(hosts), "control": self.control,
                "confound_seed": r.get("confound_seed")}

    def evaluate(self, predicted: str | None) -> dict[str, bool]:
        """The evaluator: is the prediction right at each level (no prediction is right at none). A control is
        right only with no prediction: its cause was removed, so any leaf named is a false confirmation."""
        if self.control:
            return {f"{level}_ok": predicted is None for level in LEVELS}
        return {f"{level}_ok": predicted is not None and at_level(predicted, level) == at_level(self.label, level)
                for level in LEVELS}


class RecordsError(ValueError):
    """The incident file cannot be used; the message lists every bad line."""


def load_problems(path: str | Path) -> list[Problem]:
    """Every record of an incident JSONL file (the history format: id, description, label, faults, ...), kept as
    read: fault parameters and a record's `profile` go to the simulator untouched."""
    good, rejected = read_jsonl(path)  # FileNotFoundError with the reason when unreadable
    if rejected:
        bad = [f"line {r.line}: {r.reason}" for r in rejected]
        raise RecordsError(f"{path}: {len(bad)} bad record(s):\n  " + "\n  ".join(bad[:20]))
    if not good:
        raise RecordsError(f"{path}: no incident records")
    lines = Path(path).read_bytes().splitlines()
    return [Problem(json.loads(lines[number - 1].decode("utf-8-sig"))) for number, _ in good]


# ---- unseen incidents -------------------------------------------------------------------------------------
def remove_labels(taxonomy: Taxonomy, labels: Iterable[str]) -> tuple[Taxonomy, list[str]]:
    """The taxonomy without `labels` (and their subtrees). A node left with no children is removed too (the
    schema wants a non-empty children list, and an internal node has no evidence rules to become a leaf), up to
    the MAIN category. The manifest's node lists drop the removed labels, so the result validates.
    Returns the new taxonomy and every removed label (leaves and internal nodes)."""
    data = taxonomy.to_dict()
    removed: list[str] = []
    for label in labels:
        node = taxonomy.node(label)  # KeyError with suggestions when unknown
        if node is taxonomy.root:
            raise KeyError("cannot remove ROOT")
        if label in removed:
            continue
        parts = node.label.split(".")
        while parts:
            parent = _find(data, parts[:-1])
            if parent is None:  # already gone with an ancestor
                break
            child = next((c for c in parent["children"] if c["name"] == parts[-1]), None)
            if child is None:
                break
            parent["children"].remove(child)
            prefix = ".".join(parts)
            removed += [prefix] + [lb for lb in _labels(child, prefix) if lb not in removed]
            if parent["children"] or len(parts) == 1:
                break
            del parent["children"]
            parts = parts[:-1]  # the parent is now childless: remove it as well
    if not data.get("children"):
        raise ValueError("removing these labels leaves an empty taxonomy")
    gone = set(removed)
    manifest = Manifest(checks=[spec.model_copy(update={"nodes": [n for n in spec.nodes if n not in gone]})
                                for spec in taxonomy.manifest.checks])
    return Taxonomy.from_dict(data, manifest), list(dict.fromkeys(removed))


def _find(data: dict[str, Any], names: list[str]) -> dict[str, Any] | None:
    node: dict[str, Any] | None = data
    for name in names:
        node = next((c for c in (node or {}).get("children", []) if c["name"] == name), None)
        if node is None:
            return None
    return node


def _labels(node: dict[str, Any], prefix: str) -> list[str]:
    out = []
    for child in node.get("children", []):
        label = f"{prefix}.{child['name']}"
        out += [label, *_labels(child, label)]
    return out

