"""Which confirmed cause caused *this* incident: real hosts carry old and unrelated problems, so a leaf whose
checks confirm it is a cause only when something ties it to the incident.

A confirmed leaf is tied to the incident by
  - text: one of its signatures matches the incident's lines, or one of its Xids is in them;
  - time: a finding behind it is an event dated inside the incident's window (a check whose manifest entry says
    `events: true`), not a state the host may have carried for weeks;
  - entities: a finding behind it names a GPU or NIC the incident names, or, on a job of several hosts, a host it
    names (on one host every finding is on the host the incident runs on, which ties nothing);
  - the reading: it is among the READING_TOP likeliest causes of the incident as the reasoner read it before any
    check ran (its lines, its similarity to each leaf, the causes of similar past incidents). Any leaf of the
    taxonomy can be confirmed on a host that carries an old problem; one the incident reads like is rarely a
    coincidence.
It is held against the incident when the incident names GPUs (or NICs) and every finding of that kind behind it
is on others. The primary causes are the tied leaves, the strongest evidence first, then the closer tie, then the
better reading. When nothing is tied but the incident's lines name leaves whose checks found nothing, a confirmed
leaf in their sub-category (MAIN.SUB) is claimed: signatures are often generic (an NCCL error line fits several
NCCL leaves). Every other confirmed leaf is reported as "also found on the hosts, not the cause of this incident",
with why; when none is tied, nothing is claimed and the incident escalates with what was found.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from agent.incident import IncidentSummary
from agent.reasoning import text_signals
from agent.reasoning.base import LeafJudgement
from agent.taxonomy import Taxonomy

STRENGTH = {"strong": 2, "weak": 1}
# how many of the incident's likeliest readings tie a confirmed leaf to it: about one leaf in thirteen of the
# shipped taxonomy (65 leaves); eval/results/diagnosis/attribution.md measures 3 to 10
READING_TOP = 5
GPU_ENTITY = re.compile(r"^GPU\s?(\d{1,2})$", re.IGNORECASE)
BUS = re.compile(r"(?:[0-9a-f]{4,8}:)?([0-9a-f]{2}):([0-9a-f]{2})\.?([0-7])?", re.IGNORECASE)
NIC_PREFIXES = ("mlx5_", "ib", "eth", "en", "bond", "hsn")


class Attribution(BaseModel):
    primary: list[LeafJudgement] = Field(default_factory=list)  # the causes of this incident, primary first
    also_found: list[LeafJudgement] = Field(default_factory=list)  # confirmed on the hosts, not this incident's
    links: dict[str, str] = Field(default_factory=dict)  # label -> how it is tied to the incident (or not)


def attribute(taxonomy: Taxonomy, summary: IncidentSummary, confirmed: list[LeafJudgement],
              tested: list[LeafJudgement], reading: dict[str, int] | None = None, hosts: int = 1) -> Attribution:
    """`reading`: each leaf's rank (1 = likeliest) in the reasoner's reading of the incident before any check;
    `hosts`: how many hosts the job has."""
    unique = list({j.label: j for j in confirmed}.values())
    if not unique:
        return Attribution()
    events = {spec.id for spec in taxonomy.manifest.checks if spec.events}
    ranks = reading or {}
    scored = {j.label: _link(taxonomy, summary, j, events, ranks.get(j.label), hosts) for j in unique}
    worst = len(ranks) + 1
    ordered = sorted(unique, key=lambda j: (scored[j.label][0] <= 0, -STRENGTH.get(j.evidence.strength, 0),
                                            -scored[j.label][0], ranks.get(j.label, worst), -j.confidence))
    links = {label: why for label, (_, why) in scored.items()}
    primary = [j for j in ordered if scored[j.label][0] > 0]
    if primary:
        # what the causes did to their own GPU or NIC (an ECC error's pending row remap) is part of the same failure
        places = {e for j in primary for e in _places(j)}
        for j in ordered:
            if j not in primary and (shared := _places(j) & places):
                primary.append(j)
                links[j.label] = f"on {', '.join(sorted(shared))}, like {primary[0].label}"
        return Attribution(primary=primary, also_found=[j for j in ordered if j not in primary], links=links)
    named = [j.label for j in tested if j.status != "confirmed" and _text_fit(taxonomy, summary, j.label)]
    # signatures are often generic (an NCCL error line fits several NCCL leaves): a confirmed leaf in the
    # sub-category the lines point to is the incident's; one elsewhere is something else the hosts carry
    categories = {_sub(label) for label in named}
    primary = [j for j in ordered if _sub(j.label) in categories]
    for j in ordered:
        if j in primary:
            links[j.label] += f"; in the category of {', '.join(named[:3])}, which the incident's lines point to"
        elif named:
            links[j.label] += f"; the incident's lines point to {', '.join(named[:3])}, whose checks found nothing"
    return Attribution(primary=primary, also_found=[j for j in ordered if j not in primary], links=links)


def _sub(label: str) -> str:
    return ".".join(label.split(".")[:2])


def _text_fit(taxonomy: Taxonomy, summary: IncidentSummary, label: str) -> bool:
    node = taxonomy.node(label)
    return bool(node.matching_signatures(summary.text)) or bool(set(node.xids) & set(summary.entities.xids))


def _link(taxonomy: Taxonomy, summary: IncidentSummary, judgement: LeafJudgement, events: set[str],
          rank: int | None, hosts: int) -> tuple[float, str]:
    """(score, why): 2 for the text, 1 for an event in the incident's window, 1 for a shared entity, 0.5 for the
    reading (a prior, not evidence of this incident: it ties a leaf, but its lines, an event or a named device tie
    one closer), -1 when the incident names others of a kind."""
    score: float = 0
    why: list[str] = []
    if _text_fit(taxonomy, summary, judgement.label):
        score += 2
        why.append("the incident's lines match it")
    dated = sorted({entry.partition(":")[0] for entry in judgement.evidence.matched
                    if entry.partition(":")[0] in events and entry.endswith("(FAIL)")})
    if dated:
        score += 1
        why.append("it happened in the incident's window (" + ", ".join(dated) + ")")
    named_gpus = {g for g in map(_gpu_key, summary.entities.gpus) if g}
    named_devices = {d.lower() for d in summary.entities.devices}
    # the hosts the incident's own lines name (the summary also lists the hosts pre-triage suspects: host state, not
    # the incident's words)
    named_hosts = {h.lower() for h in text_signals.entities(summary.text).hosts} if hosts > 1 else set()
    entities = [_entity(entry) for entry in judgement.evidence.matched]
    gpus = {g for g in map(_gpu_key, entities) if g}
    devices = {e.lower() for e in entities if e.lower().startswith(NIC_PREFIXES)}
    shared = (gpus & named_gpus) | (devices & named_devices) | ({e.lower() for e in entities} & named_hosts)
    if shared:
        score += 1
        why.append("it is on " + ", ".join(sorted(shared)) + ", which the incident names")
    elif (gpus and named_gpus) or (devices and named_devices):
        score -= 1
        why.append("it is on " + ", ".join(sorted(gpus | devices)) + "; the incident names "
                   + ", ".join(sorted(named_gpus | named_devices)))
    if rank is not None and rank <= READING_TOP:
        score += 0.5
        why.append(f"the incident reads like it (its likely cause no. {rank} before any check)")
    return score, "; ".join(why) or "nothing ties it to the incident: not its lines, what they name, its window " \
                                    "or its likely causes"


def _places(judgement: LeafJudgement) -> set[str]:
    """The GPUs and NICs its findings are on (host-wide findings name no place)."""
    entities = [_entity(entry) for entry in judgement.evidence.matched]
    return {g for g in map(_gpu_key, entities) if g} | {e.lower() for e in entities if e.lower().startswith("mlx5_")}


def _entity(entry: str) -> str:
    """The entity of an evidence entry `check:finding@entity (SEVERITY)`."""
    return entry.rpartition(" (")[0].partition("@")[2].strip()


def _gpu_key(text: str) -> str:
    """'GPU3' / 'gpu 3' -> 'gpu3'; a PCI bus id -> 'bus:BB:DD' (the domain differs between tools); else ''."""
    match = GPU_ENTITY.match(text.strip())
    if match:
        return f"gpu{int(match.group(1))}"
    match = BUS.search(text)
    return f"bus:{match.group(1).lower()}:{match.group(2).lower()}" if match else ""
