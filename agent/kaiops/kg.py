"""Knowledge-graph RCA (KAIOPS §III-C): a NetworkX graph FaultCategory <-BELONGS_TO- Symptom -CAUSED_BY->
RootCause -RESOLVED_BY-> Solution, with Term nodes RELATED_TO symptoms and root causes, built from knowledge/:
each seed incident is a symptom of its taxonomy leaf (the root cause), its resolution a solution; each leaf's
runbook and the "Remediation" bullets of the KB documents naming the leaf are further solutions.

Retrieval for a classified job: its failure-looking log lines (error, Xid, timeout, ...; else the last three) are
the query; hybrid scores (mean of keyword overlap and embedding cosine) over the symptoms of the predicted
category's subgraph; then a structure-aware rerank of their root causes, S = α·semantic + (1−α)·structure, with
semantic scaled to the best candidate's and structure = mean of max-scaled degree and betweenness centrality in
that subgraph; the top root cause's solutions.
(The paper's LLM report-writing stage is left to the agents.)"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import networkx as nx
import numpy as np

from agent.paths import KNOWLEDGE_DIR

CATEGORIES = ("Software", "Performance", "Network", "Hardware")
# taxonomy label prefix -> KAIOPS categories, first match wins; OOM and dataloader stalls show up as both
# Software and Performance (KAIOPS Table VII files a gradual GPU OOM under Performance)
CATEGORY_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GPU.PERFORMANCE", ("Performance",)), ("GPU.THERMAL", ("Performance", "Hardware")),
    ("GPU.POWER", ("Performance", "Hardware")), ("GPU.", ("Hardware",)),
    ("INTERCONNECT_NETWORKING.NVLINK.LINK_HARDWARE_FAULT", ("Hardware",)),
    ("INTERCONNECT_NETWORKING.PCIE.RISER_OR_SLOT_FAULT", ("Hardware",)),
    ("INTERCONNECT_NETWORKING.GDR", ("Performance", "Network")),
    ("INTERCONNECT_NETWORKING.TOPOLOGY", ("Performance", "Network")), ("INTERCONNECT_NETWORKING", ("Network",)),
    ("USER_APPLICATION.CONFIG.BATCH_SIZE_OOM", ("Software", "Performance")),
    ("FRAMEWORK_LIBRARY.PYTORCH.DATALOADER_DEADLOCK", ("Software", "Performance")),
    ("OTHER.PLATFORM", ("Hardware",)), ("OTHER.FACILITY", ("Hardware",)), ("", ("Software",)),
)
TERMS = {"NCCL": r"\bNCCL\b", "GPU": r"\bGPUs?\b", "Xid": r"\bXid\b", "ECC": r"\bECC\b|double bit|DBE",
         "OOM": r"out of memory|\bOOM\b", "InfiniBand": r"InfiniBand|\bIB\b|mlx5", "NVLink": r"NVLink",
         "PCIe": r"PCIe|fallen off the bus", "CUDA": r"\bCUDA\b", "DataLoader": r"DataLoader|worker",
         "watchdog": r"[Ww]atchdog|timeout", "RoCE": r"RoCE|GID", "driver": r"\bdriver\b|NVRM",
         "shared memory": r"/dev/shm|shared memory|\bshm\b", "checkpoint": r"checkpoint",
         "thermal": r"thermal|temperature",
         "GSP": r"\bGSP\b", "container": r"container|docker|cgroup"}
_TERMS = {name: re.compile(p, re.I) for name, p in TERMS.items()}
_WORD = re.compile(r"[A-Za-z_][A-Za-z_]{2,}")
_FAILURE = re.compile(r"error|fail|warn|xid|nvrm|traceback|exception|killed|timeout|timed out|out of memory|oom|"
                      r"fatal|abort|terminate|link down|fallen off", re.I)
ALPHA = 0.7


def categories_of(label: str) -> tuple[str, ...]:
    return next(cats for prefix, cats in CATEGORY_RULES if label.startswith(prefix))


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def _front_matter_nodes(text: str) -> list[str]:
    m = re.search(r"^nodes:\s*\[([^\]]*)\]", text, re.M)
    return [n.strip() for n in m.group(1).split(",")] if m else []


def _remediation(text: str) -> list[str]:
    m = re.search(r"^## Remediation\s*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if not m:
        return []
    return [b.strip()[2:].strip() for b in m.group(1).splitlines() if b.strip().startswith("- ")]


@dataclass
class KnowledgeGraph:
    graph: nx.DiGraph
    embed: Callable[[Sequence[str]], np.ndarray]
    _vectors: dict[str, np.ndarray] | None = None

    @classmethod
    def build(cls, knowledge_dir: Path, embed: Callable[[Sequence[str]], np.ndarray]) -> KnowledgeGraph:
        from agent.taxonomy import load_taxonomy

        tax = load_taxonomy()
        leaves = {n.label: n for n in tax.leaves()}
        g = nx.DiGraph()
        for cat in CATEGORIES:
            g.add_node(f"cat:{cat}", kind="FaultCategory", text=cat)

        def root_cause(label: str) -> str:
            node = f"rc:{label}"
            if node not in g:
                leaf = leaves[label]
                g.add_node(node, kind="RootCause", text=f"{label}: {leaf.description}")
                if leaf.runbook:
                    add_solution(node, leaf.runbook)
                link_terms(node, leaf.description)
            return node

        def add_solution(rc: str, text: str) -> None:
            sol = f"sol:{len(g)}"
            g.add_node(sol, kind="Solution", text=text)
            g.add_edge(rc, sol, rel="RESOLVED_BY")

        def link_terms(node: str, text: str) -> None:
            for name, pattern in _TERMS.items():
                if pattern.search(text):
                    term = f"term:{name}"
                    g.add_node(term, kind="Term", text=name)
                    g.add_edge(node, term, rel="RELATED_TO")

        seed = knowledge_dir / "incidents" / "seed.jsonl"
        for line in seed.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            if rec.get("label") not in leaves:
                continue
            sym = f"sym:{rec['id']}"
            g.add_node(sym, kind="Symptom", text=rec["description"])
            for cat in categories_of(rec["label"]):
                g.add_edge(sym, f"cat:{cat}", rel="BELONGS_TO")
            rc = root_cause(rec["label"])
            g.add_edge(sym, rc, rel="CAUSED_BY")
            if rec.get("resolution"):
                add_solution(rc, rec["resolution"])
            link_terms(sym, rec["description"])
        for doc in sorted((knowledge_dir / "kb").rglob("*.md")):
            text = doc.read_text(encoding="utf-8")
            for label in _front_matter_nodes(text):
                if f"rc:{label}" in g:
                    for bullet in _remediation(text):
                        add_solution(f"rc:{label}", bullet)
        return cls(g, embed)

    def _symptom_vectors(self) -> dict[str, np.ndarray]:
        if self._vectors is None:
            ids = [n for n, d in self.graph.nodes(data=True) if d["kind"] == "Symptom"]
            rows = self.embed([self.graph.nodes[n]["text"] for n in ids])
            self._vectors = dict(zip(ids, rows, strict=True))
        return self._vectors

    def subgraph(self, category: str) -> nx.Graph:
        symptoms = [s for s, _ in self.graph.in_edges(f"cat:{category}")]
        keep = set(symptoms) | {f"cat:{category}"}
        for s in symptoms:
            for _, rc in self.graph.out_edges(s):
                keep.add(rc)
                keep.update(t for _, t in self.graph.out_edges(rc))
            keep.update(t for _, t in self.graph.out_edges(s))
        return self.graph.subgraph(keep).to_undirected()

    def root_cause(self, category: str, lines: Sequence[str], top_k: int = 8) -> dict:
        """The most likely root cause in `category` for a job whose last log lines are `lines`, and its
        solutions; `candidates` shows the reranking."""
        if category not in CATEGORIES:
            raise ValueError(f"no knowledge-graph category {category!r}; choose from {', '.join(CATEGORIES)}")
        failing = [line for line in lines if _FAILURE.search(line)]
        query = "\n".join(failing[-6:] or list(lines[-3:])) or category
        sub = self.subgraph(category)
        symptoms = [n for n in sub if n.startswith("sym:")]
        vectors = self._symptom_vectors()
        qv = self.embed([query])[0]
        qw = _words(query)
        semantic: dict[str, float] = {}
        for s in symptoms:
            cos = float(np.clip(vectors[s] @ qv, 0.0, 1.0))
            words = _words(self.graph.nodes[s]["text"])
            keyword = len(qw & words) / len(qw) if qw else 0.0
            semantic[s] = 0.5 * cos + 0.5 * keyword
        top = sorted(symptoms, key=lambda s: -semantic[s])[:top_k]
        degree = nx.degree_centrality(sub)
        between = nx.betweenness_centrality(sub)
        rcs = {rc for s in top for _, rc in self.graph.out_edges(s) if rc.startswith("rc:")}
        if not rcs:
            return {"category": category, "root_cause": None, "score": 0.0, "solutions": [], "candidates": []}
        s_max = max(semantic[s] for s in top) or 1.0  # both terms on [0, 1] before they are mixed
        d_max = max(degree[r] for r in rcs) or 1.0
        b_max = max(between[r] for r in rcs) or 1.0
        ranked = []
        for rc in rcs:
            sem = max(semantic[s] for s in top if self.graph.has_edge(s, rc)) / s_max
            structure = 0.5 * degree[rc] / d_max + 0.5 * between[rc] / b_max
            ranked.append((ALPHA * sem + (1 - ALPHA) * structure, sem, structure, rc))
        ranked.sort(reverse=True)
        best = ranked[0][3]
        solutions = [self.graph.nodes[t]["text"] for _, t in self.graph.out_edges(best)
                     if self.graph.nodes[t]["kind"] == "Solution"]
        evidence = [s for s in top if self.graph.has_edge(s, best)]
        return {"category": category, "root_cause": best[3:], "score": round(ranked[0][0], 4),
                "description": self.graph.nodes[best]["text"], "solutions": solutions[:5],
                "matched_incidents": [s[4:] for s in evidence],
                "candidates": [{"root_cause": rc[3:], "score": round(f, 4), "semantic": round(sem, 4),
                                "structure": round(st, 4)} for f, sem, st, rc in ranked[:5]]}


@cache
def default_graph() -> KnowledgeGraph:
    from agent.knowledge.embeddings import embed

    return KnowledgeGraph.build(KNOWLEDGE_DIR, embed)
