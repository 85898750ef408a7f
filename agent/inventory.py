"""What a host is, learnt from the host before any hypothesis: its inventory (verification_scripts/host_inventory.py,
passive reads only), the expectations the checks judge it by, and whether it can be checked at all.

Expectations come from a shipped SKU profile when the host's GPUs match one (by PCI device id, else by name), with
the parts a profile cannot know taken from the host: how many GPUs this VM shape has, whether NVSwitches and RDMA
NICs are there. A GPU no profile knows gets expectations derived from the host alone; anything neither says is
None, which the checks read as "no expectation" (they skip that comparison). `--profile NAME` overrides it all.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.checks.manifest import CheckSpec, load_profiles, profile
from agent.executors.base import Executor
from agent.models import CheckResult, Verdict, to_result

INVENTORY = CheckSpec(id="host_inventory", script="host_inventory.py", nodes=[], timeout_s=30, expected_cost_s=1,
                      description="passive inventory: GPUs, driver, CUDA, NVSwitch, RDMA NICs, platform, tools")
# thresholds that are relative (a ratio of the host's own peers), so they hold for any SKU
RELATIVE_KEYS = {"straggler_ratio": 0.9}
# a profile's keys that describe a full board; a smaller VM shape of the same GPU cannot be held to them
BOARD_KEYS = ("nccl_intranode_busbw", "p2p_gbps")
NOT_FOR_CHECKS = ("sources", "sim_machine")  # what a profile says for people and the simulator


class PciGpu(BaseModel):
    bus_id: str
    device_id: str


class DriverGpu(BaseModel):
    index: int | None = None
    name: str = ""
    bus_id: str = ""
    device_id: str = ""
    memory_mib: int | None = None
    driver_version: str = ""
    uuid: str = ""
    serial: str = ""


class RdmaPort(BaseModel):
    device: str
    port: str = "1"
    link_layer: str | None = None
    state: str | None = None
    rate: str | None = None


class HostInventory(BaseModel):
    """The host_inventory script's answer; `error` says why there is none (unreachable, no python3, timeout)."""

    host: str  # as the diagnosis names it (local, ssh://..., a simulated host's name)
    error: str = ""
    hostname: str = ""  # as the host names itself
    pci_source: str | None = None  # sysfs | lspci | None (the PCI bus could not be read)
    gpus_pci: list[PciGpu] = Field(default_factory=list)
    nvswitches: int | None = None
    nics_pci: list[dict[str, str]] = Field(default_factory=list)
    gpus: list[DriverGpu] = Field(default_factory=list)  # as nvidia-smi lists them
    nvidia_smi: int | None = None  # its exit code; None when it is not installed
    driver_version: str | None = None
    driver_loaded: bool = False
    device_nodes: list[str] = Field(default_factory=list)
    cuda_version: str | None = None
    rdma: list[RdmaPort] = Field(default_factory=list)
    platform: str = "unknown"  # bare-metal | vm | container | unknown
    platform_evidence: str = ""
    tools: dict[str, bool] = Field(default_factory=dict)
    privileges: dict[str, bool | None] = Field(default_factory=dict)
    unreadable: dict[str, str] = Field(default_factory=dict)

    @property
    def gpu_count(self) -> int:
        return max(len(self.gpus_pci), len(self.gpus))

    @property
    def device_id(self) -> str | None:
        ids = [g.device_id for g in self.gpus_pci] or [g.device_id for g in self.gpus]
        return Counter(ids).most_common(1)[0][0] if ids else None

    @property
    def gpu_name(self) -> str | None:
        return Counter(g.name for g in self.gpus).most_common(1)[0][0] if self.gpus else None

    def describe(self) -> str:
        """One line for the report: '8 x NVIDIA H100 80GB HBM3 (10de:2330), driver 535.161.08, CUDA 12.2, ...'."""
        if self.error:
            return f"no inventory: {self.error}"
        if self.gpu_count:
            gpus = f"{self.gpu_count} x {self.gpu_name or 'NVIDIA GPU'}"
            gpus += f" (10de:{self.device_id})" if self.device_id else ""
        else:
            gpus = "no NVIDIA GPU"
        parts = [gpus, f"driver {self.driver_version}" if self.driver_version else "no NVIDIA driver"]
        if self.cuda_version:
            parts.append(f"CUDA {self.cuda_version}")
        if self.nvswitches:
            parts.append(f"{self.nvswitches} NVSwitch")
        layers = Counter(p.link_layer or "unknown" for p in self.rdma)
        parts.append(", ".join(f"{n} {layer} RDMA port(s)" for layer, n in layers.items()) if layers
                     else "no RDMA NIC")
        parts.append(self.platform if self.platform != "unknown" else "platform unknown")
        missing = [t for t, present in self.tools.items() if not present]
        if missing:
            parts.append("missing tools: " + ", ".join(missing))
        return ", ".join(parts)


