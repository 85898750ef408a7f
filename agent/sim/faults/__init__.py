"""Every fault and noise id of FAULTS.md, registered by the domain modules on import."""

from agent.sim.faults import gpu, network, system  # noqa: F401
from agent.sim.faults.registry import REGISTRY, FaultDef, FaultError, FaultSpec, Param, resolve

__all__ = ["REGISTRY", "FaultDef", "FaultError", "FaultSpec", "Param", "resolve"]
