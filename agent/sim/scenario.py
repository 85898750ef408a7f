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
from datetime import UTC, datetime, timedelta
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

# What the person diagnosing can see (FAULTS.md, "A realistic fleet", field `view`). The view is access, not
# the machine: the profile still decides whether the box is a VM (DMI, PCI layout); the view decides which
# tools answer and which host files are readable from where the diagnosis runs.
VIEWS = ("bare-metal", "vm", "container")
DEFAULT_VIEW = "bare-metal"
BMC_TOOLS = ("ipmitool",)
DCGM_TOOLS = ("dcgmi",)
# test binaries a site installs on its nodes; a customer VM or a training image does not carry them
BENCH_TOOLS = ("all_reduce_perf", "all_gather_perf", "ib_write_bw", "nvbandwidth")
# infiniband-diags, rdma-core utilities, MLNX_OFED scripts and HPC-X: not in an unprivileged training container
IB_TOOLS = ("ibstat", "ibstatus", "ibv_devinfo", "ibv_devices", "show_gids", "ofed_info", "ucx_info")
# host-side tools a container image does not ship: no systemd inside, no pciutils/kmod in base images, the
# docker CLI and the container toolkit live on the host, Fabric Manager is a host daemon
CONTAINER_ABSENT = ("journalctl", "systemctl", "lspci", "lsmod", "modinfo", "nv-fabricmanager", "docker",
                    "nvidia-ctk", "nvidia-container-cli")
# util-linux dmesg without CAP_SYSLOG (sys-utils/dmesg.c: err(EXIT_FAILURE, "read kernel buffer failed"))
DMESG_REFUSED = ("dmesg: read kernel buffer failed: Operation not permitted\n", 1)
# host log files a container's filesystem does not hold: the kernel log lives in the host's /var/log
CONTAINER_HIDDEN_FILES = ("/var/log/syslog", "/var/log/kern.log", "/var/log/messages", "/dev/ipmi0")
# DCGM's packages and daemons, absent where DCGM is not installed
DCGM_SERVICES = ("nv-hostengine", "nvidia-dcgm")
DEFAULT_LATENT_AGE_H = 48.0


@dataclass
class Scenario:
    root: Path
    profile: str
    hosts: list[HostState]
    faults: list[dict[str, Any]] = field(default_factory=list)
    noise: list[dict[str, Any]] = field(default_factory=list)
    view: str = DEFAULT_VIEW
    latent: list[dict[str, Any]] = field(default_factory=list)
    at: str = ""  # the incident's time, ISO 8601 UTC

    def host_dir(self, name: str) -> Path:
        return self.root if len(self.hosts) == 1 else self.root / name


def build_hosts(faults: list[dict[str, Any]], noise: list[dict[str, Any]], profile: str = "H100-SXM-8",
                hosts: list[str] | None = None, latent: list[dict[str, Any]] | None = None,
                incident_age_s: float = 0.0) -> list[HostState]:
    """Healthy hosts with every latent fault, fault and noise applied; raises FaultError on any bad spec.

    Events are placed in time relative to the incident, which happened `incident_age_s` before now: a fault's
    events in the minutes before it, a latent fault's `age_h` hours earlier still (FAULTS.md, "A realistic fleet").
    """
    olds = [(resolve(_spec(f), want_noise=False), _age_h(f)) for f in latent or []]
    specs = [resolve(f, want_noise=False) for f in faults] + [resolve(n, want_noise=True) for n in noise]
    names = list(hosts or ["node-1"])
    needed = max([s.definition.min_hosts for s in specs + [spec for spec, _ in olds]] or [1])
    while len(names) < needed:
        names.append(f"node-{len(names) + 1}")
    if len(set(names)) != len(names):
        raise FaultError(f"host names repeat: {names}")
    prof = load_profile(profile)
    states = [healthy_host(name, profile, prof) for name in names]
    # oldest first: a later reboot (a cause's power event) ends the boot an older fault's kernel lines were in
    for spec, age_h in sorted(olds, key=lambda item: -item[1]):
        _apply_at(spec, states, incident_age_s + age_h * 3600.0, latent=True)
    for spec in specs:
        _apply_at(spec, states, incident_age_s)
    return states


