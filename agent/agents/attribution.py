"""Which confirmed cause caused *this* incident, and how sure we are: real hosts carry old and unrelated problems,
so a leaf whose checks confirm it is scored for its claim to be this incident's cause, once, from what an expert
weighs, and the score decides.

What is weighed for each confirmed leaf (`Features`):
  - ties to the incident: its lines (a signature or one of its Xids), its window (a finding of a check whose
    manifest entry says `events: true`: an event dated inside the window, not a state the host may have carried for
    weeks; or `job: true`: the incident's own job caught as it fails, its hung ranks' stacks), the devices and hosts
    it names (a finding on a GPU or NIC the incident names; on a job of several hosts, a host it names). When the
    incident names GPUs or NICs and every finding of that kind is on others, the leaf is held against the incident;
  - fit: how the incident reads before any check (the leaf's rank among every leaf: its lines, its similarity, the
    causes of similar past incidents), and whether the leaf fails jobs the way the incident says they failed
    (its symptom classes, weighted by how few leaves show the same class: "hang" is shown by a third of them,
    "reboot" by a tenth);
  - competition: the leaves the incident's lines point to which the checks did not confirm (they lower the claim of a
    leaf elsewhere, and raise one in their own sub-category: an NCCL error line fits several NCCL leaves), the
    other confirmed leaves nothing ties either that fit the incident (a host that carries several old problems makes
    each less likely; one the incident neither reads like nor shows the symptoms of explains it no better than none),
    and the likelier causes that could not be checked from this view (a container sees no kernel log).
The job's shape is no weight but a rule: a leaf that breaks only traffic between hosts (taxonomy `between_hosts`) is
no candidate for a job on one host (`_off_path`), unless the incident's lines name it.
`CLAIM_WEIGHTS` turn them into one probability that the leaf is the incident's cause, against the other confirmed
leaves and against none of them (a conditional logit; `python -m eval.attribution_fit` fits it on traced benchmark
runs and prints its reliability).

The levels a reader sees:
  - confirmed: the incident's own lines, devices or time tie the leaf to it;
  - probable: nothing ties any leaf, and this one is a state the hosts are in now that fits the incident (the
    incident reads like it or shows one of its symptoms) with claim >= PROBABLE: it answers the customer, said as
    probable;
  - anything else confirmed is "also found on the hosts, not the cause of this incident", with why.
What happened to the cause's own GPU or NIC (an uncorrectable ECC error's pending row remap) is one failure: those
leaves follow from the cause (`follows`), they are not causes of their own. So are the leaves the taxonomy says a
cause implies wherever it is (a node never provisioned has no container runtime configured): the cause takes their
claim and their ties to the incident.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, Field

from agent.incident import IncidentSummary
from agent.reasoning import symptoms, text_signals
from agent.reasoning.base import LeafJudgement
from agent.taxonomy import Taxonomy

Level = Literal["confirmed", "probable"]
LEVELS: tuple[Level, ...] = ("confirmed", "probable")
# a cause nothing ties is claimed when it is more likely than not (eval/results/diagnosis/attribution.md)
PROBABLE = 0.5
# a leaf among the incident's READS_LIKE likeliest causes before any check is one the incident reads like
READS_LIKE = 10
# the conditional logit's weights over `Features`, fitted by eval/attribution_fit.py (L2 1.0) on traced runs of the
# dev fleet (confound seeds 1-3 and controls) and of the public incidents (eval/incidents/, confound seed 1): of the
# fits tried, the one with the best leaf micro-F1 on both sets with controls under 15 %. A fit that also sees the
# public controls is more cautious (eval/results/diagnosis/attribution.md, "fitted on both").
CLAIM_WEIGHTS: dict[str, float] = {
    "bias": -0.1, "text": 2.53, "dated": 2.09, "entity": 0.0, "held": 0.22, "reading": 2.23,
    "symptom": 1.56, "named_sub": 0.93, "named_elsewhere": -0.81, "rivals": -0.36, "blind": -0.74,
}
GPU_ENTITY = re.compile(r"^GPU\s?(\d{1,2})$", re.IGNORECASE)
BUS = re.compile(r"(?:[0-9a-f]{4,8}:)?([0-9a-f]{2}):([0-9a-f]{2})\.?([0-7])?", re.IGNORECASE)
NIC_PREFIXES = ("mlx5_", "ib", "eth", "en", "bond", "hsn")
# RDMA devices (ibv_devinfo's names); every other NIC name is a network interface: an incident that names eth0 says
# nothing about which HCA a finding is on
RDMA_PREFIXES = ("mlx", "bnxt_re", "irdma", "efa", "hfi1", "qedr", "erdma")


class Features(BaseModel):
    """What an expert weighs about one confirmed leaf's claim to be the incident's cause (module docstring)."""

    text: bool = False  # the incident's lines match it
    dated: bool = False  # an event behind it is dated inside the incident's window, or the job itself shows it
    entity: bool = False  # a finding behind it is on a device (or host) the incident names
    held: bool = False  # the incident names devices of its kind, and every finding of that kind is on others
    # (it blocks the device tie, and counts against the claim as the model weighs it)
    reading: float = 0.0  # 1 / its rank in the incident's reading before any check (1 = likeliest)
    symptom: float = 0.0  # how specifically its symptom classes fit the incident's words (0: not at all)
    named_sub: bool = False  # it is in the sub-category of a leaf the lines point to which the checks did not confirm
    named_elsewhere: bool = False  # the lines point to leaves elsewhere which the checks did not confirm
    rivals: int = 0  # other confirmed leaves nothing ties either that fit the incident (`_fits`)
    # the incident's likelier causes (by its reading) whose checks could not see (UNKNOWN: a tool missing or
    # refused in this view): sum of 1/rank over them; a state found here competes with what could not be looked at
    blind: float = 0.0

    @property
    def tied(self) -> bool:
        """The incident's own lines, devices or time tie it (a held-against leaf needs its lines)."""
        return self.text or ((self.dated or self.entity) and not self.held)

    def vector(self) -> dict[str, float]:
        return {"text": float(self.text), "dated": float(self.dated), "entity": float(self.entity),
                "held": float(self.held), "reading": self.reading, "symptom": self.symptom,
                "named_sub": float(self.named_sub), "named_elsewhere": float(self.named_elsewhere),
                "rivals": float(min(self.rivals, 3)), "blind": self.blind}


