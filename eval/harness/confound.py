"""A realistic fleet around each benchmark record (`aidai eval --confound SEED`, `--controls`).

For every record that lacks them, draw from the base rates in confound_rates.yaml (sources in eval/CONFOUND.md):
the `view` the person diagnosing has, `latent` faults (old, unrelated problems already on the hosts, each with
`age_h` and `host`) and, when the incident text names several nodes, a multi-node `hosts` list with the cause on
one of them. Every draw comes from random.Random(f"{seed}:{record id}:{field}"): the same seed gives the same
fleet in any order, on any machine, and one field's rule can change without moving the others' draws.

A control (`--controls`) is the same record without its cause's faults (latent and noise kept, `control: true`):
nothing on the hosts explains the incident, so the right outcome is no confirmed cause.
"""

from __future__ import annotations

import copy
import math
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

RATES_FILE = Path(__file__).with_name("confound_rates.yaml")
VIEWS = ("bare-metal", "vm", "container")
MAX_TRIES = 30  # candidates tried per latent fault before giving up on it (a small profile may allow few)
WORD_NUMBERS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}
# Faults whose effect sits on a GPU index without a `gpu` param (the sim puts them on GPU 0).
IMPLICIT_GPU0 = ("user.device_assignment", "user.checkpoint_gpu0")


@lru_cache(maxsize=4)
def load_rates(path: Path = RATES_FILE) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not {"view", "latent", "nodes"} <= set(data):
        raise ValueError(f"{path}: needs the sections view, latent and nodes")
    return data


def rng(seed: int, record_id: str, what: str) -> random.Random:
    """The stream for one field of one record (never the global RNG)."""
    return random.Random(f"{seed}:{record_id}:{what}")


def _pick(r: random.Random, weights: dict[Any, float]) -> Any:
    keys = [k for k, w in weights.items() if w > 0]
    return r.choices(keys, weights=[float(weights[k]) for k in keys])[0]


def _text(record: dict[str, Any]) -> str:
    return f"{record.get('description', '')}\n{record.get('environment', '') or ''}"


# ---- the fault registry (read only) ------------------------------------------------------------------------
def _registry() -> dict[str, Any]:
    from agent.sim import faults as _load_all  # noqa: F401 - registers every fault module
    from agent.sim.faults.registry import REGISTRY

    return REGISTRY


def _param(spec: dict[str, Any], name: str) -> Any:
    """A fault spec's param, or the registry's default when the spec leaves it out."""
    if name in spec:
        return spec[name]
    definition = _registry().get(str(spec.get("fault")))
    for p in getattr(definition, "params", ()):
        if p.name == name:
            return p.default
    return None


def _has_param(fid: str, name: str) -> bool:
    definition = _registry().get(fid)
    return any(p.name == name for p in getattr(definition, "params", ()))


def _leaf(fid: str) -> str | None:
    definition = _registry().get(fid)
    return definition.leaf if definition is not None else None


def _scope(fid: str) -> str:
    definition = _registry().get(fid)
    return definition.scope if definition is not None else "host"


# ---- view ----------------------------------------------------------------------------------------------------
def view_weights(record: dict[str, Any], rates: dict[str, Any]) -> dict[str, float]:
    """The base rates, each view's multiplied by its cue factor when the incident text carries a cue for it."""
    weights = {v: float(w) for v, w in rates["view"]["base"].items()}
    text = _text(record)
    for view, cue in (rates["view"].get("cues") or {}).items():
        if any(re.search(p, text, re.I) for p in cue["patterns"]):
            weights[view] *= float(cue["factor"])
    return weights


def draw_view(record: dict[str, Any], seed: int, rates: dict[str, Any]) -> str:
    return str(_pick(rng(seed, str(record["id"]), "view"), view_weights(record, rates)))


# ---- nodes ---------------------------------------------------------------------------------------------------
def named_node_count(text: str, rates: dict[str, Any]) -> int | None:
    """How many nodes the text names: an explicit "<n> nodes" (n >= 2, capped), 0 for a multi-node cue without
    a number, None for a single-node text."""
    cfg = rates["nodes"]
    counts = [int(m.group(1)) for m in re.finditer(cfg["nnodes_pattern"], text, re.I) if int(m.group(1)) >= 2]
    for m in re.finditer(cfg["count_pattern"], text, re.I):
        word = m.group(1).lower()
        n = WORD_NUMBERS.get(word) or (int(word) if word.isdigit() else 0)
        if n >= 2:
            counts.append(n)
    if counts:
        return min(max(counts), int(cfg["max"]))
    names = {m.group(0).lower().replace("_", "-") for m in re.finditer(cfg["hostname_pattern"], text, re.I)}
    if len(names) >= 2 or any(re.search(p, text, re.I) for p in cfg["cues"]):
        return 0
    return None


