"""Taxonomy construction, pass 1 (AidAI §4.1, Fig. 5): give every historical incident a root-cause label
`<MAIN>.<SUB>.<DETAIL>` with a hypothesis and a description.

Offline there is no model to read the tickets, so a label comes from (in this order) the record itself (the
confirmed root cause in the ticket), the nearest existing leaf of a base taxonomy (embedding similarity of the
incident text to the leaf's description, signatures and name), or, with no base taxonomy, a cluster of similar
incidents named after its main category and its most distinctive word. `agent.history.llm` does pass 1 with a
model instead.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Literal

import numpy as np

from agent.history.records import HistoryRecord
from agent.taxonomy import TaxNode

LabelSource = Literal["record", "nearest-leaf", "nearest-incident", "cluster", "llm"]
NEIGHBOUR_SIM = 0.75  # an unlabelled incident this similar to a labelled one shares its root cause

# The six main categories of AidAI's taxonomy (§5, Appendix B); what an empty taxonomy starts from.
MAIN_CATEGORIES: dict[str, str] = {
    "GPU": "Faults of the GPU device itself: memory (ECC, row remapping), availability (fallen off the bus, missing), "
           "defective silicon, power and thermal problems.",
    "SYSTEM_SOFTWARE": "The host's software stack below the job: NVIDIA driver, CUDA, fabric manager, container "
                       "toolkit, OS configuration, network drivers.",
    "INTERCONNECT_NETWORKING": "Links between GPUs and nodes: NVLink, PCIe, InfiniBand, RoCE, sockets and NCCL's "
                               "transport configuration.",
    "FRAMEWORK_LIBRARY": "Bugs and version problems of PyTorch, NCCL, DeepSpeed, Accelerate and similar libraries.",
    "USER_APPLICATION": "Mistakes in the user's code or job configuration: device assignment, out of memory, hangs "
                        "in the training script, shared memory limits.",
    "OTHER": "Everything outside the GPU machine's software and hardware: the platform, facility, scheduler, storage.",
}
_STOP = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "for", "from", "has", "have", "in", "into",
    "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "was", "were", "with", "not", "no", "after",
    "before", "when", "then", "than", "there", "their", "them", "they", "we", "our", "you", "your", "can", "could",
    "would", "should", "will", "job", "jobs", "run", "runs", "node", "nodes", "gpu", "gpus", "error", "errors",
    "failed", "fails", "fail", "failure", "using", "used", "use", "one", "two", "all", "any", "only", "also",
    "same", "other", "more", "most", "some", "see", "seen", "shows", "show", "each", "while", "which", "what",
    "who", "how", "out", "up", "down", "over", "under", "about"
})


_VECTORS: dict[str, np.ndarray] = {}
_CACHE_MAX = 20_000


def embed_texts(texts: list[str]) -> np.ndarray:
    """Unit vectors of `texts`, remembered per process: a build or import compares the same leaves and names
    again and again, and embedding is the slow part on a CPU."""
    from agent.knowledge.embeddings import DIM, embed

    todo = list(dict.fromkeys(t for t in texts if t not in _VECTORS))
    if todo:
        if len(_VECTORS) + len(todo) > _CACHE_MAX:
            _VECTORS.clear()
        _VECTORS.update(zip(todo, embed(todo), strict=True))
    return np.stack([_VECTORS[t] for t in texts]) if texts else np.zeros((0, DIM), dtype=np.float32)


@dataclass
class Labelled:
    """Pass 1's output for one incident."""

    record: HistoryRecord
    label: str
    hypothesis: str
    description: str
    source: LabelSource
    score: float = 1.0  # similarity to the chosen leaf / cluster centroid; 1.0 for labels from the record

    @property
    def main(self) -> str:
        return self.label.split(".", 1)[0]


def first_sentence(text: str, limit: int = 240) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    match = re.search(r"(?<=[.!?])\s", text)
    sentence = text[:match.start()] if match else text
    return sentence if len(sentence) <= limit else sentence[:limit - 1].rstrip() + "…"


def humanize(label: str) -> str:
    return label.replace(".", " / ").replace("_", " ").lower()


def leaf_text(node: TaxNode) -> str:
    """What a leaf is compared with: its name, description and (regex-stripped) signatures."""
    sigs = " ".join(re.sub(r"\\[a-z]|[\\()\[\]{}?*+|^$]", " ", s) for s in node.signatures)
    return f"{humanize(node.label)}. {node.description} {sigs}"