class Attribution(BaseModel):
    primary: list[LeafJudgement] = Field(default_factory=list)  # the causes of this incident, primary first
    follows: list[LeafJudgement] = Field(default_factory=list)  # what followed from a cause on its own device
    also_found: list[LeafJudgement] = Field(default_factory=list)  # confirmed on the hosts, not this incident's
    links: dict[str, str] = Field(default_factory=dict)  # label -> how it is tied to the incident (or not), one line
    levels: dict[str, Level] = Field(default_factory=dict)  # label of a primary cause -> its level
    claims: dict[str, float] = Field(default_factory=dict)  # label -> probability that it is the incident's cause


class Suspected(BaseModel):
    """A cause the text and history point to that no check here could see: suspected (not checked), with the
    commands whoever can see it (the provider, on the host) must run."""

    label: str
    rank: int  # its place in the incident's reading before any check
    why: str  # why it could not be checked here
    commands: list[str] = Field(default_factory=list)


def claims(found: dict[str, Features], weights: dict[str, float] | None = None) -> dict[str, float]:
    """Each confirmed leaf's probability of being the incident's cause, against the others and against "none of
    them" (a conditional logit: the hosts may carry only old problems, and the cause may be one no check saw)."""
    w = weights or CLAIM_WEIGHTS
    odds = {label: math.exp(min(50.0, w.get("bias", 0.0) + sum(w.get(name, 0.0) * value
                                                                 for name, value in f.vector().items())))
            for label, f in found.items()}
    total = 1.0 + sum(odds.values())
    return {label: value / total for label, value in odds.items()}