def draw_hosts(record: dict[str, Any], seed: int, rates: dict[str, Any]) -> list[str] | None:
    """The job's nodes when the text names several and the record has fewer than two; None: keep the record's."""
    have = list(record.get("hosts") or [])
    if len(have) >= 2:
        return None
    named = named_node_count(_text(record), rates)
    if named is None:
        return None
    n = named or int(_pick(rng(seed, str(record["id"]), "nodes"), {int(k): v for k, v in
                                                                     rates["nodes"]["weights"].items()}))
    names = have or ["node-1"]
    k = 1
    while len(names) < n:
        k += 1
        if f"node-{k}" not in names:
            names.append(f"node-{k}")
    return names


def place_cause(faults: list[dict[str, Any]], hosts: list[str], r: random.Random,
                rates: dict[str, Any]) -> list[dict[str, Any]]:
    """The cause on one drawn node: every host-scope cause fault without a `host` gets the same one (a job
    fails on one node). Scenario-scope faults (version skew across nodes) and ones naming a host keep theirs; a
    job-wide version fault goes on every node (the image's version, not a skew between nodes)."""
    target = r.choice(hosts)
    job_wide = set(rates.get("job_wide") or [])
    out: list[dict[str, Any]] = []
    for spec in faults:
        fid = str(spec.get("fault"))
        if "host" in spec or _scope(fid) == "scenario":
            out.append(dict(spec))
        elif fid in job_wide:
            out += [{**spec, "host": host} for host in hosts]
        else:
            out.append({**spec, "host": target})
    return out


# ---- latent faults -------------------------------------------------------------------------------------------
def latent_weights(rates: dict[str, Any]) -> dict[str, float]:
    """Fault id -> weight: each study category's count split over its faults by their within-category shares."""
    weights: dict[str, float] = {}
    for cat in rates["latent"]["categories"].values():
        shares = cat.get("faults") or {}
        total = sum(float(s) for s in shares.values())
        for fid, share in shares.items():
            weights[fid] = weights.get(fid, 0.0) + float(cat["count"]) * float(share) / total
    excluded = set(rates["latent"].get("exclude") or [])
    return {fid: w for fid, w in weights.items() if fid not in excluded}


def _groups(fid: str, rates: dict[str, Any]) -> set[str]:
    return {name for name, members in (rates["latent"].get("groups") or {}).items() if fid in members}


@dataclass
class CauseFootprint:
    """What the cause touches, so a latent fault never masks or contradicts it."""

    ids: set[str]
    leaves: set[str]
    groups: set[str]
    gpus: set[int]
    hcas: set[str]


def cause_footprint(faults: list[dict[str, Any]], rates: dict[str, Any]) -> CauseFootprint:
    fp = CauseFootprint(set(), set(), set(), set(), set())
    for spec in faults:
        fid = str(spec.get("fault"))
        fp.ids.add(fid)
        if (leaf := _leaf(fid)) is not None:
            fp.leaves.add(leaf)
        fp.groups |= _groups(fid, rates)
        gpu = _param(spec, "gpu") if _has_param(fid, "gpu") else (0 if fid in IMPLICIT_GPU0 else None)
        if gpu is not None:
            fp.gpus.add(int(gpu))
        for name in ("hca", "value"):  # ib.port_down's port, nccl.ib_hca_bad's NCCL_IB_HCA list
            value = _param(spec, name) if _has_param(fid, name) else None
            fp.hcas |= set(re.findall(r"mlx5_\d+", str(value or "")))
    return fp


def incident_devices(text: str) -> CauseFootprint:
    """The GPU indices and mlx5 HCAs an incident text names."""
    from agent.reasoning.text_signals import entities

    found = entities(text)
    gpus = {int(m.group(1)) for g in found.gpus if (m := re.fullmatch(r"GPU(\d+)", g))}
    hcas = {d for d in found.devices if re.fullmatch(r"mlx5_\d+", d)}
    return CauseFootprint(set(), set(), set(), gpus, hcas)


def allowed(fid: str, host: str, cause: CauseFootprint, drawn: list[dict[str, Any]],
            rates: dict[str, Any]) -> bool:
    """The compatibility rule (CONFOUND.md): not excluded, not the cause's id or leaf, no shared group with the
    cause (any host: versions and settings are job-wide) nor with a latent already on this host, one per id per
    host."""
    if fid in set(rates["latent"].get("exclude") or []) or fid in cause.ids or _leaf(fid) in cause.leaves:
        return False
    groups = _groups(fid, rates)
    if groups & cause.groups:
        return False
    for other in drawn:
        if other["host"] == host and (other["fault"] == fid or groups & _groups(other["fault"], rates)):
            return False
    return True


def draw_age(r: random.Random, rates: dict[str, Any]) -> float:
    buckets = rates["latent"]["age_h"]
    b = buckets[_pick(r, {i: float(x["weight"]) for i, x in enumerate(buckets)})]
    low, high = math.log(float(b["low"])), math.log(float(b["high"]))
    return round(math.exp(r.uniform(low, high)), 1)


def _profile_counts(profile: str) -> tuple[int, int]:
    from agent.checks.manifest import profile as load_profile

    prof = load_profile(profile)
    return int(prof.get("gpu_count") or 8), int(prof.get("hca_count") or 0)