class Expectations(BaseModel):
    """What the checks on one host are judged against (`params["profile"]`), and where it came from."""

    host: str
    hostname: str = ""  # as the host names itself ("local" says little in a ticket)
    inventory: str = ""  # HostInventory.describe(): what the host is
    source: Literal["override", "profile", "derived", "none"]
    profile: str | None = None  # the shipped profile used, if any
    why: str
    values: dict[str, Any] = Field(default_factory=dict)
    cannot_check: str = ""  # set: nothing on this host can be checked, and why

    @property
    def who(self) -> str:
        return f"{self.host} (this machine, {self.hostname})" if self.host == "local" and self.hostname else self.host

    def line(self) -> str:
        if self.cannot_check:
            return f"could not check {self.who}: {self.cannot_check}"
        used = f"profile {self.profile}" if self.profile else "expectations derived from the host"
        return f"{self.who}: {self.inventory}; {used} ({self.why})"


class HostView(BaseModel):
    """A host as the inventory found it, and what its checks expect of it: what a run keeps of each host."""

    inventory: HostInventory
    expectations: Expectations


def take(executor: Executor) -> HostInventory:
    """Run the inventory script on the host; a host that cannot run it gets an inventory with `error` set."""
    run = executor.run_script(INVENTORY.script_path, {"host": executor.name}, INVENTORY.timeout_s)
    return from_result(to_result(INVENTORY, executor.name, run))


def from_result(result: CheckResult) -> HostInventory:
    if result.verdict == Verdict.UNKNOWN:
        return HostInventory(host=result.host, error=result.reason or result.summary)
    return HostInventory.model_validate({**result.metrics, "host": result.host})


def expectations(inventory: HostInventory, override: str | None = None) -> Expectations:
    found = _expectations(inventory, override)
    return found.model_copy(update={"hostname": inventory.hostname, "inventory": inventory.describe()})


def _expectations(inventory: HostInventory, override: str | None) -> Expectations:
    host = inventory.host
    if inventory.error:
        return Expectations(host=host, source="none", why="no inventory", cannot_check=inventory.error)
    if override:
        return Expectations(host=host, source="override", profile=override, why=f"--profile {override} given",
                            values=for_checks(override))
    if not inventory.gpu_count and not inventory.driver_loaded and not inventory.device_nodes:
        seen = ("the PCI bus shows no NVIDIA device" if inventory.pci_source
                else "the PCI bus could not be read (" + inventory.unreadable.get("pci", "?") + ")")
        smi = "nvidia-smi is not installed" if inventory.nvidia_smi is None else (
            f"nvidia-smi exited {inventory.nvidia_smi} and lists no GPU")
        return Expectations(host=host, source="none", why="no NVIDIA GPU",
                            cannot_check=f"no NVIDIA GPU and no NVIDIA driver ({seen}; {smi}; no /proc/driver/nvidia,"
                                         f" no /dev/nvidia*), so no GPU check can see anything here")
    name, shipped = match_profile(inventory)
    if name is None:
        values = {**dict.fromkeys(profile_keys()), **RELATIVE_KEYS, "name": "derived"}
        why = (f"no shipped profile for {inventory.gpu_name or 'GPU'} 10de:{inventory.device_id}; "
               "thresholds the host cannot tell are left unset")
        source: Literal["profile", "derived"] = "derived"
    else:
        values = for_checks(name)
        why, source = f"matched 10de:{inventory.device_id} ({shipped})", "profile"
    notes = _fit_to_host(values, inventory, name)
    return Expectations(host=host, source=source, profile=name, why="; ".join([why, *notes]), values=values)


