"""The incident taxonomy (taxonomy/taxonomy.json): an anytree of nodes with signatures, checks and runbooks.

A node's label is its dotted path below ROOT (e.g. GPU.MEMORY.UNCORRECTABLE_ECC); leaves are root-cause labels.
taxonomy/schema.json documents the file format; the same rules are enforced here with pydantic (so jsonschema
is not a dependency), plus the cross-file rules: checks exist in the manifest and agree with its `nodes` lists.
"""

from __future__ import annotations

import copy
import difflib
import graphlib
import itertools
import json
import re
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from anytree import NodeMixin, PreOrderIter
from anytree.importer import DictImporter
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from agent.checks.manifest import Manifest, load_manifest
from agent.paths import TAXONOMY_DIR
from agent.reasoning.symptoms import Symptom

TAXONOMY_PATH = TAXONOMY_DIR / "taxonomy.json"
Severity = Literal["critical", "high", "medium", "low"]
SEVERITIES: tuple[str, ...] = get_args(Severity)
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class TaxonomyError(ValueError):
    """The taxonomy file is missing, unreadable or breaks the schema/rules; `problems` lists why."""

    def __init__(self, message: str, problems: list[str] | None = None):
        self.problems = problems or []
        super().__init__(message + "".join(f"\n  - {p}" for p in self.problems))