def attribute(taxonomy: Taxonomy, summary: IncidentSummary, confirmed: list[LeafJudgement],
              tested: list[LeafJudgement], reading: dict[str, int] | None = None, hosts: int = 1,
              weights: dict[str, float] | None = None) -> Attribution:
    """`reading`: each leaf's rank (1 = likeliest) in the reasoner's reading of the incident before any check;
    `hosts`: how many hosts the job has; `weights`: the claim model's (default CLAIM_WEIGHTS)."""
    unique = list({j.label: j for j in confirmed}.values())
    if not unique:
        return Attribution()
    elsewhere = _off_path(taxonomy, summary, unique, hosts)
    candidates = [j for j in unique if j.label not in elsewhere]
    found = {j.label: features(taxonomy, summary, j, tested, candidates, reading or {}, hosts) for j in candidates}
    scores = claims({label: f for label, (f, _) in found.items()}, weights)
    links = {label: why for label, (_, why) in found.items()}
    implied = _implied(taxonomy, candidates)
    tied_labels = {label for label, (f, _) in found.items() if f.tied}
    for label, cause in implied.items():  # one failure: the cause takes what followed from it, claim and ties
        scores[cause] += scores[label]
        links[label] = f"followed from {cause}, which always brings it"
        if label in tied_labels:
            tied_labels.add(cause)
            links[cause] += f"; the incident's lines, devices or time tie {label}, which follows from it"
    ranks = reading or {}
    fits = {j.label: _fits(taxonomy, summary, j.label, ranks) for j in candidates}
    ordered = sorted(candidates, key=lambda j: (-scores[j.label], ranks.get(j.label, len(ranks) + 1)))
    causes = [j for j in ordered if j.label not in implied]
    tied = [j for j in causes if j.label in tied_labels]
    level: Level = "confirmed"
    if tied:
        primary = tied
    else:
        primary = [j for j in causes if scores[j.label] >= PROBABLE and fits[j.label]]
        level = "probable"
    followed = _follows(primary, causes, links)
    follows = [j for j in ordered if j.label in followed or j.label in implied]
    primary = [j for j in primary if j not in follows]
    for label, cause in followed.items():  # one failure: what followed from the cause is its claim too
        scores[cause] += scores[label]
    rest = [j for j in ordered if j not in primary and j not in follows]
    for j in rest:
        links[j.label] += "; " + (f"{primary[0].label} explains the incident better" if primary else
                                  f"too weak a claim to name it ({scores[j.label]:.2f})" if fits[j.label]
                                  else "the incident neither reads like it nor shows its symptoms")
    for j in unique:
        if j.label in elsewhere:
            rest.append(j)
            scores[j.label] = 0.0
            links[j.label] = elsewhere[j.label]
    return Attribution(primary=primary, follows=follows, also_found=rest, links=links,
                       levels={j.label: level for j in primary},
                       claims={label: round(p, 3) for label, p in scores.items()})


def features(taxonomy: Taxonomy, summary: IncidentSummary, judgement: LeafJudgement, tested: list[LeafJudgement],
             confirmed: list[LeafJudgement], reading: dict[str, int], hosts: int) -> tuple[Features, str]:
    """(features, why in one line) of one confirmed leaf."""
    events = {spec.id for spec in taxonomy.manifest.checks if spec.events}
    jobs = {spec.id for spec in taxonomy.manifest.checks if spec.job}
    f = Features(text=_text_fit(taxonomy, summary, judgement.label))
    why: list[str] = ["the incident's lines match it"] if f.text else []
    failed = {entry.partition(":")[0] for entry in judgement.evidence.matched if entry.endswith("(FAIL)")}
    if dated := sorted(failed & events):
        why.append("it happened in the incident's window (" + ", ".join(dated) + ")")
    if caught := sorted(failed & jobs):
        why.append("the incident's own job shows it (" + ", ".join(caught) + ")")
    f.dated = bool(dated or caught)
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
        f.entity = True
        why.append("it is on " + ", ".join(sorted(shared)) + ", which the incident names")
    elif (gpus and named_gpus) or {_kind(d) for d in devices} & {_kind(d) for d in named_devices}:
        f.held = True
        why.append("it is on " + ", ".join(sorted(gpus | devices)) + "; the incident names "
                   + ", ".join(sorted(named_gpus | named_devices)))
    rank = reading.get(judgement.label)
    if rank:
        f.reading = 1.0 / rank
    fits = _symptom_fit(taxonomy, summary.text, judgement.label)
    if fits:
        f.symptom, words = fits
        why.append(f"it fails jobs the way the incident says ({words})")
    named = [j.label for j in tested if j.status != "confirmed" and _text_fit(taxonomy, summary, j.label)]
    if named:
        f.named_sub = _sub(judgement.label) in {_sub(label) for label in named}
        f.named_elsewhere = not f.named_sub
        where = "in the category of" if f.named_sub else "the incident's lines point to"
        why.append(f"{where} {', '.join(named[:3])}, which the checks did not confirm")
    # a state that fits the incident in no way explains it no better than "none of them": it is no rival
    f.rivals = sum(1 for other in confirmed if other.label != judgement.label
                   and not _text_fit(taxonomy, summary, other.label) and _fits(taxonomy, summary, other.label, reading))
    unseen = [(reading[j.label], j.label) for j in tested if j.status == "inconclusive" and j.evidence.unknown
              and reading.get(j.label) and (not rank or reading[j.label] < rank)]
    if unseen:
        f.blind = sum(1.0 / r for r, _ in unseen)
        why.append("likelier causes could not be checked here (" + ", ".join(label for _, label in sorted(unseen)[:3])
                   + ")")
    if rank and rank <= READS_LIKE:
        why.append(f"the incident reads like it (its likely cause no. {rank} before any check)")
    if not f.tied:
        why.insert(0, "a state the hosts are in: nothing dates it to the incident or puts it on what the incident "
                      "names")
    return f, "; ".join(why)