def match_profile(inventory: HostInventory) -> tuple[str | None, str]:
    """The shipped profile of the host's GPUs: by PCI device id, else by the name nvidia-smi prints."""
    profiles = load_profiles()
    device, gpu_name = inventory.device_id, inventory.gpu_name
    for name, spec in profiles.items():
        if device and str(spec.get("pci_device_id", "")).lower() == device.lower():
            return name, str(spec.get("gpu_name", name))
    for name, spec in profiles.items():
        if gpu_name and str(spec.get("gpu_name", "")) == gpu_name:
            return name, gpu_name
    return None, ""


def for_checks(name: str) -> dict[str, Any]:
    """A shipped profile as the checks get it: what it says for people and the simulator left out."""
    return {k: v for k, v in profile(name).items() if k not in NOT_FOR_CHECKS}


def profile_keys() -> list[str]:
    return sorted({key for spec in load_profiles().values() for key in spec if key not in NOT_FOR_CHECKS})


def _fit_to_host(values: dict[str, Any], inventory: HostInventory, name: str | None) -> list[str]:
    """The parts of the expectations that depend on this host's shape rather than on its GPU model; returns the
    reasons, for the report."""
    notes: list[str] = []
    seen = inventory.gpu_count
    shapes = sorted(int(n) for n in values.get("gpu_counts") or [values["gpu_count"]] if n) if name else []
    if shapes and seen not in shapes and seen < shapes[-1]:
        # a shape the SKU is not rented in: GPUs are missing, not a smaller VM
        expected = next(n for n in shapes if n >= seen)
        notes.append(f"{seen} GPU(s) seen, but this SKU comes with {'/'.join(map(str, shapes))}: expecting {expected}")
    else:
        expected = seen
        if shapes and seen != values.get("gpu_count"):
            notes.append(f"a {seen}-GPU shape of this SKU")
    full_board = not shapes or expected == shapes[-1]
    values["gpu_count"] = expected
    if not full_board:
        values.update(dict.fromkeys(BOARD_KEYS))
    if inventory.pci_source is not None and values.get("nvswitch_on_pci", True):
        switches = bool(inventory.nvswitches)
        if bool(values.get("nvswitch")) != switches:
            notes.append("NVSwitch seen on the PCI bus" if switches else "no NVSwitch on this host's PCI bus")
        values["nvswitch"] = switches
    elif not full_board:
        values["nvswitch"] = None
    if expected < 2 and values.get("nvlink_links"):
        values.update(nvlink_links=None, topo_nvlink=None)  # one GPU: nothing to link to inside this host
    notes += _fit_network(values, inventory, full_board)
    return notes


def _fit_network(values: dict[str, Any], inventory: HostInventory, full_board: bool) -> list[str]:
    ports, nics = inventory.rdma, inventory.nics_pci
    if ports or any(n.get("kind") == "InfiniBand" for n in nics):
        infiniband = sum(1 for p in ports if p.link_layer == "InfiniBand")
        if not (full_board and values.get("hca_count")):
            # the VM shape or the SKU does not say how many: hold the host to the InfiniBand ports it shows;
            # Ethernet-only RDMA ports may be a VM's accelerated-networking NIC rather than GPU rails
            values["hca_count"] = infiniband or None
            values["link_layer"] = "InfiniBand" if infiniband else None
        return []
    if inventory.platform == "container" or inventory.pci_source is None:
        values.update(hca_count=None, link_layer=None)
        return ["RDMA NICs cannot be seen from here"]
    had = values.get("hca_count")
    values.update(hca_count=0, link_layer=None, ib_rate=None, ib_mtu=None, nccl_internode_busbw=None,
                  ib_write_bw_gbps=None)
    return ["no RDMA NIC on this host, none expected"] if had else []
