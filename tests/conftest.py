"""Shared test helpers: run a verification script against fake tools or a simulated host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent.paths import SCRIPTS_DIR
from agent.sim.scenario import create_scenario, sim_env
from tests.chroma_server import running_chroma

FIXTURES = Path(__file__).parent / "fixtures"


def run_script(script: str, env: dict[str, str], params: dict[str, Any] | None = None,
               timeout: float = 120) -> dict[str, Any]:
    """Run verification_scripts/<script> with `env`, params JSON on stdin; return its evidence object."""
    proc = subprocess.run([sys.executable, "-S", str(SCRIPTS_DIR / script)], input=json.dumps(params or {}),
                          capture_output=True, text=True, env=env, timeout=timeout)
    assert proc.returncode == 0, f"{script} rc={proc.returncode}\n{proc.stderr}"
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, f"{script} must print one JSON line, got:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[0])


class FakeTools:
    """A bin/ directory of fake executables that print fixed output (e.g. a real fixture file)."""

    def __init__(self, root: Path):
        self.bin = root / "bin"
        self.sysroot = root / "sysroot"
        self.bin.mkdir(parents=True, exist_ok=True)
        self.sysroot.mkdir(parents=True, exist_ok=True)
        self.outputs = root / "outputs"
        self.outputs.mkdir(exist_ok=True)

    def tool(self, name: str, stdout: str = "", rc: int = 0, stderr: str = "", sleep: float = 0) -> None:
        """`name` prints stdout/stderr and exits rc whatever its arguments."""
        out, err = self.outputs / f"{name}.out", self.outputs / f"{name}.err"
        out.write_text(stdout)
        err.write_text(stderr)
        pause = f"sleep {sleep}\n" if sleep else ""
        path = self.bin / name
        path.write_text(f"#!/bin/sh\n{pause}cat '{out}'\ncat '{err}' >&2\nexit {rc}\n")
        path.chmod(0o755)

    def script(self, name: str, body: str) -> None:
        """`name` runs a shell body (for tools whose output depends on their arguments)."""
        path = self.bin / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)

    def file(self, rel: str, text: str) -> None:
        target = self.sysroot / rel.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def env(self, **extra: str) -> dict[str, str]:
        env = {"PATH": f"{self.bin}:/usr/bin:/bin", "AIDAI_SYSROOT": str(self.sysroot), "LANG": "C.UTF-8",
               "HOME": os.environ.get("HOME", "/root")}
        env.update(extra)
        return env


@pytest.fixture
def fake_tools(tmp_path: Path) -> FakeTools:
    return FakeTools(tmp_path / "fake")


def sim_host_env(root: Path, faults: list[dict[str, Any]] | None = None, noise: list[dict[str, Any]] | None = None,
                 profile: str = "H100-SXM-8", hosts: list[str] | None = None,
                 host: str | None = None) -> dict[str, str]:
    """Create a simulated scenario under root and return the environment of one of its hosts."""
    scenario = create_scenario(root, faults, noise, profile, hosts)
    state = scenario.hosts[0] if host is None else next(h for h in scenario.hosts if h.hostname == host)
    env = sim_env(scenario.host_dir(state.hostname), state)
    env.update({"LANG": "C.UTF-8", "HOME": os.environ.get("HOME", "/root")})
    return env


def fixture_text(*parts: str) -> str:
    return FIXTURES.joinpath(*parts).read_text()


TINY_KB_DOC = """---
title: Printer noise is not a GPU problem
nodes: [OTHER.PLATFORM]
sources: []
---
## Noises

A printer that makes a noise when a spreadsheet opens is outside what GPU checks can see.

- Check the printer queue.
- Ask the provider if the VM has a printer attached at all.
"""


@pytest.fixture(scope="session")
def tiny_kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-doc KB: indexing the real one takes a minute of embedding on two cores."""
    root = tmp_path_factory.mktemp("kb")
    (root / "printer.md").write_text(TINY_KB_DOC, encoding="utf-8")
    return root


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory, tiny_kb: Path) -> Path:
    """The seed incident DB and the tiny KB's index, built once per test session."""
    from agent.knowledge.incident_db import IncidentDB
    from agent.knowledge.kb_index import KnowledgeBase

    path = tmp_path_factory.mktemp("aidai-data")
    IncidentDB(data_dir=path).ensure_seed()
    KnowledgeBase(data_dir=path, root=tiny_kb).ensure()
    return path


@pytest.fixture
def chroma_server(tmp_path: Path) -> Any:
    """The URL of a real Chroma server on loopback, stopped after the test."""
    with running_chroma(tmp_path) as url:
        yield url
