"""Fault and noise registry: ids from FAULTS.md, their params, and the function that applies each.

A fault is a function on `HostState` (scope "host") or on the whole scenario (scope "scenario",
e.g. version skew across hosts). Unknown ids and bad params raise `FaultError` naming what is valid.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.sim.state import HostState


class FaultError(ValueError):
    """A fault spec that cannot be applied; the message says what would be valid."""


@dataclass(frozen=True)
class Param:
    name: str
    kind: type = str  # int | float | str | list (of ints)
    default: Any = None
    required: bool = False
    choices: tuple[str, ...] = ()
    help: str = ""

    def coerce(self, fault_id: str, value: Any) -> Any:
        try:
            if self.kind is list:
                if isinstance(value, str):
                    value = [v for v in value.replace(";", " ").replace("|", " ").split() if v]
                if not isinstance(value, list):
                    value = [value]
                return [int(v) for v in value]
            if self.kind is int:
                return int(value)
            if self.kind is float:
                return float(value)
            value = str(value)
        except (TypeError, ValueError):
            raise FaultError(f"{fault_id}: param {self.name}={value!r} is not a {self.kind.__name__}") from None
        if self.choices and value not in self.choices:
            raise FaultError(f"{fault_id}: param {self.name}={value!r}; valid: {', '.join(self.choices)}")
        return value


HostApply = Callable[[HostState, dict[str, Any]], None]
ScenarioApply = Callable[[list[HostState], dict[str, Any]], None]


@dataclass(frozen=True)
class FaultDef:
    id: str
    leaf: str | None  # taxonomy leaf; None for noise
    apply: Callable[..., None]
    params: tuple[Param, ...] = ()
    scope: str = "host"  # "host": applied to one host; "scenario": to the list of hosts
    min_hosts: int = 1
    summary: str = ""

    @property
    def is_noise(self) -> bool:
        return self.leaf is None


@dataclass
class FaultSpec:
    """A validated fault with its params; `host` names the host it applies to (None: the first)."""

    definition: FaultDef
    params: dict[str, Any] = field(default_factory=dict)
    host: str | None = None

    @property
    def id(self) -> str:
        return self.definition.id


REGISTRY: dict[str, FaultDef] = {}


def fault(fid: str, leaf: str | None, *params: Param, scope: str = "host", min_hosts: int = 1):
    """Register `fn` as the function that applies fault `fid` (noise when leaf is None)."""

    def register(fn: Callable[..., None]) -> Callable[..., None]:
        if fid in REGISTRY:
            raise RuntimeError(f"fault {fid} registered twice")
        REGISTRY[fid] = FaultDef(fid, leaf, fn, tuple(params), scope, min_hosts, (fn.__doc__ or "").strip())
        return fn

    return register


def noise(fid: str, *params: Param):
    return fault(fid, None, *params)


def parse_cli_spec(text: str) -> dict[str, Any]:
    """`ID[:k=v,k=v]` as typed on the command line, into a record-style dict `{fault: ID, k: v}`."""
    fid, _, rest = text.strip().partition(":")
    spec: dict[str, Any] = {"fault": fid}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise FaultError(f"{fid}: bad param {part!r}; write key=value")
        spec[key.strip()] = value.strip()
    return spec


def resolve(spec: dict[str, Any], want_noise: bool | None = None) -> FaultSpec:
    """Validate a record-style fault dict against the registry (every domain module registered itself when the
    package `agent.sim.faults` was imported, which importing this module does first)."""
    fid = str(spec.get("fault", ""))
    definition = REGISTRY.get(fid)
    if definition is None:
        kind = "noise" if want_noise else "fault"
        valid = sorted(k for k, d in REGISTRY.items() if want_noise is None or d.is_noise == want_noise)
        raise FaultError(f"unknown {kind} id {fid!r}; valid ids: {', '.join(valid)}")
    if want_noise is not None and definition.is_noise != want_noise:
        raise FaultError(f"{fid} is {'noise' if definition.is_noise else 'a fault'}, not "
                         f"{'noise' if want_noise else 'a fault'}")
    known = {p.name: p for p in definition.params}
    values: dict[str, Any] = {}
    for key, value in spec.items():
        if key in ("fault", "host"):
            continue
        if key not in known:
            names = ", ".join(known) or "none"
            raise FaultError(f"{fid}: unknown param {key!r}; valid params: {names}")
        values[key] = known[key].coerce(fid, value)
    for p in definition.params:
        if p.name not in values:
            if p.required:
                raise FaultError(f"{fid}: param {p.name} is required")
            values[p.name] = p.default
    host = spec.get("host")
    return FaultSpec(definition, values, str(host) if host is not None else None)
