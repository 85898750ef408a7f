"""`HostState`: everything a simulated host's tools can show, as plain dataclasses.

Stdlib only: shims load a host on every tool call, so importing this must stay cheap.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.sim.state.gpu import Driver, FabricManager, Gpu, GpuProcess
from agent.sim.state.net import Gid, Hca, NetIf
from agent.sim.state.system import (
    Container,
    EdacCounts,
    LogLine,
    Machine,
    Mount,
    PcieSwitch,
    Process,
    SelEvent,
    Software,
    StackFrame,
    Thread,
)

if TYPE_CHECKING:  # pathlib is not imported at run time: a shim imports this module on every tool call
    from pathlib import Path

__all__ = [
    "Container", "Driver", "EdacCounts", "FabricManager", "Gid", "Gpu", "GpuProcess", "Hca", "HostState",
    "LogLine", "Machine", "Mount", "NetIf", "PcieSwitch", "Process", "SelEvent", "Software", "StackFrame", "Thread",
]


@dataclass
class HostState:
    hostname: str
    profile: str
    uptime_s: float = 12 * 86400.0
    gpus: list[Gpu] = field(default_factory=list)
    lspci_extra_gpus: int = 0  # NVIDIA 3D controllers on the bus that the driver never bound
    nvswitch_count: int = 4
    driver: Driver = field(default_factory=Driver)
    fabric_manager: FabricManager = field(default_factory=FabricManager)
    hcas: list[Hca] = field(default_factory=list)
    netifs: list[NetIf] = field(default_factory=list)
    software: Software = field(default_factory=Software)
    container: Container = field(default_factory=Container)
    env: dict[str, str] = field(default_factory=dict)  # the job's environment as the checks see it
    memlock_kb: int | None = None  # None = unlimited
    mounts: list[Mount] = field(default_factory=list)
    pcie_switches: list[PcieSwitch] = field(default_factory=list)
    topology_ok: bool = True  # False: GPU<->NIC affinity reported wrong (all SYS)
    kernel_modules: list[str] = field(default_factory=list)
    services: dict[str, str] = field(default_factory=dict)  # systemd unit -> active state
    journal: list[LogLine] = field(default_factory=list)
    sel: list[SelEvent] = field(default_factory=list)
    processes: list[Process] = field(default_factory=list)
    edac: EdacCounts = field(default_factory=EdacCounts)
    files: dict[str, str] = field(default_factory=dict)  # extra files under the sysroot: path -> text
    missing_paths: list[str] = field(default_factory=list)  # data paths that no longer exist
    cpu_governor: str = "performance"
    numa_nodes: int = 2
    machine: Machine = field(default_factory=Machine)
    # what the person diagnosing can see (FAULTS.md "A realistic fleet"): bare-metal | vm | container;
    # the scenario applies it when it materializes the host (agent.sim.scenario.VIEWS)
    view: str = "bare-metal"

    # ---- convenience used by faults and renderers -------------------------------------------
    def gpu(self, index: int) -> Gpu:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        raise KeyError(f"host {self.hostname} has no GPU {index} (GPUs: {[g.index for g in self.gpus]})")

    def hca(self, name: str) -> Hca:
        for hca in self.hcas:
            if hca.name == name:
                return hca
        raise KeyError(f"host {self.hostname} has no HCA {name} (HCAs: {[h.name for h in self.hcas]})")

    def log(self, ident: str, text: str, age_s: float = 300.0, priority: int = 6) -> None:
        self.journal.append(LogLine(age_s=age_s, ident=ident, text=text, priority=priority))

    def kernel(self, text: str, age_s: float = 300.0, priority: int = 4) -> None:
        self.log("kernel", text, age_s=age_s, priority=priority)

    # ---- persistence ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostState:
        return _build(cls, data)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True))

    @classmethod
    def load(cls, path: str | Path) -> HostState:
        with open(path) as src:
            return cls.from_dict(json.loads(src.read()))


_HINTS: dict[type, dict[str, Any]] = {}


def _build(cls: type, data: Any) -> Any:
    """Rebuild nested dataclasses from `asdict` output (no validation beyond types of containers)."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = typing.get_type_hints(cls)
        _HINTS[cls] = hints
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name])
    return cls(**kwargs)


def _convert(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(hint):
            if arg is not type(None):
                return _convert(arg, value)
    if origin is list:
        (item,) = typing.get_args(hint)
        return [_convert(item, v) for v in value]
    if origin is dict:
        _, item = typing.get_args(hint)
        return {k: _convert(item, v) for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value)
    return value
