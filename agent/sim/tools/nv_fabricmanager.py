"""nv-fabricmanager --version: the installed Fabric Manager release (NVSwitch systems only)."""

from __future__ import annotations

from agent.sim.state import HostState
from agent.sim.tools import ToolOutput, usage_error
from agent.sim.tools import _nvml as nvml

COMMANDS = ("nv-fabricmanager",)


def installed(host: HostState, command: str) -> bool:
    return host.fabric_manager.installed and not nvml.tool_missing(host, command)


def run(host: HostState, argv: list[str]) -> ToolOutput:
    if argv[1:] not in (["--version"], ["-v"]):
        return usage_error("nv-fabricmanager", argv)
    return ToolOutput(f"Fabric Manager version is : {host.fabric_manager.version}\n")
