"""Renderers of real tool output for simulated hosts, one module per tool family.

Each module defines:
    COMMANDS: tuple[str, ...]                    executable names it answers (shims in bin/)
    run(host, argv) -> ToolOutput                argv[0] is the command name as invoked
and optionally:
    installed(host, command) -> bool             False: the shim answers "command not found" (rc 127)
    files(host) -> dict[str, str | None]         sysroot files to write (None: an empty file)
Modules import only the stdlib and `agent.sim.state`, because a shim loads them on every call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType


@dataclass
class ToolOutput:
    stdout: str = ""
    stderr: str = ""
    rc: int = 0


def usage_error(command: str, argv: list[str]) -> ToolOutput:
    """What a renderer answers for an invocation it does not simulate: loud, never a fake success."""
    return ToolOutput("", f"{command}: aidai simulator does not render: {' '.join(argv)}\n", 2)


def modules() -> list[ModuleType]:
    import importlib  # here, not above: a shim imports this package on every tool call and never needs these
    import pkgutil

    found = []
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            found.append(importlib.import_module(f"{__name__}.{info.name}"))
    return found


def command_map() -> dict[str, str]:
    """command name -> module name, over every renderer module."""
    mapping: dict[str, str] = {}
    for module in modules():
        for command in getattr(module, "COMMANDS", ()):
            if command in mapping:
                raise RuntimeError(f"{command} rendered by both {mapping[command]} and {module.__name__}")
            mapping[command] = module.__name__
    return mapping