def _spec(latent: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in latent.items() if k != "age_h"}


def _age_h(latent: dict[str, Any]) -> float:
    try:
        age = float(latent.get("age_h", DEFAULT_LATENT_AGE_H))
    except (TypeError, ValueError):
        raise FaultError(f"{latent.get('fault')}: age_h={latent.get('age_h')!r} is not a number of hours") from None
    if age < 0:
        raise FaultError(f"{latent.get('fault')}: age_h={age:g} is in the future; latent faults are older")
    return age


VOLATILE_ECC = ("ecc_volatile_dram_uncorrected", "ecc_volatile_dram_corrected", "ecc_volatile_sram_uncorrected",
                "ecc_volatile_sram_corrected")


def _apply_at(spec: FaultSpec, states: list[HostState], shift_s: float, latent: bool = False) -> None:
    """Apply a fault whose events happened `shift_s` earlier than the fault module writes them (its ages are
    relative to the incident). A reboot the fault makes moves with it. A latent fault older than the current boot
    left its kernel lines in an earlier boot and its volatile ECC counts reset with the driver; aggregate counts,
    retired rows and settings persist."""
    marks = [(len(s.journal), len(s.sel), s.uptime_s) for s in states]
    volatile = [[{k: getattr(g, k) for k in VOLATILE_ECC} for g in s.gpus] for s in states]
    _apply(spec, states)
    for state, (journal, sel, uptime), before in zip(states, marks, volatile, strict=True):
        for line in state.journal[journal:]:
            line.age_s += shift_s
        for event in state.sel[sel:]:
            event.age_s += shift_s
        if state.uptime_s != uptime:
            state.uptime_s += shift_s
        elif latent and shift_s > state.uptime_s:
            for gpu, counts in zip(state.gpus, before, strict=False):
                for key, value in counts.items():
                    setattr(gpu, key, value)


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


def check_view(view: str) -> str:
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; valid: {', '.join(VIEWS)}")
    return view


def apply_view(state: HostState, view: str) -> None:
    """Record the view on the host and change what it implies about the host itself (after the faults, so a
    fault's own container settings, e.g. a runtime without the nvidia hook, stay as the fault set them)."""
    state.view = check_view(view)
    if view == "bare-metal":
        return
    # neither a VM guest nor a container reaches the BMC in-band (no /dev/ipmi0)
    state.software.bmc_device = False
    if view == "vm":
        # DCGM is not installed in a customer VM: no packages, no host engine
        state.software.packages = {k: v for k, v in state.software.packages.items()
                                   if not k.startswith("datacenter-gpu-manager")}
        for unit in DCGM_SERVICES:
            state.services.pop(unit, None)
        if not _full_nvswitch_node(state):
            state.fabric_manager.installed = state.fabric_manager.active = False
            state.services.pop("nvidia-fabricmanager", None)
        return
    # container: the checks run inside a container started with the NVIDIA runtime; the devices are visible
    state.container.inside = True


def _full_nvswitch_node(state: HostState) -> bool:
    """A VM that owns the whole NVSwitch baseboard (every GPU passed through) runs Fabric Manager itself."""
    if not state.nvswitch_count or not state.fabric_manager.installed:
        return False
    return len(state.gpus) >= int(load_profile(state.profile).get("gpu_count") or 0)


def view_tools(state: HostState) -> tuple[set[str], dict[str, tuple[str, int]]]:
    """(commands absent in this host's view, command -> (stderr, rc) of commands that refuse to look)."""
    view = state.view
    absent: set[str] = set()
    refused: dict[str, tuple[str, int]] = {}
    if view == "bare-metal":
        return absent, refused
    absent.update(BMC_TOOLS + DCGM_TOOLS + BENCH_TOOLS)
    if view == "vm":
        if not _full_nvswitch_node(state):
            absent.add("nv-fabricmanager")
        return absent, refused
    absent.update(IB_TOOLS + CONTAINER_ABSENT)
    refused["dmesg"] = DMESG_REFUSED
    return absent, refused