def _follows(primary: list[LeafJudgement], ordered: list[LeafJudgement], links: dict[str, str]) -> dict[str, str]:
    """Confirmed leaves on a primary cause's own GPU or NIC -> that cause: what the cause did to its device (an
    uncorrectable ECC error's pending row remap), one failure with it, not a cause of its own."""
    follows: dict[str, str] = {}
    for cause in primary:
        if cause.label in follows:
            continue
        places = _places(cause)
        for j in ordered:
            if j is cause or j.label in follows or (j in primary and primary.index(j) < primary.index(cause)):
                continue
            if shared := _places(j) & places:
                follows[j.label] = cause.label
                links[j.label] = f"followed from {cause.label} on {', '.join(sorted(shared))}"
    return follows


def _implied(taxonomy: Taxonomy, confirmed: list[LeafJudgement]) -> dict[str, str]:
    """Confirmed leaves that another confirmed leaf implies (taxonomy `implies`) -> the cause at the top of the chain
    (a node never provisioned -> no kernel module -> no device nodes: the device nodes follow from the first)."""
    found = {j.label for j in confirmed}
    cause_of = {other: j.label for j in confirmed for other in taxonomy.node(j.label).implies
                if other in found and other != j.label}
    out = {}
    for label, cause in cause_of.items():
        seen = {label}
        while cause in cause_of and cause not in seen:  # a taxonomy not validated may loop
            seen.add(cause)
            cause = cause_of[cause]
        if cause != label:
            out[label] = cause
    return out


def _off_path(taxonomy: Taxonomy, summary: IncidentSummary, confirmed: list[LeafJudgement],
              hosts: int) -> dict[str, str]:
    """Confirmed leaves on a path the incident's job never used -> why: a job on one host (the hosts aidai was
    given, and the incident's own words) sends nothing between hosts, so a cause that breaks only that traffic
    (taxonomy `between_hosts`) is not its cause, unless the incident's lines name it."""
    words = text_signals.one_host(summary.text) if hosts <= 1 else None
    if not words:
        return {}
    return {j.label: f"a state the hosts are in; the job runs on one host ({words}), and it breaks only traffic "
                     "between hosts"
            for j in confirmed if taxonomy.node(j.label).between_hosts and not _text_fit(taxonomy, summary, j.label)}


def _kind(device: str) -> str:
    return "rdma" if device.startswith(RDMA_PREFIXES) else "interface"


def _fits(taxonomy: Taxonomy, summary: IncidentSummary, label: str, reading: dict[str, int]) -> bool:
    """The incident reads like it (among its READS_LIKE likeliest causes) or shows one of its symptoms: a state
    that fits in neither way is never probable, however alone it is on the hosts, and competes with no other."""
    rank = reading.get(label)
    return bool(rank and rank <= READS_LIKE) or _symptom_fit(taxonomy, summary.text, label) is not None


def _sub(label: str) -> str:
    return ".".join(label.split(".")[:2])


def _text_fit(taxonomy: Taxonomy, summary: IncidentSummary, label: str) -> bool:
    node = taxonomy.node(label)
    return bool(node.matching_signatures(summary.text)) or bool(set(node.xids) & set(summary.entities.xids))


@lru_cache(maxsize=8)
def _symptom_rarity(taxonomy: Taxonomy) -> dict[str, float]:
    """Each symptom class's specificity in [0, 1]: log(leaves / leaves showing it) / log(leaves)."""
    leaves = list(taxonomy.leaves())
    counts = Counter(s for leaf in leaves for s in leaf.symptoms)
    return {s: math.log(len(leaves) / n) / math.log(len(leaves)) for s, n in counts.items()}


def _symptom_fit(taxonomy: Taxonomy, text: str, label: str) -> tuple[float, str] | None:
    """(specificity, the words) of the rarest symptom class the leaf shares with the incident's words."""
    words = symptoms.shown(text)
    rarity = _symptom_rarity(taxonomy)
    shared = [(rarity.get(s, 0.0), words[s]) for s in taxonomy.node(label).symptoms if s in words]
    return max(shared) if shared else None


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
