"""Taxonomy look-ups for the MCP tool `search_taxonomy`: describe one node, or find the nodes a text points to.

A node's log signatures found in the text are the strong evidence (the same regexes pre-triage and the reasoner
use); word overlap with the node's name and description only ranks what is left, and says so.
"""

from __future__ import annotations

import re
from typing import Any

from agent.taxonomy import TaxNode, load_taxonomy

WORD = re.compile(r"[a-z][a-z0-9]{2,}")
STOP = {"the", "and", "for", "with", "was", "are", "not", "but", "this", "that", "from", "after", "when", "our",
        "job", "error", "failed", "failure"}


def _brief(node: TaxNode) -> dict[str, Any]:
    return {"label": node.label, "description": node.description, "severity": node.severity, "leaf": node.is_leaf}


def describe(label: str) -> dict[str, Any]:
    """One node in full; KeyError (with close labels) for an unknown one."""
    taxonomy = load_taxonomy()
    node = taxonomy.node(label)
    parent = node.parent.label if node.parent is not None and node.parent is not taxonomy.root else None
    return {**_brief(node), "checks": list(node.checks), "runbook": node.runbook, "xids": list(node.xids),
            "signatures": list(node.signatures), "parent": parent,
            "children": [_brief(child) for child in node.children]}


def _words(text: str) -> set[str]:
    return {w for w in WORD.findall(text.lower().replace("_", " ")) if w not in STOP}


def search(text: str, k: int) -> list[dict[str, Any]]:
    """Nodes whose signatures occur in `text` (leaves before branches), then nodes sharing its words."""
    taxonomy = load_taxonomy()
    nodes = [taxonomy.node(label) for label in taxonomy.labels()]
    by_signature = [(node, found) for node in nodes if (found := node.matching_signatures(text))]
    by_signature.sort(key=lambda pair: (not pair[0].is_leaf, -len(pair[1]), pair[0].label))
    out = [{**_brief(node), "matched": "signature", "signatures": found} for node, found in by_signature]
    seen = {node.label for node, _ in by_signature}
    asked = _words(text)
    scored = []
    for node in nodes:
        if node.label in seen:
            continue
        shared = asked & _words(f"{node.label.replace('.', ' ')} {node.description}")
        if shared:
            scored.append((len(shared), node, shared))
    scored.sort(key=lambda item: (-item[0], not item[1].is_leaf, item[1].label))
    out += [{**_brief(node), "matched": "words", "words": sorted(shared)} for _, node, shared in scored]
    return out[:k]
