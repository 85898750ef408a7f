"""The check manifest (verification_scripts/manifest.yaml), SKU profiles and known-bad versions."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.paths import SCRIPTS_DIR
from agent.yamlload import load_yaml

Tier = Literal["passive", "active", "intrusive"]
LIB_SCRIPTS = ("checklib.py", "checklib_gpu.py", "checklib_logs.py", "checklib_net.py", "checklib_xid.py",
               "checklib_record.py", "xid_catalog.csv", "sxid_catalog.csv")  # shipped with each script


class CheckSpec(BaseModel):
    id: str
    script: str
    description: str
    nodes: list[str]
    # logs: it reads the job's logs attached to the incident (given in its params), nothing of the host
    needs: list[Literal["gpu", "root", "idle_gpus", "two_nodes", "logs"]] = Field(default_factory=list)
    timeout_s: float = 60
    expected_cost_s: float = 1
    tier: Tier = "passive"
    compare: list[str] = Field(default_factory=list)
    # its evidence is events it dated inside the incident's window (log lines, SEL entries), not states
    events: bool = False
    # its evidence is the incident's own job caught as it fails (a stack dump of its hung ranks)
    job: bool = False

    @property
    def script_path(self) -> Path:
        return SCRIPTS_DIR / self.script

    @property
    def needs_approval(self) -> bool:
        return self.tier != "passive"

    @property
    def reads_attachments(self) -> bool:
        """It judges the incident's attached logs only: it can run on a host no GPU check can see."""
        return self.needs == ["logs"]


class Manifest(BaseModel):
    checks: list[CheckSpec]

    def get(self, check_id: str) -> CheckSpec:
        for spec in self.checks:
            if spec.id == check_id:
                return spec
        raise KeyError(f"unknown check {check_id!r}; valid: {', '.join(self.ids())}")

    def ids(self) -> list[str]:
        return [c.id for c in self.checks]

    def for_node(self, label: str) -> list[CheckSpec]:
        return [c for c in self.checks if label in c.nodes]


@lru_cache(maxsize=4)
def load_manifest(path: Path = SCRIPTS_DIR / "manifest.yaml") -> Manifest:
    return Manifest.model_validate(load_yaml(path.read_text()))


@lru_cache(maxsize=4)
def load_profiles(path: Path = SCRIPTS_DIR / "profiles.yaml") -> dict[str, dict[str, Any]]:
    return load_yaml(path.read_text())


def profile(name: str) -> dict[str, Any]:
    profiles = load_profiles()
    if name not in profiles:
        raise KeyError(f"unknown profile {name!r}; valid: {', '.join(profiles)}")
    return {"name": name, **profiles[name]}


@lru_cache(maxsize=1)
def load_known_bad(path: Path = SCRIPTS_DIR / "known_bad.yaml") -> dict[str, Any]:
    return load_yaml(path.read_text()) if path.exists() else {}
