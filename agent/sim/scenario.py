"""Materialize a simulated scenario: healthy hosts from a profile, faults and noise applied, and per
host a directory of `bin/` shims, a sysroot (`root/`), a Python path (`py/`) and `host.json`.

Layout: a one-host scenario is the host directory itself (DIR/host.json, DIR/bin, ...); a
multi-host scenario has one such directory per host (DIR/node-1, DIR/node-2). Both carry
DIR/scenario.json. `activate` in each host directory exports what the scripts need, for SSH runs.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.checks.manifest import profile as load_profile
from agent.paths import PACKAGE_DIR
from agent.sim import tools
from agent.sim.faults import FaultError, FaultSpec, resolve
from agent.sim.healthy import healthy_host
from agent.sim.state import HostState

SCENARIO_FILE = "scenario.json"
HOST_FILE = "host.json"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass
class Scenario:
    root: Path
    profile: str
    hosts: list[HostState]
    faults: list[dict[str, Any]] = field(default_factory=list)
    noise: list[dict[str, Any]] = field(default_factory=list)

    def host_dir(self, name: str) -> Path:
        return self.root if len(self.hosts) == 1 else self.root / name


def build_hosts(faults: list[dict[str, Any]], noise: list[dict[str, Any]], profile: str = "H100-SXM-8",
                hosts: list[str] | None = None) -> list[HostState]:
    """Healthy hosts with every fault and noise applied; raises FaultError on any bad spec."""
    specs = [resolve(f, want_noise=False) for f in faults] + [resolve(n, want_noise=True) for n in noise]
    names = list(hosts or ["node-1"])
    needed = max([s.definition.min_hosts for s in specs] or [1])
    while len(names) < needed:
        names.append(f"node-{len(names) + 1}")
    if len(set(names)) != len(names):
        raise FaultError(f"host names repeat: {names}")
    prof = load_profile(profile)
    states = [healthy_host(name, profile, prof) for name in names]
    for spec in specs:
        _apply(spec, states)
    return states


def _apply(spec: FaultSpec, states: list[HostState]) -> None:
    definition = spec.definition
    if definition.scope == "scenario":
        definition.apply(states, spec.params)
        return
    target = states[0]
    if spec.host is not None:
        matches = [s for s in states if s.hostname == spec.host]
        if not matches:
            raise FaultError(f"{spec.id}: host {spec.host!r} is not in the scenario "
                             f"({', '.join(s.hostname for s in states)})")
        target = matches[0]
    try:
        definition.apply(target, spec.params)
    except (KeyError, IndexError) as exc:
        raise FaultError(f"{spec.id}: {exc}") from None


def create_scenario(root: Path, faults: list[dict[str, Any]] | None = None, noise: list[dict[str, Any]] | None = None,
                    profile: str = "H100-SXM-8", hosts: list[str] | None = None) -> Scenario:
    faults, noise = list(faults or []), list(noise or [])
    states = build_hosts(faults, noise, profile, hosts)
    root = Path(root).resolve()
    if root.exists() and any(root.iterdir()):
        if not (root / SCENARIO_FILE).exists():
            raise FileExistsError(f"{root} exists and is not a simulated scenario; refusing to overwrite it")
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    scenario = Scenario(root, profile, states, faults, noise)
    for state in states:
        materialize_host(state, scenario.host_dir(state.hostname))
    (root / SCENARIO_FILE).write_text(json.dumps({
        "profile": profile, "hosts": [s.hostname for s in states], "faults": faults, "noise": noise,
    }, indent=1))
    return scenario


def scenario_from_record(root: Path, record_file: Path, record_id: str) -> Scenario:
    record = find_record(record_file, record_id)
    return create_scenario(root, record.get("faults", []), record.get("noise", []),
                           record.get("profile", "H100-SXM-8"), record.get("hosts"))


def find_record(record_file: Path, record_id: str) -> dict[str, Any]:
    ids = []
    with open(record_file, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{record_file}:{number}: not JSON: {exc}") from None
            if record.get("id") == record_id:
                return record
            ids.append(str(record.get("id")))
    raise KeyError(f"no record {record_id!r} in {record_file} ({len(ids)} records)")


def materialize_host(state: HostState, host_dir: Path) -> None:
    for sub in ("bin", "root", "py"):
        (host_dir / sub).mkdir(parents=True, exist_ok=True)
    state.save(host_dir / HOST_FILE)
    python = sys.executable
    for command, module in tools.command_map().items():
        _write_shim(host_dir / "bin" / command, python, host_dir, module, command)
    os.symlink(python, host_dir / "bin" / "python3")
    for module in tools.modules():
        for rel, text in (getattr(module, "files", lambda _h: {})(state)).items():
            _write_file(host_dir / "root", rel, text)
        for rel, text in (getattr(module, "pyfiles", lambda _h: {})(state)).items():
            _write_file(host_dir / "py", rel, text)
    for rel, text in state.files.items():
        _write_file(host_dir / "root", rel, text)
    (host_dir / "activate").write_text("".join(
        f"export {k}={shlex.quote(v)}\n" for k, v in sim_env(host_dir, state).items()))


def _write_file(base: Path, rel: str, text: str | None) -> None:
    target = base / rel.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text or "")


def _write_shim(path: Path, python: str, host_dir: Path, module: str, command: str) -> None:
    # -S: no site import, so a shim costs one bare interpreter start plus the renderer module.
    boot = f"import sys; sys.path.insert(0, {str(PACKAGE_DIR.parent)!r}); from agent.sim.shim import main; main()"
    path.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(p) for p in (
        python, "-S", "-c", boot, str(host_dir), module, command)) + ' "$@"\n')
    path.chmod(0o755)


def sim_env(host_dir: Path, state: HostState) -> dict[str, str]:
    """Environment the checks see on this simulated host: its tools first, its sysroot, its job env."""
    env = dict(state.env)
    env.update({
        "PATH": f"{host_dir / 'bin'}:{SYSTEM_PATH}",
        "AIDAI_SYSROOT": str(host_dir / "root"),
        "PYTHONPATH": str(host_dir / "py"),
        "HOSTNAME": state.hostname,
    })
    return env


def load_scenario(root: Path) -> tuple[dict[str, Any], dict[str, Path]]:
    """scenario.json and host name -> host directory, for `sim:DIR` and `sim:DIR/HOST` specs."""
    root = Path(root).resolve()
    meta_file = root / SCENARIO_FILE
    if not meta_file.exists():
        if (root / HOST_FILE).exists() and (root.parent / SCENARIO_FILE).exists():
            state = HostState.load(root / HOST_FILE)
            return json.loads((root.parent / SCENARIO_FILE).read_text()), {state.hostname: root}
        raise FileNotFoundError(f"{root} is not a simulated scenario (no {SCENARIO_FILE}); "
                                f"create one with `aidai sim create {root} --fault ...`")
    meta = json.loads(meta_file.read_text())
    names = meta["hosts"]
    dirs = {names[0]: root} if len(names) == 1 else {n: root / n for n in names}
    return meta, dirs
