"""The offline reasoner (the default): no network. It decides from node signatures and Xid codes matched in
the incident text, embedding similarity between the incident and node descriptions, retrieval priors, and
the evidence the checks already gathered."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from agent import xid_catalog
from agent.evidence import assess
from agent.incident import Incident, IncidentSummary
from agent.models import CheckResult, Verdict
from agent.reasoning import symptoms, text_signals
from agent.reasoning.base import (
    Choice,
    Evidence,
    ExplorationHypothesis,
    KBPassage,
    LeafJudgement,
    NodeInfo,
    Observation,
    OnCall,
    PastIncident,
    Usage,
)
from agent.reasoning.lexicon import lexicon
from agent.reasoning.statements import stated_leaves
from agent.taxonomy import Taxonomy

if TYPE_CHECKING:
    from agent.redact import Redactor

Embed = Callable[[list[str]], np.ndarray]
KEEP_AT_ROOT = 3  # categories explored even without a signal: the incident text is often vague
KEEP_BELOW = 1
STATED = 1.0  # the customer says a version of this library works or fails, or that it changed: as strong as an Xid
SYMPTOM = 0.3  # the job failed the way this cause fails jobs (slow, hang, NaN, reboot ...): a hint, not a line
# per standard deviation the incident's words match the leaf's documentation above the average leaf's
# (reasoning/lexicon.py); chosen on the dev incidents' reading (eval/results/reading.md)
WORDS = 0.25
# how relevant a suggestion is to this incident (pipeline 3 ranks by it): similarity to the incident, plus
TEXT_FIT = 0.5  # its signatures or Xids in the incident's lines
WEAK_EVIDENCE = 0.3  # a check found something that points at it, too weak to confirm
WARNING = 0.4  # a warning a check raised on these hosts: seen, but not tied to the incident
STEP_LINE = re.compile(r"^\s*(?:[-*]|\d+[.)])\s+(.+)")


def _default_embed(texts: list[str]) -> np.ndarray:
    from agent.knowledge.embeddings import embed

    return embed(texts)


def node_text(taxonomy: Taxonomy, label: str) -> str:
    """What a node's similarity to an incident is measured on: its label in words and its description."""
    return f"{label.replace('.', ' ').replace('_', ' ').lower()}: {taxonomy.node(label).description}"


def _stored_node_vectors(taxonomy: Taxonomy, labels: list[str]) -> np.ndarray:
    """The bundled model's vectors of these nodes' texts, kept on disk per taxonomy (its node texts' digest) and
    model: the same texts are encoded once, not on every run (agent/knowledge/vector_cache.py)."""
    from agent.knowledge.vector_cache import cached_embed, text_digest

    every = "\n".join(f"{lb}\t{node_text(taxonomy, lb)}" for lb in taxonomy.labels())
    return cached_embed([node_text(taxonomy, lb) for lb in labels], f"taxonomy-{text_digest(every)[:12]}")