def create_scenario(root: Path, faults: list[dict[str, Any]] | None = None, noise: list[dict[str, Any]] | None = None,
                    profile: str = "H100-SXM-8", hosts: list[str] | None = None,
                    view: str = DEFAULT_VIEW, at: str | None = None,
                    latent: list[dict[str, Any]] | None = None) -> Scenario:
    """Build and write a scenario. `at` is the incident's time (default: now): the faults' events happen in the
    minutes before it; `latent` faults did not cause the incident and happened `age_h` hours before it."""
    faults, noise, latent = list(faults or []), list(noise or []), list(latent or [])
    check_view(view)
    now = datetime.now(UTC)
    when = parse_at(at) if at else now
    if when > now + timedelta(minutes=5):
        raise ValueError(f"at={at} is in the future; an incident has already happened")
    states = build_hosts(faults, noise, profile, hosts, latent, max((now - when).total_seconds(), 0.0))
    for state in states:
        apply_view(state, view)
    root = Path(root).resolve()
    if root.exists() and any(root.iterdir()):
        if not (root / SCENARIO_FILE).exists():
            raise FileExistsError(f"{root} exists and is not a simulated scenario; refusing to overwrite it")
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    stamp = when.isoformat(timespec="seconds").replace("+00:00", "Z")
    scenario = Scenario(root, profile, states, faults, noise, view, latent, stamp)
    for state in states:
        materialize_host(state, scenario.host_dir(state.hostname))
    (root / SCENARIO_FILE).write_text(json.dumps({
        "profile": profile, "hosts": [s.hostname for s in states], "faults": faults, "noise": noise, "view": view,
        "latent": latent, "at": stamp,
    }, indent=1))
    return scenario


def parse_at(text: str) -> datetime:
    """An ISO 8601 time; one without a zone is UTC (FAULTS.md: `at` is UTC)."""
    try:
        when = datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"at={text!r} is not an ISO 8601 time (e.g. 2026-11-25T10:00:00Z)") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def scenario_from_record(root: Path, record_file: Path, record_id: str, view: str | None = None) -> Scenario:
    """The record's scenario; `view`, when given, replaces the record's own (to see one incident from elsewhere)."""
    record = find_record(record_file, record_id)
    return create_scenario(root, record.get("faults", []), record.get("noise", []),
                           record.get("profile") or "H100-SXM-8", record.get("hosts") or None,
                           view or record.get("view") or DEFAULT_VIEW, record.get("at") or None,
                           record.get("latent") or [])


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
    absent, refused = view_tools(state)
    for command, module in tools.command_map().items():
        if command in absent:
            # a shim, not no file: PATH ends in this machine's own /usr/bin, whose dmesg or systemctl must not answer
            _write_sh(host_dir / "bin" / command, f"sh: 1: {command}: not found\n", 127)
        elif command in refused:
            _write_sh(host_dir / "bin" / command, *refused[command])
        else:
            _write_shim(host_dir / "bin" / command, python, host_dir, module, command)
    os.symlink(python, host_dir / "bin" / "python3")
    hidden = set(CONTAINER_HIDDEN_FILES) if state.view == "container" else set()
    for tool in tools.modules():
        for rel, text in (getattr(tool, "files", lambda _h: {})(state)).items():
            if rel not in hidden:
                _write_file(host_dir / "root", rel, text)
        for rel, text in (getattr(tool, "pyfiles", lambda _h: {})(state)).items():
            _write_file(host_dir / "py", rel, text)
    for rel, text in state.files.items():
        if rel not in hidden:
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


def _write_sh(path: Path, stderr: str, rc: int) -> None:
    """A tool the view lacks or that refuses here: plain sh, the text on stderr, no interpreter start."""
    path.write_text(f"#!/bin/sh\nprintf '%s' {shlex.quote(stderr)} >&2\nexit {rc}\n")
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