def _latent_params(fid: str, r: random.Random, used_gpus: set[int], used_hcas: set[str],
                   gpu_count: int, hca_count: int) -> dict[str, Any] | None:
    """Params for a latent fault: a GPU and an HCA the cause and the other latents do not name; defaults else."""
    spec: dict[str, Any] = {"fault": fid}
    if _has_param(fid, "gpu"):
        free = [g for g in range(gpu_count) if g not in used_gpus]
        if not free:
            return None
        spec["gpu"] = r.choice(free)
    if _has_param(fid, "hca"):
        free_hcas = [f"mlx5_{i}" for i in range(hca_count) if f"mlx5_{i}" not in used_hcas]
        if not free_hcas:
            return None
        spec["hca"] = r.choice(free_hcas)
    return spec


def _builds(faults: list[dict[str, Any]], noise: list[dict[str, Any]], profile: str, hosts: list[str],
            latent: list[dict[str, Any]]) -> bool:
    """Whether the simulator accepts the cause with these latent faults (profile support, params, hosts)."""
    from agent.sim.faults.registry import FaultError
    from agent.sim.scenario import build_hosts

    try:
        build_hosts(faults, noise, profile, hosts, latent)
    except (FaultError, KeyError, ValueError, IndexError):
        return False
    return True


def draw_latent(record: dict[str, Any], faults: list[dict[str, Any]], hosts: list[str], seed: int,
                rates: dict[str, Any], validate: bool = True) -> list[dict[str, Any]]:
    """0..k latent faults (count drawn), each on a uniformly drawn host, weighted by fleet-study frequency, and
    compatible with the cause (see `allowed`); GPU and HCA indices never repeat the cause's or each other's."""
    r = rng(seed, str(record["id"]), "latent")
    k = int(_pick(r, {int(n): w for n, w in rates["latent"]["count"].items()}))
    profile = record.get("profile") or "H100-SXM-8"
    gpu_count, hca_count = _profile_counts(profile)
    cause = cause_footprint(faults, rates)
    # the GPUs and NICs the incident's own lines name are the cause's, as far as anyone reading it can tell: a latent
    # fault there could not be told from the cause by any tool, so none is drawn there
    named = incident_devices(f"{record.get('description') or ''}\n{record.get('environment') or ''}")
    cause.gpus |= named.gpus
    cause.hcas |= named.hcas
    weights = latent_weights(rates)
    job_wide = set(rates.get("job_wide") or [])
    drawn: list[dict[str, Any]] = []
    for _ in range(k):
        for _try in range(MAX_TRIES):
            host = r.choice(hosts)
            choices = {fid: w for fid, w in weights.items() if allowed(fid, host, cause, drawn, rates)}
            if not choices:
                break
            fid = str(_pick(r, choices))
            on = hosts if fid in job_wide else [host]  # an image's version is on every node of the job
            if not all(allowed(fid, h, cause, drawn, rates) for h in on):
                continue
            used_gpus = cause.gpus | {int(d["gpu"]) for d in drawn if "gpu" in d}
            used_hcas = cause.hcas | {str(d["hca"]) for d in drawn if "hca" in d}
            spec = _latent_params(fid, r, used_gpus, used_hcas, gpu_count, hca_count)
            if spec is None:
                continue
            spec["age_h"] = draw_age(r, rates)
            new = [{**spec, "host": h} for h in on]
            if validate and not _builds(faults, record.get("noise") or [], profile, hosts, [*drawn, *new]):
                continue
            drawn += new
            break
    return drawn


# ---- records -------------------------------------------------------------------------------------------------
def confound_record(record: dict[str, Any], seed: int, rates: dict[str, Any] | None = None,
                    validate: bool = True) -> dict[str, Any]:
    """The record with every realistic-fleet field it lacks drawn (fields it has are kept as they are)."""
    rates = rates or load_rates()
    out = copy.deepcopy(record)
    rid = str(out["id"])
    faults = list(out.get("faults") or [])
    if "view" not in out:
        out["view"] = draw_view(out, seed, rates)
    drawn_hosts = draw_hosts(out, seed, rates)
    if drawn_hosts is not None:
        out["hosts"] = drawn_hosts
        faults = place_cause(faults, drawn_hosts, rng(seed, rid, "cause-host"), rates)
        out["faults"] = faults
    hosts = out["hosts"] = list(out.get("hosts") or ["node-1"])  # written out: a latent fault names its host
    if "latent" not in out:
        out["latent"] = draw_latent(out, faults, hosts, seed, rates, validate)
    out["confound_seed"] = seed
    return out


def control_record(record: dict[str, Any]) -> dict[str, Any]:
    """The record without its cause: `faults` empty, latent and noise kept, `control: true`; `label` stays the
    cause it had (the row says what was removed), and the right outcome is no confirmed cause."""
    out = copy.deepcopy(record)
    out["faults"] = []
    out["control"] = True
    return out


def confound_records(records: list[dict[str, Any]], seed: int | None, controls: bool = False,
                     rates: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """`--confound SEED` (None: records as they are) and then, with `--controls`, their controls."""
    out = [confound_record(r, seed, rates) if seed is not None else copy.deepcopy(r) for r in records]
    return [control_record(r) for r in out] if controls else out
