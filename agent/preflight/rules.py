"""Known-bad combinations (knowledge/known_bad.yaml) checked against collected environments: versions the
knowledge base lists as defective, driver vs CUDA runtime, torch arch list vs GPU capability, OFED vs HPC-X,
and skew of versions across the hosts of one job."""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agent.checks.versions import known_bad_entry, vkey
from agent.paths import KNOWLEDGE_DIR, RESOURCES
from agent.preflight.collect import HostEnv
from agent.yamlload import load_yaml

RULES_PATH = KNOWLEDGE_DIR / "known_bad.yaml"


class RuleFinding(BaseModel):
    id: str
    severity: str  # FAIL (known-bad combination) | WARN (skew, minor-version compatibility)
    label: str  # taxonomy label the finding is evidence for
    hosts: list[str]
    message: str
    source: str = ""


@lru_cache(maxsize=4)
def load_rules(path: Path = RULES_PATH) -> dict[str, Any]:
    rules = load_yaml(path.read_text())
    rules["versions"] = load_yaml((RESOURCES / rules["version_lists"]).read_text()) or {}
    return rules


def min_driver_for(cuda: str, rules: dict[str, Any]) -> str | None:
    key = vkey(cuda)[:2]
    table = sorted(((vkey(str(k)), str(v)) for k, v in rules["min_driver_for_cuda"].items()), reverse=True)
    return next((driver for ver, driver in table if key >= ver), None)


def driver_max_cuda(driver: str, rules: dict[str, Any]) -> str | None:
    branch = (vkey(driver) or (0,))[0]
    table = sorted(((int(k), str(v)) for k, v in rules["driver_max_cuda"].items()), reverse=True)
    return next((cuda for floor, cuda in table if branch >= floor), None)


def capability(gpu_model: str, rules: dict[str, Any]) -> int | None:
    for name, cap in rules["gpu_capability"].items():
        if str(name).lower() in gpu_model.lower():
            major, minor = vkey(str(cap))[:2]
            return major * 10 + minor
    return None


def check_host(env: HostEnv, rules: dict[str, Any] | None = None) -> list[RuleFinding]:
    rules = rules or load_rules()
    combos = rules["combinations"]
    out: list[RuleFinding] = []

    def add(rule: str, severity: str | None = None, **facts: Any) -> None:
        spec = combos[rule]
        message = spec["message"].format(**{**env.model_dump(), **facts})
        out.append(RuleFinding(id=rule, severity=severity or spec["severity"], label=spec["label"],
                               hosts=[env.host], message=message))

    for section, field in rules["version_fields"].items():
        version = env.field_value(field)
        entry = known_bad_entry(section, version, rules["versions"]) if version else None
        if entry:
            severity = str(entry.get("severity") or "FAIL").upper()
            out.append(RuleFinding(id=f"known_bad_{section}", severity=severity, label=rules["version_labels"][section],
                                   hosts=[env.host], source=str(entry.get("source", "")),
                                   message=f"{section} {version} is known-bad: "
                                           f"{' '.join(str(entry['reason']).split())}"))
    if env.driver and env.cuda_runtime:
        need = min_driver_for(env.cuda_runtime, rules)
        if need and vkey(env.driver) < vkey(need):
            add("driver_too_old_for_cuda", need=need)
    top = driver_max_cuda(env.driver, rules) if env.driver else None
    if env.in_container and env.container_cuda and top and vkey(env.container_cuda)[:2] > vkey(top)[:2]:
        same_major = vkey(env.container_cuda)[0] == vkey(top)[0]
        add("container_cuda_newer_than_driver", "WARN" if same_major else None, driver_max=top)
    sm = capability(env.gpu_model, rules) if env.gpu_model else None
    if sm and env.arch_list:
        sass = [vkey(a.split("_", 1)[1])[0] for a in env.arch_list if a.startswith("sm_") and vkey(a.split("_", 1)[1])]
        ptx = [vkey(a.split("_", 1)[1])[0] for a in env.arch_list
               if a.startswith("compute_") and vkey(a.split("_", 1)[1])]
        # SASS runs on the same major with an equal or lower minor; PTX JIT-compiles forward
        if not any(s // 10 == sm // 10 and s <= sm for s in sass) and not any(p <= sm for p in ptx):
            add("arch_unsupported", sm=sm, arch_list=" ".join(env.arch_list))
    if env.ofed and env.hpcx_ofed and not any(_same_ofed(env.ofed, h) for h in env.hpcx_ofed):
        add("ofed_hpcx_mismatch", hpcx_ofed=", ".join(env.hpcx_ofed))
    return out


def _same_ofed(have: str, built_for: str) -> bool:
    """OFED releases compare on their X.Y-Z (MLNX_OFED_LINUX-23.10-1.1.9.0 and 23.10-1.1.9.0 are one)."""
    a, b = vkey(have.split("LINUX-")[-1]), vkey(built_for.split("LINUX-")[-1])
    return a[:2] == b[:2]


def check_skew(envs: list[HostEnv], rules: dict[str, Any] | None = None) -> list[RuleFinding]:
    rules = rules or load_rules()
    out: list[RuleFinding] = []
    if len(envs) < 2:
        return out
    for field, label in rules["skew"].items():
        values = {e.host: e.field_value(field) for e in envs if e.field_value(field)}
        if len(set(values.values())) < 2:
            continue
        common, _ = Counter(values.values()).most_common(1)[0]
        odd = sorted(h for h, v in values.items() if v != common) if list(values.values()).count(common) > len(
            values) / 2 else sorted(values)
        listing = ", ".join(f"{h}={v}" for h, v in sorted(values.items()))
        out.append(RuleFinding(id=f"skew_{field}", severity="WARN", label=label, hosts=odd,
                               message=f"{field} differs across hosts: {listing}"))
    return out


def check_all(envs: list[HostEnv], rules: dict[str, Any] | None = None) -> list[RuleFinding]:
    rules = rules or load_rules()
    return [f for env in envs for f in check_host(env, rules)] + check_skew(envs, rules)
