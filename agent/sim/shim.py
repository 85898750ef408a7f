"""Entry point of every `bin/` shim of a simulated host: render one tool invocation from host.json."""

from __future__ import annotations

import importlib
import os
import sys

from agent.sim.state import HostState


def main() -> None:
    # argv: [-c, HOST_DIR, MODULE, COMMAND, args...]
    host_dir, module_name, command, *args = sys.argv[1:]
    module = importlib.import_module(module_name)
    host = HostState.load(os.path.join(host_dir, "host.json"))
    installed = getattr(module, "installed", None)
    if installed is not None and not installed(host, command):
        sys.stderr.write(f"sh: 1: {command}: not found\n")
        sys.exit(127)
    out = module.run(host, [command, *args])
    sys.stdout.write(out.stdout)
    sys.stderr.write(out.stderr)
    sys.stdout.flush()
    sys.exit(out.rc)
