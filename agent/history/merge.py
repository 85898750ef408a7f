"""Taxonomy construction, pass 2 (AidAI §4.1, Fig. 5): merge pass 1's labels into a taxonomy.

For each pass-1 label: an existing node matches it → the node is refined (signatures mined from the incidents it
did not already match are added); a near-duplicate of an existing or an earlier new label (same main category,
same words in another order, or a similar name *and* similar incidents by embedding) → merged into that one;
otherwise a new node is added with a description, signatures and runbook from its incidents. TSG documents then
add the labels they are about. Verification comes from `library` (checks and evidence rules of a label in the
verification library: the shipped taxonomy + manifest bindings) or from the commands mined from the OCE
discussions; a leaf with neither is reported for review. The result is a new dict; the base is not touched.
"""

from __future__ import annotations

import copy
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from agent.history.labeling import MAIN_CATEGORIES, Labelled, embed_texts, first_sentence, humanize, incident_text
from agent.history.signatures import mine_signatures
from agent.history.verification import LeafVerification

EventKind = Literal["matched", "merged", "added", "tsg-added"]
NAME_SIM = 0.9  # similarity of the humanised label names ...
CONTENT_SIM = 0.7  # ... and of the incidents, for a near-duplicate


@dataclass
class MergeEvent:
    kind: EventKind
    label: str  # the label pass 1 produced (or the TSG named)
    into: str  # the taxonomy label it ended up as
    incidents: list[str] = field(default_factory=list)
    similarity: float | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, "", [])}


@dataclass
class Verification:
    checks: list[str]
    evidence: list[str] = field(default_factory=list)


@dataclass
class MergeResult:
    data: dict[str, Any]
    events: list[MergeEvent] = field(default_factory=list)
    review: list[str] = field(default_factory=list)  # what a person must look at before applying

    def count(self, kind: str) -> int:
        return sum(1 for e in self.events if e.kind == kind)


def empty_taxonomy() -> dict[str, Any]:
    return {"name": "ROOT", "description": "Incident taxonomy built from the incident history.", "version": 1,
            "children": []}


def find(data: dict[str, Any], label: str) -> dict[str, Any] | None:
    node: dict[str, Any] | None = data
    for name in label.split("."):
        node = next((c for c in (node or {}).get("children", []) if c["name"] == name), None)
        if node is None:
            return None
    return node