class NodeSpec(BaseModel):
    """One node below ROOT, as stored in the JSON (mirrors $defs/node in schema.json)."""

    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, StringConstraints(pattern=r"^[A-Z][A-Z0-9_]*$")]
    description: Text
    severity: Severity
    signatures: list[Text]
    checks: list[Text]
    runbook: Text
    xids: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list)
    # leaves only: `check:finding_regex` rules saying which check findings confirm the leaf
    evidence: list[Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*:\S*$")]] = Field(default_factory=list)
    # leaves only: rules of the same form for findings that say a check saw the state but cannot judge it (a version
    # its known-bad list does not name): such a finding leaves the leaf open rather than rejecting it
    undecided: list[Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*:\S*$")]] = Field(default_factory=list)
    # leaves only: rules of the same form for INFO findings that say a check could not see what this leaf needs while
    # it decided its other leaves (the container toolkit's version from inside a container): the leaf stays unknown
    unseen: list[Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*:\S*$")]] = Field(default_factory=list)
    # leaves only: how the cause shows in a customer's report (agent/reasoning/symptoms.py)
    symptoms: list[Symptom] = Field(default_factory=list)
    # leaves only: the leaves that follow from this cause wherever it is (a node without NVIDIA packages has no
    # container runtime configured): found together, they are one failure and this leaf its cause
    implies: list[Text] = Field(default_factory=list)
    # leaves only: the cause breaks only traffic between hosts (GPUDirect RDMA, the IB/RoCE fabric, versions that
    # differ across nodes): a job on one host never uses that path, so it cannot be that job's cause
    between_hosts: bool = False
    children: list[NodeSpec] = Field(default_factory=list, min_length=1)


class RootSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Literal["ROOT"]
    description: Text
    version: int = 1
    children: list[NodeSpec] = Field(min_length=1)


class TaxNode(NodeMixin):
    """A taxonomy node; DictImporter passes the JSON keys as keyword arguments."""

    def __init__(self, name: str, description: str = "", severity: str = "medium",
                 signatures: list[str] | None = None, checks: list[str] | None = None, runbook: str = "",
                 xids: list[int] | None = None, evidence: list[str] | None = None, symptoms: list[str] | None = None,
                 undecided: list[str] | None = None, unseen: list[str] | None = None, implies: list[str] | None = None,
                 between_hosts: bool = False, parent: TaxNode | None = None, **extra: Any):
        self.name = name
        self.description = description
        self.severity = severity
        self.signatures: list[str] = list(signatures or [])
        self.checks: list[str] = list(checks or [])
        self.runbook = runbook
        self.xids: list[int] = list(xids or [])
        self.evidence: list[str] = list(evidence or [])
        self.undecided: list[str] = list(undecided or [])
        self.unseen: list[str] = list(unseen or [])
        self.symptoms: list[str] = list(symptoms or [])
        self.implies: list[str] = list(implies or [])
        self.between_hosts = between_hosts
        self.extra = extra
        self.parent = parent

    @property
    def label(self) -> str:
        return ".".join(n.name for n in self.path[1:])

    @cached_property
    def patterns(self) -> list[re.Pattern[str]]:
        return [re.compile(s, re.IGNORECASE) for s in self.signatures]

    def matching_signatures(self, text: str) -> list[str]:
        """The signatures of this node that occur in `text` (searched line by line, case-insensitively)."""
        lines = text.splitlines() or [text]
        return [p.pattern for p in self.patterns if any(p.search(line) for line in lines)]

    def __repr__(self) -> str:
        return f"TaxNode({self.label or 'ROOT'!r})"


def _where(data: Any, loc: tuple[Any, ...]) -> str:
    """Turn a pydantic error location (children, 0, children, 2, field) into 'GPU.MEMORY: field'."""
    names: list[str] = []
    node, rest = data, list(loc)
    while len(rest) >= 2 and rest[0] == "children" and isinstance(rest[1], int):
        try:
            node = node["children"][rest[1]]
            names.append(str(node["name"]))
        except (KeyError, IndexError, TypeError):
            names.append(f"#{rest[1]}")
        rest = rest[2:]
    return f"{'.'.join(names) or 'ROOT'}: {'.'.join(map(str, rest)) or 'node'}"


def _rule_problems(data: dict[str, Any], manifest: Manifest) -> list[str]:
    problems: list[str] = []
    known = set(manifest.ids())
    labels: dict[str, dict[str, Any]] = {}

    def walk(node: dict[str, Any], label: str) -> set[str]:
        names = [c["name"] for c in node.get("children", [])]
        for dup in sorted({n for n in names if names.count(n) > 1}):
            problems.append(f"{label or 'ROOT'}: duplicate child name {dup!r}")
        reachable: set[str] = set(node.get("checks", []))
        for child in node.get("children", []):
            child_label = f"{label}.{child['name']}" if label else child["name"]
            labels[child_label] = child
            reachable |= walk(child, child_label)
        if not label:
            return reachable
        for sig in node.get("signatures", []):
            try:
                if re.compile(sig, re.IGNORECASE).search(""):
                    problems.append(f"{label}: signature {sig!r} matches the empty string")
            except re.error as exc:
                problems.append(f"{label}: signature {sig!r} is not a valid regex ({exc})")
        for check in node.get("checks", []):
            if check not in known:
                problems.append(f"{label}: check {check!r} is not in the manifest")
        for key in ("checks", "xids", "symptoms", "implies"):
            if len(set(node.get(key, []))) != len(node.get(key, [])):
                problems.append(f"{label}: duplicate entries in {key}")
        if not reachable:
            problems.append(f"{label}: no check reachable (none on the node or any descendant)")
        if node.get("evidence") and node.get("children"):
            problems.append(f"{label}: evidence rules belong on leaves only")
        if node.get("symptoms") and node.get("children"):
            problems.append(f"{label}: symptoms belong on leaves only")
        for key in ("undecided", "unseen"):
            if node.get(key) and node.get("children"):
                problems.append(f"{label}: {key} rules belong on leaves only")
        for key in ("implies", "between_hosts"):
            if node.get(key) and node.get("children"):
                problems.append(f"{label}: {key} belongs on leaves only")
        for rule in [*node.get("evidence", []), *node.get("undecided", []), *node.get("unseen", [])]:
            check, _, pattern = rule.partition(":")
            if check not in node.get("checks", []):
                problems.append(f"{label}: evidence rule {rule!r} names a check the leaf does not list")
            try:
                re.compile(pattern)
            except re.error as exc:
                problems.append(f"{label}: evidence rule {rule!r} is not a valid regex ({exc})")
        if not node.get("children") and node.get("checks") and not node.get("evidence"):
            problems.append(f"{label}: a leaf needs evidence rules (which findings confirm it)")
        return reachable

    walk(data, "")
    problems += _implies_problems({label: node.get("implies", []) for label, node in labels.items()
                                   if not node.get("children")})
    for spec in manifest.checks:
        for label in spec.nodes:
            if label not in labels:
                problems.append(f"manifest: check {spec.id!r} names unknown taxonomy node {label!r}")
            elif spec.id not in labels[label].get("checks", []):
                problems.append(f"{label}: manifest says {spec.id!r} verifies it, but the node does not list it")
    for label, node in labels.items():
        for check in node.get("checks", []):
            if check in known and label not in manifest.get(check).nodes:
                problems.append(f"{label}: lists {check!r}, but the manifest's nodes for {check!r} omit it")
    return problems


def _implies_problems(implies: dict[str, list[str]]) -> list[str]:
    """`implies` names other leaves, and never leads back to where it started (a cause cannot follow from what
    follows from it)."""
    problems = [f"{label}: implies {other!r}, which is not a leaf" for label, others in implies.items()
                for other in others if other not in implies]
    try:
        graphlib.TopologicalSorter({label: [o for o in others if o in implies]
                                    for label, others in implies.items()}).prepare()
    except graphlib.CycleError as exc:
        cycle = exc.args[1]  # each node a predecessor of the next: the next one implies it
        problems += [f"{cause}: implies itself" if cause == implied else
                     f"{cause}: implies {implied!r}, which leads back to it"
                     for implied, cause in itertools.pairwise(cycle)]
    return problems


def validate_data(data: Any, manifest: Manifest | None = None) -> list[str]:
    """Every problem with a taxonomy dict: schema first; the rules run only on schema-valid data."""
    try:
        RootSpec.model_validate(data)
    except ValidationError as exc:
        return [f"{_where(data, tuple(e['loc']))}: {e['msg']}" for e in exc.errors()]
    return _rule_problems(data, manifest if manifest is not None else load_manifest())


def read_taxonomy_file(path: Path | None = None) -> dict[str, Any]:
    path = Path(path) if path is not None else TAXONOMY_PATH
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TaxonomyError(f"cannot read taxonomy {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise TaxonomyError(f"taxonomy {path} must hold a JSON object")
    return data


class Taxonomy:
    """The loaded tree plus lookups by label. Build with load_taxonomy() or Taxonomy.from_dict()."""

    def __init__(self, data: dict[str, Any], manifest: Manifest | None = None):
        self.manifest = manifest if manifest is not None else load_manifest()
        self.data = data
        self.root: TaxNode = DictImporter(nodecls=TaxNode).import_(copy.deepcopy(data))
        self._by_label: dict[str, TaxNode] = {n.label: n for n in PreOrderIter(self.root) if n is not self.root}

    @classmethod
    def from_dict(cls, data: dict[str, Any], manifest: Manifest | None = None) -> Taxonomy:
        """Validate, then build; raises TaxonomyError listing every problem."""
        problems = validate_data(data, manifest)
        if problems:
            raise TaxonomyError(f"taxonomy is invalid ({len(problems)} problems)", problems)
        return cls(data, manifest)

    def node(self, label: str) -> TaxNode:
        if label in ("", "ROOT"):
            return self.root
        if label in self._by_label:
            return self._by_label[label]
        key = label.strip().upper()
        suggestions = [lb for lb in self._by_label if lb == key or lb.endswith("." + key)]
        suggestions += difflib.get_close_matches(key, list(self._by_label), n=3, cutoff=0.6)
        hint = ", ".join(dict.fromkeys(suggestions)) or "none close; run `aidai taxonomy show` to list them"
        raise KeyError(f"unknown taxonomy node {label!r}; did you mean: {hint}")

    def label(self, node: TaxNode) -> str:
        return node.label

    def labels(self, leaves_only: bool = False) -> list[str]:
        return [lb for lb, n in self._by_label.items() if n.is_leaf or not leaves_only]

    def leaves(self, label: str = "") -> list[TaxNode]:
        return [n for n in PreOrderIter(self.node(label)) if n.is_leaf and n is not self.root]

    def children(self, label: str = "") -> list[TaxNode]:
        return list(self.node(label).children)

    def checks_for(self, label: str, include_descendants: bool = False) -> list[str]:
        """Check ids of the node (and, optionally, its descendants), in first-seen order, without duplicates."""
        nodes = PreOrderIter(self.node(label)) if include_descendants else [self.node(label)]
        return list(dict.fromkeys(c for n in nodes for c in n.checks))

    def signatures_for(self, label: str, include_descendants: bool = False) -> list[str]:
        """Signature regexes of the node (and, optionally, its descendants: a planner deciding whether to
        descend should weigh every leaf below, since internal nodes carry only broad markers)."""
        nodes = PreOrderIter(self.node(label)) if include_descendants else [self.node(label)]
        return list(dict.fromkeys(s for n in nodes for s in n.signatures))

    def xid_map(self) -> dict[int, list[str]]:
        """Xid code -> labels of the leaves it points to."""
        out: dict[int, list[str]] = {}
        for leaf in self.leaves():
            for xid in leaf.xids:
                out.setdefault(xid, []).append(leaf.label)
        return out

    def to_dict(self, label: str = "") -> dict[str, Any]:
        """The subtree below (and including) `label` as stored in the JSON."""
        node = self.node(label)
        if node is self.root:
            return copy.deepcopy(self.data)
        raw: dict[str, Any] = self.data
        for name in label.split("."):
            raw = next(c for c in raw["children"] if c["name"] == name)
        return copy.deepcopy(raw)

    def validate(self) -> list[str]:
        return validate_data(self.data, self.manifest)

    def __len__(self) -> int:
        return len(self._by_label)


@lru_cache(maxsize=4)
def load_taxonomy(path: Path | None = None) -> Taxonomy:
    """The shipped (or given) taxonomy, validated against the schema, the rules and the manifest; cached."""
    return Taxonomy.from_dict(read_taxonomy_file(path))


def aligned_manifest(data: dict[str, Any], manifest: Manifest | None = None) -> Manifest:
    """The manifest with each check's `nodes` rewritten to the labels that list it in `data`: a candidate taxonomy
    (built from history, not yet applied) is validated and used against its own bindings."""
    manifest = manifest if manifest is not None else load_manifest()
    listed: dict[str, list[str]] = {}

    def walk(node: dict[str, Any], label: str) -> None:
        for child in node.get("children", []):
            child_label = f"{label}.{child['name']}" if label else child["name"]
            for check in child.get("checks", []):
                listed.setdefault(check, []).append(child_label)
            walk(child, child_label)

    walk(data, "")
    return Manifest(checks=[spec.model_copy(update={"nodes": listed.get(spec.id, [])}) for spec in manifest.checks])


def manifest_changes(data: dict[str, Any], manifest: Manifest | None = None) -> dict[str, dict[str, list[str]]]:
    """Per check, the `nodes` the manifest must gain and lose to agree with `data` (empty when it agrees)."""
    manifest = manifest if manifest is not None else load_manifest()
    aligned = aligned_manifest(data, manifest)
    out: dict[str, dict[str, list[str]]] = {}
    for spec, new in zip(manifest.checks, aligned.checks, strict=True):
        add = [n for n in new.nodes if n not in spec.nodes]
        drop = [n for n in spec.nodes if n not in new.nodes]
        if add or drop:
            out[spec.id] = {"add": add, "remove": drop}
    return out


def load_candidate(path: Path) -> Taxonomy:
    """A taxonomy file that is not the shipped one (e.g. built from history), validated against the schema, the
    rules and its own check bindings (`aligned_manifest`); raises TaxonomyError listing every problem."""
    data = read_taxonomy_file(path)
    return Taxonomy.from_dict(data, aligned_manifest(data))
