"""Simulated hosts: the real scripts run locally with the host's shims first on PATH, its sysroot and
its job environment. The agents cannot tell this from a real host."""

from __future__ import annotations

from pathlib import Path

from agent.executors.base import Executor
from agent.executors.local import LocalExecutor
from agent.sim.scenario import HOST_FILE, load_scenario, sim_env
from agent.sim.state import HostState


def sim_executors(path: Path) -> list[Executor]:
    """One executor per host of the scenario at `path` (or just the host directory given)."""
    _, dirs = load_scenario(path)
    executors: list[Executor] = []
    for name, host_dir in dirs.items():
        state = HostState.load(host_dir / HOST_FILE)
        # -S: scripts are stdlib-only, and skipping site makes each run ~100 ms cheaper
        executors.append(LocalExecutor(name=name, env=sim_env(host_dir, state),
                                       python=[str(host_dir / "bin" / "python3"), "-S"]))
    return executors