class OfflineReasoner:
    name = "offline"

    def __init__(self, taxonomy: Taxonomy, embed: Embed | None = None):
        self.taxonomy = taxonomy
        self.embed = embed or _default_embed
        self.usage = Usage()
        # the Reasoner protocol's run settings: nothing here calls a model or sends a prompt anywhere
        self.token_budget: int | None = None
        self.on_call: OnCall | None = None
        self.redactor: Redactor | None = None
        self._node_vectors: dict[str, np.ndarray] = {}
        self._query_vectors: dict[str, np.ndarray] = {}
        self._stated: dict[str, dict[str, str]] = {}
        self._shown: dict[str, dict[str, str]] = {}
        self._words: dict[str, dict[str, float]] = {}

    # ---- text signals -------------------------------------------------------------------------------------
    @cached_property
    def _all_patterns(self) -> list[re.Pattern[str]]:
        return [p for leaf in self.taxonomy.leaves() for p in leaf.patterns]

    def signature_hits(self, text: str, label: str) -> int:
        """Distinct signatures of the node and its subtree found in the text."""
        node = self.taxonomy.node(label)
        return len({sig for n in [node, *node.descendants] for sig in n.matching_signatures(text)})

    def xid_hit(self, summary: IncidentSummary, label: str) -> bool:
        """An Xid in the incident belongs to this node: one of its subtree's Xids, or NVIDIA's catalogue places it
        here or below (the Xids no leaf names, e.g. copy-engine or driver-firmware errors, reach their
        sub-category)."""
        node = self.taxonomy.node(label)
        xids = {x for n in [node, *node.descendants] for x in n.xids}
        if xids & set(summary.entities.xids):
            return True
        places = xid_catalog.places(summary.entities.xids)
        return any(place == label or place.startswith(label + ".") for place in places)

    def similarity(self, summary: IncidentSummary, labels: list[str]) -> dict[str, float]:
        missing = [lb for lb in labels if lb not in self._node_vectors]
        if missing:
            vectors = (_stored_node_vectors(self.taxonomy, missing) if self.embed is _default_embed
                       else self.embed([node_text(self.taxonomy, lb) for lb in missing]))
            for label, vector in zip(missing, vectors, strict=True):
                self._node_vectors[label] = vector
        if summary.query not in self._query_vectors:
            self._query_vectors = {summary.query: self.embed([summary.query])[0]}
        query = self._query_vectors[summary.query]
        return {lb: float(np.dot(query, self._node_vectors[lb])) for lb in labels}

    def text_fit(self, summary: IncidentSummary, label: str) -> bool:
        return self.signature_hits(summary.text, label) > 0 or self.xid_hit(summary, label)

    def stated(self, summary: IncidentSummary, label: str) -> str:
        """The customer's sentence about versions or a change that points into this node's subtree ('' if none):
        "deepspeed 0.15.3 works, 0.16.4 fails" → FRAMEWORK_LIBRARY.DEEPSPEED.BUG."""
        if summary.text not in self._stated:
            self._stated = {summary.text: stated_leaves(self.taxonomy, summary.text)}
        said = self._stated[summary.text]
        return next((said[leaf.label] for leaf in self.taxonomy.leaves(label) if leaf.label in said), "")

    def symptom_hit(self, summary: IncidentSummary, label: str) -> dict[str, str]:
        """The incident's symptom classes this leaf produces, each with the words that show it (internal nodes:
        none; a whole category fails jobs in every way)."""
        if summary.text not in self._shown:
            self._shown = {summary.text: symptoms.shown(summary.text)}
        shown = self._shown[summary.text]
        return {name: shown[name] for name in self.taxonomy.node(label).symptoms if name in shown}

    def word_match(self, summary: IncidentSummary, label: str) -> float:
        """How far above the average leaf the incident's words match this leaf's documentation. A category gets
        none: the best of its many leaves would favour the biggest categories, not the likeliest."""
        node = self.taxonomy.node(label)
        if not node.is_leaf:
            return 0.0
        if summary.text not in self._words:
            self._words = {summary.text: lexicon(self.taxonomy).scores(summary.text)}
        return self._words[summary.text].get(label, 0.0)

    # ---- Reasoner -----------------------------------------------------------------------------------------
    def summarize(self, incident: Incident) -> IncidentSummary:
        # the environment (SKU, driver, OFED/HPC-X, PSU ...) is evidence too: signatures may match it
        text = f"{incident.text}\n[environment] {incident.environment}" if incident.environment else incident.text
        lines = text_signals.key_lines(text, self._all_patterns)
        query = "\n".join([*lines, text[:600]]) if lines else text[:1500]
        return IncidentSummary(title=text_signals.title(text, lines), key_lines=lines,
                               entities=text_signals.entities(text), query=query, text=text,
                               environment=incident.environment)

    def rerank_history(self, summary: IncidentSummary, candidates: list[PastIncident]) -> list[PastIncident]:
        ranked = []
        for past in candidates:
            fit = self.text_fit(summary, past.label) if past.label in self.taxonomy.labels() else False
            ranked.append(past.model_copy(update={"score": round(0.75 * past.score + 0.25 * fit, 4)}))
        return sorted(ranked, key=lambda p: -p.score)

    def rank_children(self, summary: IncidentSummary, parent: NodeInfo, children: list[NodeInfo],
                      memory: list[Observation], priors: dict[str, float]) -> list[Choice]:
        labels = [c.label for c in children]
        sims = self.similarity(summary, labels)
        results = [o.result for o in memory]
        scored: list[tuple[float, Choice]] = []
        for child in children:
            hits = self.signature_hits(summary.text, child.label)
            xid = self.xid_hit(summary, child.label)
            seen = self._memory_evidence(child.label, results)
            prior = priors.get(child.label, 0.0)
            said = self.stated(summary, child.label)
            shows = self.symptom_hit(summary, child.label)
            words = self.word_match(summary, child.label)
            score = (min(hits, 3) * 0.5 + xid * 1.0 + sims[child.label] * 1.5 + prior + seen + STATED * bool(said)
                     + SYMPTOM * bool(shows) + WORDS * words)
            why = ", ".join(part for part in (
                f"{hits} signature(s) in the incident" if hits else "",
                "Xid code in the incident" if xid else "",
                f"the customer says: {said}" if said else "",
                f"it fails jobs as the incident describes ({', '.join(f'{k}: {v!r}' for k, v in shows.items())})"
                if shows else "",
                f"check evidence {seen:.1f}" if seen else "",
                f"similar past incidents {prior:.2f}" if prior else "",
                f"its documentation's words {words:+.1f} sd" if words >= 1.0 else "",
                f"text similarity {sims[child.label]:.2f}")
                if part)
            signal = hits > 0 or xid or seen > 0 or prior >= 0.3 or bool(said)
            scored.append((score, Choice(label=child.label, score=round(score, 4), keep=signal, why=why)))
        scored.sort(key=lambda item: -item[0])
        floor = KEEP_AT_ROOT if not parent.label else KEEP_BELOW
        cleared = not parent.label or self._node_cleared(parent, results)
        ranked = []
        for rank, (_, choice) in enumerate(scored):
            # below the root, a parent whose own checks all passed does not earn its children a blind visit
            keep = choice.keep or (rank < floor and (not parent.label or not cleared))
            ranked.append(choice.model_copy(update={"keep": keep}))
        return ranked

    def validate_leaf(self, summary: IncidentSummary, leaf: NodeInfo, evidence: Evidence,
                      results: list[CheckResult]) -> LeafJudgement:
        fit = self.text_fit(summary, leaf.label)
        sim = self.similarity(summary, [leaf.label])[leaf.label]
        # independent checks that agree make a cause more certain than one check's findings
        corroboration = len({entry.partition(":")[0] for entry in evidence.matched if entry.endswith("(FAIL)")})
        if evidence.strength == "strong":
            confidence = 0.6 + 0.05 * min(corroboration, 3) + 0.1 * fit + 0.15 * max(sim, 0.0)
            status, why = "confirmed", "checks confirm it"
        elif evidence.strength == "weak" and fit:
            status, confidence, why = "confirmed", 0.5 + 0.1 * max(sim, 0.0), "weak check evidence matching the text"
        elif evidence.strength == "weak":
            status, confidence, why = "inconclusive", 0.3, "weak check evidence only"
        elif evidence.strength == "none" and not (fit and evidence.unknown):
            status, confidence, why = "rejected", 0.0, "its checks ran and found nothing"
        else:
            status, confidence = "inconclusive", 0.25 if fit else 0.1
            why = "its checks could not decide" + (" but the incident text points to it" if fit else "")
        detail = "; ".join(evidence.matched[:4] or evidence.open[:2] or evidence.rejected_by[:3]
                           or evidence.unknown[:2] or evidence.unasked[:2])
        return LeafJudgement(label=leaf.label, status=status, confidence=round(confidence, 3),
                             why=f"{why}: {detail}" if detail else why, evidence=evidence)

    def explore(self, summary: IncidentSummary, memory: list[Observation], passages: list[KBPassage],
                tested: list[LeafJudgement]) -> list[ExplorationHypothesis]:
        """Leaves the checks could not decide, knowledge-base guides and warnings, most relevant to this incident
        first. A leaf nothing hid — open only because its check had nothing to read (no logs, no checkpoint
        directory) or because the known-bad list does not name the installed release (every release of every
        library is that) — is a lead only when the incident points at it."""
        scored: list[tuple[float, ExplorationHypothesis]] = []
        leaves = self.taxonomy.labels(leaves_only=True)
        sims = self.similarity(summary, leaves) if any(j.status == "inconclusive" for j in tested) else {}
        for judgement in tested:
            if judgement.status != "inconclusive":
                continue
            nothing_hid = not judgement.evidence.unknown and not judgement.evidence.matched  # no weak finding either
            if nothing_hid and not (self.text_fit(summary, judgement.label) or self.stated(summary, judgement.label)):
                continue
            node = self.taxonomy.node(judgement.label)
            scored.append((self._relevance(summary, judgement, sims), ExplorationHypothesis(
                title=f"Unverified: {judgement.label}", why=judgement.why,
                steps=[node.runbook], related_labels=[judgement.label])))
        seen_docs: set[str] = set()
        for passage in passages:
            if passage.doc in seen_docs:
                continue
            seen_docs.add(passage.doc)
            steps = [m.group(1).strip() for m in map(STEP_LINE.match, passage.text.splitlines()) if m][:5]
            scored.append((passage.score, ExplorationHypothesis(
                title=passage.title, why=f"the knowledge base matches the incident (score {passage.score:.2f})",
                steps=steps or [passage.text[:300]], sources=[passage.doc])))
        warned = [o.result for o in memory if o.result.verdict == Verdict.WARN]
        for result in warned[:3]:
            scored.append((WARNING, ExplorationHypothesis(
                title=f"Follow up the warning of {result.check} on {result.host}", why=result.summary[:300],
                steps=[f"look at: {f.message}" for f in result.failing()[:3]])))
        scored.sort(key=lambda item: -item[0])  # stable: equal relevance keeps the order above
        return [hypothesis for _, hypothesis in scored][:8]

    def _relevance(self, summary: IncidentSummary, judgement: LeafJudgement, sims: dict[str, float]) -> float:
        """An undecided leaf's relevance, on the scale of a KB passage's similarity score: its similarity to the
        incident, weighed by where that similarity ranks among every leaf's (a description close to any training
        job, like a corrupted checkpoint's, is no lead unless it is among the closest), plus the incident's own
        pointers to it and any weak check evidence. `sims`: every leaf's similarity to the incident."""
        sim = max(sims.get(judgement.label, 0.0), 0.0)
        closer = sum(1 for value in sims.values() if value > sim)
        fit = self.text_fit(summary, judgement.label) or bool(self.stated(summary, judgement.label))
        return (sim * (1 - closer / max(len(sims), 1)) ** 2 + TEXT_FIT * fit
                + WEAK_EVIDENCE * (judgement.evidence.strength == "weak"))

    def conclude(self, summary: IncidentSummary, confirmed: list[LeafJudgement],
                 memory: list[Observation]) -> str:
        if not confirmed:
            return "No root cause could be confirmed by the checks."
        head, *rest = confirmed
        node = self.taxonomy.node(head.label)
        text = f"Root cause: {head.label} ({head.why}). {node.runbook}"
        if rest:
            text += " Also confirmed: " + ", ".join(j.label for j in rest) + "."
        return text

    # ---- helpers ------------------------------------------------------------------------------------------
    def _memory_evidence(self, label: str, results: list[CheckResult]) -> float:
        """How strongly the checks run so far point into the subtree of `label` (1 strong, 0.4 weak)."""
        if not results:
            return 0.0
        best = 0.0
        for leaf in self.taxonomy.leaves(label):
            strength = assess(leaf.evidence, results).strength
            best = max(best, {"strong": 1.0, "weak": 0.4}.get(strength, 0.0))
            if best == 1.0:
                break
        return best

    def _node_cleared(self, parent: NodeInfo, results: list[CheckResult]) -> bool:
        """The parent's own checks all ran and passed."""
        own = [r for r in results if r.check in parent.checks]
        return bool(own) and all(r.verdict == Verdict.PASS for r in own)
