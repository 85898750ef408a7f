"""Spatial comparison (L4 §5.3.1): per-node event-count vectors, Isolation Forest, and the events that make each
suspicious node deviate from the others."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.ensemble import IsolationForest

TOP_EVENTS = 5
TREES = 200
SILENCE_WEIGHT = 0.5  # iForest scores of healthy nodes sit near 0.4-0.5; a fully silent node gains a clear margin
EVIDENCE_WEIGHT = 0.5  # a node with full failure evidence (worded events of its own) gains this much
EVIDENCE_FULL = 2.0  # evidence of two failure-worded events that no other node logs is full evidence


@dataclass
class NodeRank:
    node: str
    score: float  # Isolation Forest anomaly score (higher: more isolated), 0 when nothing deviates
    events: list[int]  # template indices, largest deviation from the median node first
    rarity: float  # sum over the node's failure events of weight / (nodes that log the event)


def silence(counts: np.ndarray, widespread: np.ndarray) -> np.ndarray:
    """Per node, the fraction of the widespread failure events (columns flagged in `widespread`) it does not log.

    Our addition to L4's iForest: in a hang or fail-stop, every healthy rank reports the failure (watchdog timeouts)
    and the culprit is the node that stays silent; iForest alone weighs that against the one-off summary lines of
    the launcher node and can lose.
    """
    if not widespread.any():
        return np.zeros(len(counts))
    return (counts[:, widespread] == 0).sum(axis=1) / widespread.sum()


def rank_nodes(nodes: list[str], counts: np.ndarray, rare_weight: np.ndarray, widespread: np.ndarray,
               seed: int = 0) -> list[NodeRank]:
    """`counts`: nodes x features (template counts of the candidate events); every node, most suspicious first.
    Nodes that do not deviate from the median node in any feature score 0 and come last; a job on a single node
    gets that node, which is where its fault is."""
    if not nodes:
        return []
    if counts.size == 0:
        return [NodeRank(node, 0.0, [], 0.0) for node in sorted(nodes)]
    x = np.log1p(counts.astype(float))
    deviation = x - np.median(x, axis=0)
    deviating = np.abs(deviation).sum(axis=1) > 0
    if len(nodes) >= 3 and deviating.any():
        forest = IsolationForest(n_estimators=TREES, max_samples=min(256, len(nodes)), random_state=seed)
        scores = -forest.fit(x).score_samples(x)
    else:  # two nodes are equally far from each other: the rarity of their events decides
        scores = np.full(len(nodes), 0.5)
    rarity = (counts > 0).astype(float) @ rare_weight
    # iForest isolates whatever is unusual; evidence says which unusual thing is a failure: failure wording over mere
    # rarity, events on one node over events every node logs.
    evidence = np.minimum(rarity / EVIDENCE_FULL, 1.0)
    scores = scores + SILENCE_WEIGHT * silence(counts, widespread) + EVIDENCE_WEIGHT * evidence
    scores = np.where(deviating, scores, 0.0)
    ranked = []
    for i in range(len(nodes)):
        order = np.argsort(-np.abs(deviation[i]), kind="stable")
        events = [int(j) for j in order[:TOP_EVENTS] if deviation[i, j] != 0]
        ranked.append(NodeRank(nodes[i], round(float(scores[i]), 4), events, float(rarity[i])))
    ranked.sort(key=lambda r: (-r.score, -r.rarity, r.node))
    return ranked