def incident_text(record: HistoryRecord) -> str:
    return "\n".join(p for p in (record.description, record.environment, record.resolution) if p.strip())


def _hypothesis(record: HistoryRecord, label: str) -> str:
    if record.resolution.strip():
        return first_sentence(record.resolution)
    return f"root cause {humanize(label)}"


def from_records(records: list[HistoryRecord]) -> tuple[list[Labelled], list[HistoryRecord]]:
    """The records that carry a label, labelled; and the ones that do not."""
    done = [Labelled(r, r.label, _hypothesis(r, r.label), first_sentence(r.description), "record")
            for r in records if r.label]
    return done, [r for r in records if not r.label]


def nearest_leaves(records: list[HistoryRecord], leaves: list[TaxNode]) -> list[Labelled]:
    """Pass 1 without labels and without a model: each incident gets the existing leaf it is most similar to."""
    if not records:
        return []
    if not leaves:
        raise ValueError("no leaves to label against: give a base taxonomy or use clustering")
    sims = embed_texts([incident_text(r) for r in records]) @ embed_texts([leaf_text(n) for n in leaves]).T
    out = []
    for record, row in zip(records, sims, strict=True):
        best = int(np.argmax(row))
        label = leaves[best].label
        out.append(Labelled(record, label, _hypothesis(record, label), first_sentence(record.description),
                            "nearest-leaf", round(float(row[best]), 4)))
    return out


def nearest_incidents(records: list[HistoryRecord], labelled: list[Labelled], threshold: float = NEIGHBOUR_SIM
                      ) -> tuple[list[Labelled], list[HistoryRecord]]:
    """With no taxonomy to label against: an unlabelled incident very similar to a labelled one takes its label;
    the others are returned for clustering."""
    if not records or not labelled:
        return [], list(records)
    sims = embed_texts([incident_text(r) for r in records]) @ embed_texts([incident_text(i.record)
                                                                           for i in labelled]).T
    done, rest = [], []
    for record, row in zip(records, sims, strict=True):
        best = int(np.argmax(row))
        if row[best] >= threshold:
            label = labelled[best].label
            done.append(Labelled(record, label, _hypothesis(record, label), first_sentence(record.description),
                                 "nearest-incident", round(float(row[best]), 4)))
        else:
            rest.append(record)
    return done, rest


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z][a-z0-9_]{2,}", text.lower()) if w not in _STOP and not w.isdigit()]


def clusters(records: list[HistoryRecord], threshold: float = 0.55) -> list[Labelled]:
    """Pass 1 with neither labels nor a taxonomy: agglomerative clusters of similar incidents (cosine distance
    below `threshold`, average linkage); each cluster is named MAIN.CLUSTER_<n>.<WORD>, MAIN being the nearest
    main category and WORD the cluster's most distinctive word (tf-idf against the other clusters)."""
    if not records:
        return []
    vectors = embed_texts([incident_text(r) for r in records])
    if len(records) == 1:
        assignment = np.zeros(1, dtype=int)
    else:
        from sklearn.cluster import AgglomerativeClustering

        model = AgglomerativeClustering(n_clusters=None, metric="cosine", linkage="average",
                                        distance_threshold=threshold)
        assignment = model.fit_predict(vectors)
    mains = list(MAIN_CATEGORIES)
    main_vecs = embed_texts([f"{m.replace('_', ' ').lower()}: {d}" for m, d in MAIN_CATEGORIES.items()])
    docs = {c: Counter(w for i in np.flatnonzero(assignment == c) for w in set(_words(incident_text(records[i]))))
            for c in sorted(set(assignment.tolist()))}
    out: list[Labelled] = []
    for number, (cid, counts) in enumerate(docs.items(), start=1):
        members = np.flatnonzero(assignment == cid)
        centroid = vectors[members].mean(axis=0)
        centroid /= np.linalg.norm(centroid) or 1.0
        main = mains[int(np.argmax(main_vecs @ centroid))]
        df = Counter(w for other in docs.values() for w in other)
        scored = sorted(counts, key=lambda w: (-counts[w] * np.log((1 + len(docs)) / df[w]), w))
        word = re.sub(r"[^A-Z0-9_]", "_", (scored[0] if scored else "incident").upper())
        label = f"{main}.CLUSTER_{number}.{word if word[0].isalpha() else 'W_' + word}"
        for i in members:
            r = records[int(i)]
            out.append(Labelled(r, label, _hypothesis(r, label), first_sentence(r.description), "cluster",
                                round(float(vectors[int(i)] @ centroid), 4)))
    return out
