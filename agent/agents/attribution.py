"""Which confirmed cause caused *this* incident: real hosts carry old and unrelated problems, so a leaf whose
checks confirm it is a cause only when it explains the incident's own error lines or the entities they name.

A confirmed leaf is linked to the incident by
  - text: one of its signatures matches the incident's lines, or one of its Xids is in them;
  - entities: a finding behind it names a GPU, NIC or host the incident names;
  - time: a finding behind it is an event dated inside the incident's window (a check whose manifest entry says
    `events: true`), not a state the host may have carried for weeks.
It is held against the incident when the incident names GPUs (or NICs) and every finding of that kind behind it
is on others. The primary cause is a linked confirmed leaf: the strongest evidence first, then the closer link,
then the reasoner's confidence. The other confirmed leaves that are not linked are reported as "also found, not the
cause". When none is linked and leaves the text names were tested and ruled out, only confirmed leaves in their
sub-category are claimed; the others are problems the hosts carry that the incident does not show. When none is
linked and the text names nothing, what the text-guided walk confirmed is claimed in the walk's order (the walk
ranks branches by the incident's text), unless a leaf the walk followed could not be seen on these hosts (its
checks all UNKNOWN: the cause may be there); when only the sweep of every branch found something, one problem is
claimed and several unrelated ones are reported, none claimed.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from agent.incident import IncidentSummary
from agent.reasoning.base import LeafJudgement
from agent.taxonomy import Taxonomy

STRENGTH = {"strong": 2, "weak": 1}
GPU_ENTITY = re.compile(r"^GPU\s?(\d{1,2})$", re.IGNORECASE)
BUS = re.compile(r"(?:[0-9a-f]{4,8}:)?([0-9a-f]{2}):([0-9a-f]{2})\.?([0-7])?", re.IGNORECASE)


class Attribution(BaseModel):
    primary: list[LeafJudgement] = Field(default_factory=list)  # the causes of this incident, primary first
    also_found: list[LeafJudgement] = Field(default_factory=list)  # confirmed on the hosts, not this incident's
    links: dict[str, str] = Field(default_factory=dict)  # label -> how it is linked to the incident (or not)


JUDGED = ("confirmed", "rejected", "inconclusive")


def walk_order(path: list[dict]) -> dict[str, int]:
    """Where the walk first judged each leaf: its step index, or -1 for leaves judged only after the walk widened
    to every branch (found by sweeping, not by following the incident)."""
    order: dict[str, int] = {}
    widened = False
    for index, step in enumerate(path):
        widened = widened or step.get("action") == "widen"
        if step.get("action") in JUDGED and step.get("node") not in order:
            order[step["node"]] = -1 if widened else index
    return order


def attribute(taxonomy: Taxonomy, summary: IncidentSummary, confirmed: list[LeafJudgement],
              tested: list[LeafJudgement], order: dict[str, int] | None = None) -> Attribution:
    unique = list({j.label: j for j in confirmed}.values())
    if not unique:
        return Attribution()
    events = {spec.id for spec in taxonomy.manifest.checks if spec.events}
    scored = {j.label: _link(taxonomy, summary, j, events) for j in unique}
    # linked before unlinked; among the linked, strong check evidence before weak, then the closer link
    ordered = sorted(unique, key=lambda j: (scored[j.label][0] <= 0, -STRENGTH.get(j.evidence.strength, 0),
                                            -scored[j.label][0], -j.confidence, -len(j.evidence.matched)))
    links = {label: why for label, (_, why) in scored.items()}
    if scored[ordered[0].label][0] > 0:
        primary = [j for j in ordered if scored[j.label][0] > 0]
        # what the causes did to their own GPU or NIC (an ECC error's pending row remap) is part of the same failure
        places = {e for j in primary for e in _places(j)}
        for j in ordered:
            if j not in primary and (shared := _places(j) & places):
                primary.append(j)
                links[j.label] = f"on {', '.join(sorted(shared))}, like {primary[0].label}"
        return Attribution(primary=primary, also_found=[j for j in ordered if j not in primary], links=links)
    named = [j.label for j in tested if j.status != "confirmed" and _text_fit(taxonomy, summary, j.label)]
    if not named:
        # the walk follows the incident's text: what it confirmed first is the text's best reading; what only the
        # sweep of every branch found is something the hosts carry
        walk = order or {}
        followed = sorted((j for j in ordered if walk.get(j.label, 0) >= 0), key=lambda j: walk.get(j.label, 0))
        swept = [j for j in ordered if j not in followed]
        # a leaf the walk followed whose checks could not see anything here (a view without the tool) may be the
        # cause: what was confirmed, tied to nothing, is then just the best of what could be seen
        blind = [j.label for j in tested if j.status == "inconclusive" and j.evidence.strength == "unknown"
                 and walk.get(j.label, -1) >= 0]
        if blind:
            why = f"; the walk also followed {', '.join(blind[:3])}, whose checks could not see on these hosts"
        elif followed or len(_problems(swept)) <= 1:
            primary = followed or swept
            return Attribution(primary=primary, also_found=[j for j in ordered if j not in primary], links=links)
        else:
            why = "; the hosts carry several unrelated problems and the incident points to none"
        for j in ordered:
            links[j.label] += why
        return Attribution(also_found=ordered, links=links)
    # signatures are often generic (an NCCL error line fits several NCCL leaves): a confirmed leaf in the
    # sub-category the lines point to is the incident's; one elsewhere is something else the hosts carry
    categories = {_sub(label) for label in named}
    primary = [j for j in ordered if _sub(j.label) in categories]
    for j in ordered:
        links[j.label] += (f"; in the category of {', '.join(named[:3])}, which the incident's lines point to"
                           if j in primary else f"; the incident's lines point to {', '.join(named[:3])}, whose "
                                                "checks found nothing")
    return Attribution(primary=primary, also_found=[j for j in ordered if j not in primary], links=links)


def _sub(label: str) -> str:
    return ".".join(label.split(".")[:2])


def _text_fit(taxonomy: Taxonomy, summary: IncidentSummary, label: str) -> bool:
    node = taxonomy.node(label)
    return bool(node.matching_signatures(summary.text)) or bool(set(node.xids) & set(summary.entities.xids))


def _link(taxonomy: Taxonomy, summary: IncidentSummary, judgement: LeafJudgement,
          events: set[str]) -> tuple[int, str]:
    """(score, why): 2 for the text, 1 for a shared entity, 1 for an event in the incident's window, -1 when the
    incident names others of a kind."""
    score, why = 0, []
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
    named_hosts = {h.lower() for h in summary.entities.hosts}
    entities = [_entity(entry) for entry in judgement.evidence.matched]
    gpus = {g for g in map(_gpu_key, entities) if g}
    devices = {e.lower() for e in entities if e.lower().startswith(("mlx5_", "ib", "eth", "en", "bond", "hsn"))}
    shared = (gpus & named_gpus) | (devices & named_devices) | ({e.lower() for e in entities} & named_hosts)
    if shared:
        score += 1
        why.append("it is on " + ", ".join(sorted(shared)) + ", which the incident names")
    elif (gpus and named_gpus) or (devices and named_devices):
        score -= 1
        why.append("it is on " + ", ".join(sorted(gpus | devices)) + "; the incident names "
                   + ", ".join(sorted(named_gpus | named_devices)))
    return score, "; ".join(why) or "nothing in the incident's lines points to it"


def _problems(judgements: list[LeafJudgement]) -> list[set[str]]:
    """Confirmed leaves grouped into distinct problems: leaves on a shared GPU or NIC, or in one sub-category
    (MAIN.SUB), are one problem seen by several leaves (an ECC error is also a faulty GPU to DCGM)."""
    groups: list[set[str]] = []
    for j in judgements:
        keys = _places(j) | {"sub:" + ".".join(j.label.split(".")[:2])}
        joined = [g for g in groups if g & keys]
        for g in joined:
            groups.remove(g)
            keys |= g
        groups.append(keys)
    return groups


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
