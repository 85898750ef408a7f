"""`aidai taxonomy build`: a candidate taxonomy from the incident history, for review (never applied here).

Pass 1 (agent.history.labeling, or agent.history.llm) labels the incidents, verification instructions are
mined from their discussions (agent.history.verification), pass 2 (agent.history.merge) merges the labels into
the base taxonomy and the TSG documents add theirs. The candidate is validated against its own check bindings;
what a person must review (leaves without a check or an evidence rule, manifest bindings to add) is listed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agent.checks.manifest import Manifest, load_manifest
from agent.history import labeling, verification
from agent.history.labeling import Labelled
from agent.history.merge import Merger, MergeResult, Verification, empty_taxonomy, walk
from agent.history.records import HistoryRecord
from agent.taxonomy import Taxonomy, aligned_manifest, manifest_changes, validate_data

Pass1 = Literal["auto", "nearest", "cluster"]


@dataclass
class BuildResult:
    data: dict[str, Any]
    merge: MergeResult
    labelled: list[Labelled]
    verification: dict[str, verification.LeafVerification]
    problems: list[str]  # validation against the candidate's own bindings: must be empty to apply
    manifest_changes: dict[str, dict[str, list[str]]]
    llm: dict[str, Any] = field(default_factory=dict)  # calls and tokens when a model did the passes
    seconds: float = 0.0

    def leaf_labels(self) -> list[str]:
        return [lb for lb, n in walk(self.data) if not n.get("children")]

    def sidecar(self) -> dict[str, Any]:
        """What the reviewer reads next to the candidate: every merge decision and every open question."""
        sources: dict[str, int] = {}
        for item in self.labelled:
            sources[item.source] = sources.get(item.source, 0) + 1
        return {
            "incidents": len(self.labelled), "pass1_sources": sources,
            "pass1": [{"id": i.record.id, "label": i.label, "source": i.source, "score": i.score,
                       "hypothesis": i.hypothesis} for i in self.labelled],
            "events": [e.to_dict() for e in self.merge.events],
            "review": self.merge.review, "problems": self.problems, "manifest_changes": self.manifest_changes,
            "verification": {k: v.to_dict() for k, v in sorted(self.verification.items())},
            "llm": self.llm, "seconds": round(self.seconds, 2),
        }


def library_from(data: dict[str, Any]) -> dict[str, Verification]:
    """Label -> (checks, evidence rules) of every node of a taxonomy: the verification library a build binds."""
    return {label: Verification(list(n.get("checks", [])), list(n.get("evidence", []))) for label, n in walk(data)}


def tsg_labels(kb_root: Path) -> list[tuple[str, str, list[str]]]:
    """(doc, title, labels) of every TSG/KB markdown document with a `nodes:` front matter."""
    from agent.knowledge.kb_index import kb_files, split_doc

    out = []
    for path in kb_files(kb_root):
        passages, _ = split_doc(path.relative_to(kb_root).as_posix(), path.read_text(errors="replace"))
        if passages and passages[0].nodes:
            out.append((passages[0].doc, passages[0].title, list(passages[0].nodes)))
    return out


def pass1_offline(records: list[HistoryRecord], base: dict[str, Any], mode: Pass1 = "auto",
                  use_labels: bool = True) -> list[Labelled]:
    """Record labels first (unless use_labels is off); the rest by nearest leaf of the base; with no base
    leaves (mode auto) by the nearest labelled incident when very similar, else by clusters; mode 'cluster'
    clusters all the rest."""
    done, rest = labeling.from_records(records) if use_labels else ([], list(records))
    base_leaves = Taxonomy(base).leaves() if base.get("children") else []
    if mode == "cluster" or (mode == "auto" and not base_leaves):
        if mode == "auto":
            near, rest = labeling.nearest_incidents(rest, done)
            done += near
        return done + labeling.clusters(rest)
    return done + labeling.nearest_leaves(rest, base_leaves)


def build(records: list[HistoryRecord], base: dict[str, Any] | None = None, *,
          library: dict[str, Verification] | None = None, kb_root: Path | None = None, mode: Pass1 = "auto",
          use_labels: bool = True, labelled: list[Labelled] | None = None, manifest: Manifest | None = None,
          merger_factory: Callable[..., Merger] = Merger) -> BuildResult:
    """Both passes offline (or pass 2 over `labelled`, e.g. from the LLM's pass 1, with the LLM's merger)."""
    start = time.perf_counter()
    manifest = manifest or load_manifest()
    base = base if base is not None else empty_taxonomy()
    if labelled is None:
        labelled = pass1_offline(records, base, mode, use_labels)
    bound = {lb: v.checks for lb, v in (library or {}).items()}
    mined = verification.mine(labelled, manifest, bound)
    merger = merger_factory(base, library, mined)
    result = merger.merge(labelled)
    if kb_root is not None:
        merger.add_tsg_labels(tsg_labels(kb_root))
    data = result.data
    problems = validate_data(data, aligned_manifest(data, manifest)) if data.get("children") else ["empty taxonomy"]
    return BuildResult(data, result, labelled, mined, problems, manifest_changes(data, manifest),
                       seconds=time.perf_counter() - start)


def write(result: BuildResult, out: Path) -> Path:
    """The candidate at `out` and the review notes at OUT.build.json (returned)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result.data, indent=2, ensure_ascii=False) + "\n")
    sidecar = out.with_suffix(".build.json")
    sidecar.write_text(json.dumps(result.sidecar(), indent=1, ensure_ascii=False) + "\n")
    return sidecar