def walk(data: dict[str, Any], prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    for child in data.get("children", []):
        label = f"{prefix}.{child['name']}" if prefix else child["name"]
        out.append((label, child))
        out += walk(child, label)
    return out


def leaves(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {label: node for label, node in walk(data) if not node.get("children")}


def _tokens(label: str) -> frozenset[str]:
    """The words of SUB.DETAIL (GPU.MEMORY.ECC_UNCORRECTABLE and GPU.MEMORY.UNCORRECTABLE_ECC are one label)."""
    return frozenset(w for part in label.split(".")[1:] for w in part.split("_"))


def _node(name: str, description: str, severity: str) -> dict[str, Any]:
    return {"name": name, "description": description, "severity": severity, "signatures": [], "checks": [],
            "runbook": "Created from the incident history: review, then follow the runbooks of the leaves below."}


def _ensure(data: dict[str, Any], label: str, leaf: dict[str, Any]) -> None:
    """Insert `leaf` at `label`, creating the missing main/sub categories on the way."""
    node = data
    parts = label.split(".")
    for depth, name in enumerate(parts[:-1], start=1):
        child = next((c for c in node.setdefault("children", []) if c["name"] == name), None)
        if child is None:
            severity = node.get("severity", "medium") if node is not data else "medium"
            text = MAIN_CATEGORIES.get(name) if depth == 1 else None
            child = _node(name, text or f"{humanize('.'.join(parts[:depth])).capitalize()}: a category created "
                                        "from the incident history.", severity)
            node["children"].append(child)
        node = child
    node.setdefault("children", []).append(leaf)


class Merger:
    """Pass 2 over one taxonomy dict (a deep copy of `base`)."""

    def __init__(self, base: dict[str, Any], library: dict[str, Verification] | None = None,
                 mined: dict[str, LeafVerification] | None = None):
        self.result = MergeResult(copy.deepcopy(base))
        self.library = library or {}
        self.mined = mined or {}
        self._content: dict[str, np.ndarray] = {}  # label -> unit vector of its incidents / description
        self._names: dict[str, np.ndarray] = {}  # label -> unit vector of its humanised name
        self._groups: dict[str, list[Labelled]] = {}

    def _prepare(self, groups: dict[str, list[Labelled]]) -> None:
        """Embed everything pass 2 compares in three batched calls: incident centroids per label, the humanised
        names of every label, the descriptions of the base's leaves."""
        items = [i for group in groups.values() for i in group]
        vectors = embed_texts([incident_text(i.record) for i in items])
        start = 0
        for label, group in groups.items():
            vec = vectors[start:start + len(group)].mean(axis=0)
            start += len(group)
            self._content[label] = vec / (np.linalg.norm(vec) or 1.0)
        # only labels the taxonomy lacks are compared, and only with leaves of their own main category
        missing = [lb for lb in groups if find(self.result.data, lb) is None]
        mains = {lb.split(".", 1)[0] for lb in missing}
        base = {lb: n for lb, n in leaves(self.result.data).items() if lb.split(".", 1)[0] in mains}
        names = list(dict.fromkeys([*missing, *base]))
        self._names = dict(zip(names, embed_texts([humanize(n) for n in names]), strict=True))
        todo = [lb for lb in base if lb not in self._content]
        if todo:
            texts = [f"{humanize(lb)}. {base[lb]['description']}" for lb in todo]
            self._content.update(zip(todo, embed_texts(texts), strict=True))

    def near_duplicate(self, label: str) -> tuple[str, float] | None:
        """An existing leaf of the same main category that `label` duplicates, with the content similarity:
        the same words in SUB.DETAIL, or a similar name and similar incidents."""
        main = label.split(".", 1)[0]
        same_main = [lb for lb in leaves(self.result.data) if lb.split(".", 1)[0] == main]
        for other in same_main:
            if _tokens(other) == _tokens(label):
                return other, 1.0
        best: tuple[str, float] | None = None
        for other in same_main:
            if float(self._names[other] @ self._names[label]) < NAME_SIM:
                continue
            content = float(self._content[other] @ self._content[label])
            if content >= CONTENT_SIM and (best is None or content > best[1]):
                best = (other, round(content, 4))
        return best

    def _verification(self, label: str) -> Verification | None:
        if label in self.library:
            return self.library[label]
        mined = self.mined.get(label)
        if mined and mined.mapped:
            return Verification(checks=list(mined.mapped))
        return None

    def _symptoms(self, items: list[Labelled]) -> list[str]:
        return ["\n".join((i.record.description, i.record.environment)) for i in items]

    def _others(self, label: str) -> list[str]:
        return [t for lb, group in self._groups.items() if lb != label for t in self._symptoms(group)]

    def _new_leaf(self, label: str, items: list[Labelled]) -> dict[str, Any]:
        hypotheses = Counter(i.hypothesis for i in items)
        resolutions = [first_sentence(i.record.resolution, 400) for i in items if i.record.resolution.strip()]
        detail = humanize(label.rsplit(".", 1)[-1])
        description = (f"{detail.capitalize()} ({len(items)} past incident(s)). Typical report: "
                       f"{items[0].description} Resolved as: {hypotheses.most_common(1)[0][0]}")
        leaf = {"name": label.rsplit(".", 1)[-1], "description": description, "severity": "medium",
                "signatures": mine_signatures(self._symptoms(items), others=self._others(label)),
                "checks": [], "runbook": resolutions[0] if resolutions else "No resolution recorded: review."}
        found = self._verification(label)
        if found:
            leaf["checks"] = list(found.checks)
            if found.evidence:
                leaf["evidence"] = list(found.evidence)
            elif found.checks:
                self.result.review.append(f"{label}: checks {', '.join(found.checks)} mapped from the OCE "
                                          "commands, but no evidence rule says which findings confirm it: write one")
        else:
            self.result.review.append(f"{label}: no check verifies it (none bound, no command mined): add one")
        return leaf

    def refine(self, label: str, node: dict[str, Any], items: list[Labelled]) -> None:
        """A matched node's description, refined from its new incidents: offline it stays as written (a model
        rewrites it in agent.history.llm); the mined signatures are the offline refinement."""

    def _bind_internal(self) -> None:
        """Checks the library binds to internal nodes (e.g. a category-wide check) go on the built ones too."""
        for label, node in walk(self.result.data):
            if node.get("children") and not node.get("checks") and label in self.library:
                node["checks"] = list(self.library[label].checks)

    def merge(self, labelled: list[Labelled]) -> MergeResult:
        groups: dict[str, list[Labelled]] = {}
        for item in labelled:
            groups.setdefault(item.label, []).append(item)
        self._groups = groups
        self._prepare(groups)
        for label, items in groups.items():
            ids = [i.record.id for i in items]
            node = find(self.result.data, label)
            if node is not None:
                added = mine_signatures(self._symptoms(items), node.get("signatures", []), 2, self._others(label))
                node["signatures"] = list(node.get("signatures", [])) + added
                self.refine(label, node, items)
                self.result.events.append(MergeEvent("matched", label, label, ids,
                                                     note=f"+{len(added)} signature(s)" if added else ""))
                continue
            dup = self.near_duplicate(label)
            if dup:
                self.result.events.append(MergeEvent("merged", label, dup[0], ids, dup[1]))
                for item in items:
                    item.label = dup[0]
                continue
            _ensure(self.result.data, label, self._new_leaf(label, items))
            self.result.events.append(MergeEvent("added", label, label, ids))
        self._bind_internal()
        return self.result

    def add_tsg_labels(self, docs: list[tuple[str, str, list[str]]]) -> None:
        """(doc path, title, labels) per TSG document: labels the taxonomy lacks are added for review."""
        for doc, title, labels in docs:
            for label in labels:
                if not re.fullmatch(r"[A-Z][A-Z0-9_]*(\.[A-Z][A-Z0-9_]*){2}", label):
                    continue  # a TSG about a whole category names no new root cause
                if find(self.result.data, label) is not None:
                    continue
                leaf = {"name": label.rsplit(".", 1)[-1],
                        "description": f"{humanize(label.rsplit('.', 1)[-1]).capitalize()}, from the TSG "
                                       f"{title!r} ({doc}).",
                        "severity": "medium", "signatures": [], "checks": [], "runbook": f"Follow the TSG {doc}."}
                found = self._verification(label)
                if found:
                    leaf["checks"] = list(found.checks)
                    if found.evidence:
                        leaf["evidence"] = list(found.evidence)
                else:
                    self.result.review.append(f"{label}: from TSG {doc}, no check verifies it: add one")
                _ensure(self.result.data, label, leaf)
                self.result.events.append(MergeEvent("tsg-added", label, label, note=doc))
        self._bind_internal()
