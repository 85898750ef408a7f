"""dcgmi diag / health / nvlink, as DCGM's command line prints them (boxed trees or -j JSON).

`dcgmi health -c` reports what DCGM's background watches would have recorded from the GPU state and
the driver's recent Xids; without a running nv-hostengine every command but diag (which starts an
embedded engine) fails with DCGM's connection error.
"""

from __future__ import annotations

import json
import textwrap
from typing import TypedDict

from agent.sim.state import Gpu, HostState
from agent.sim.tools import ToolOutput, dcgmi_diag, usage_error
from agent.sim.tools import _nvml as nvml

COMMANDS = ("dcgmi",)
NO_ENGINE = ("Error: unable to establish a connection to the specified host: localhost\n"
             "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n")
HEALTH_RANK = {"Healthy": 0, "Warning": 1, "Failure": 2}
MEMORY_XIDS = {48, 63, 64, 94, 95, 140}
NVLINK_XIDS = {74, 136, 144, 145, 146, 147, 148, 149, 150}
WARNING_XIDS = {63, 94}  # a row marked for remapping / an error contained to one application
NO_NVLINK = 18  # DCGM lists every link slot of a GPU without NVLink as Not Supported
REPORTED_XIDS = MEMORY_XIDS | NVLINK_XIDS | {46, 54, 62, 79, 109, 110, 119, 120, 143, 155, 156, 158}


def installed(host: HostState, command: str) -> bool:
    packages = host.software.packages
    dcgm = any(name.startswith("datacenter-gpu-manager") for name in packages) or not packages
    return host.driver.installed and dcgm and not nvml.tool_missing(host, command)


def _engine_up(host: HostState) -> bool:
    running = host.services.get("nv-hostengine") == "active" or host.services.get("nvidia-dcgm") == "active"
    return running and nvml.driver_error(host) is None


def run(host: HostState, argv: list[str]) -> ToolOutput:
    args = argv[1:]
    if not args:
        return usage_error("dcgmi", argv)
    sub, rest = args[0], args[1:]
    as_json = "-j" in rest or "--json" in rest
    rest = [a for a in rest if a not in ("-j", "--json", "-v", "--verbose")]
    if sub == "diag":
        return _diag(host, argv, rest, as_json)
    if not _engine_up(host):
        return ToolOutput(NO_ENGINE, "", 250)
    if sub == "health":
        return _health(host, argv, rest, as_json)
    if sub == "nvlink":
        return _nvlink(host, argv, rest, as_json)
    return usage_error("dcgmi", argv)


def _diag(host: HostState, argv: list[str], rest: list[str], as_json: bool) -> ToolOutput:
    level = None
    i = 0
    while i < len(rest):
        if rest[i] in ("-r", "--run") and i + 1 < len(rest):
            level = dcgmi_diag.LEVELS.get(rest[i + 1])
            i += 1
        elif rest[i] in ("-g", "--group", "-i", "--gpuList") and i + 1 < len(rest):
            i += 1
        else:
            return usage_error("dcgmi", argv)
        i += 1
    if level is None:
        return usage_error("dcgmi", argv)
    if nvml.driver_error(host) is not None:
        return ToolOutput("Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n",
                          "", 250)
    text, rc = dcgmi_diag.render(host, level, as_json)
    return ToolOutput(text, "", rc)


class TreeNode(TypedDict, total=False):
    """A node of DCGM's output tree (`dcgmi health -c`, `dcgmi nvlink -e`), as its JSON output nests them."""

    value: str
    overflow: list[str]  # continuation rows of a long value
    messages: list[str]  # the health messages, before they are wrapped into `overflow`
    children: dict[str, TreeNode]


def incidents(host: HostState) -> list[tuple[int, str, str, str]]:
    """(gpu id, system, Warning|Failure, message) as DCGM's health watches record them."""
    found: list[tuple[int, str, str, str]] = []
    ids = {id(g): i for i, g in enumerate(nvml.devices(host))}
    for gpu in nvml.devices(host):
        i = ids[id(gpu)]
        found += _gpu_incidents(i, gpu)
    for gpu, xid in nvml.recent_xids(host):
        if xid in REPORTED_XIDS and id(gpu) in ids:
            system = "Memory system" if xid in MEMORY_XIDS else "NVLINK system" if xid in NVLINK_XIDS else "Driver"
            health = "Warning" if xid in WARNING_XIDS else "Failure"
            found.append((ids[id(gpu)], system, health, f"Detected XID {xid} for GPU {ids[id(gpu)]}"))
    return sorted(found, key=lambda x: (x[0], x[1]))


def _gpu_incidents(i: int, gpu: Gpu) -> list[tuple[int, str, str, str]]:
    found = []
    dbe = gpu.ecc_volatile_dram_uncorrected + gpu.ecc_volatile_sram_uncorrected
    if dbe:
        found.append((i, "Memory system", "Failure", f"Detected {dbe} volatile double-bit ECC error(s) in GPU {i}."))
    if gpu.remap_failure:
        found.append((i, "Memory system", "Failure",
                      f"GPU {i} had uncorrectable memory errors and row remapping failed."))
    if gpu.remap_pending:
        found.append((i, "Memory system", "Warning", f"GPU {i} had memory errors and row remappings are pending"))
    if gpu.inforom_corrupt:
        found.append((i, "InfoROM system", "Warning", f"A corrupt InfoROM has been detected in GPU {i}."))
    if gpu.clocks_event_reasons & 0x60:
        found.append((i, "Thermal system", "Warning",
                      f"Detected clock throttling due to thermal violation in GPU {i}."))
    if gpu.clocks_event_reasons & 0x80:
        found.append((i, "Power system", "Warning", f"Detected clock throttling due to power violation in GPU {i}."))
    limit = 31 if gpu.pcie_gen_max >= 5 else 16
    if gpu.pcie_replay_rate > limit:
        found.append((i, "PCIe system", "Warning",
                      f"Detected more than {limit} PCIe replays per minute for GPU {i} : {int(gpu.pcie_replay_rate)}"))
    for link, speed in enumerate(gpu.nvlink):
        if not speed:
            found.append((i, "NVLINK system", "Failure", f"GPU {i}'s NvLink link {link} is currently down"))
    if gpu.nvlink_crc_errors >= 100:
        found.append((i, "NVLINK system", "Warning", f"Detected {gpu.nvlink_crc_errors} CRC FLIT NvLink errors on "
                      f"GPU {i}'s NVLink which exceeds threshold of 100"))
    return found


def _health(host: HostState, argv: list[str], rest: list[str], as_json: bool) -> ToolOutput:
    flags = [a for a in rest if a.startswith("-")]
    if "-s" in rest or "--set" in rest:
        return ToolOutput("Health monitor systems set successfully.\n")
    if not ({"-c", "--check"} & set(flags)):
        return usage_error("dcgmi", argv)
    found = incidents(host)
    overall = max((h for *_, h, _m in found), key=HEALTH_RANK.__getitem__, default="Healthy")
    tree: dict[str, TreeNode] = {"Overall Health": {"value": overall}}
    gpus: dict[str, TreeNode] = {}
    for gpu_id, system, health, message in found:
        entity = gpus.setdefault(str(gpu_id), {"value": "Healthy", "children": {"Errors": {"children": {}}}})
        if HEALTH_RANK[health] > HEALTH_RANK[str(entity["value"])]:
            entity["value"] = health
        systems = entity["children"]["Errors"]["children"]
        node = systems.setdefault(system, {"value": health, "overflow": []})
        if HEALTH_RANK[health] > HEALTH_RANK[node["value"]]:
            node["value"] = health
        node["messages"] = [*node.get("messages", []), message]
    for entity in gpus.values():
        for node in entity["children"]["Errors"]["children"].values():
            node["overflow"] = textwrap.wrap(", ".join(node.pop("messages")), 54)
    if gpus:
        tree["GPU"] = {"children": gpus}
    if as_json:
        doc = {"body": tree, "header": ["Health Monitor Report"]}
        return ToolOutput(json.dumps(doc, indent=3, sort_keys=True, separators=(",", " : ")) + "\n")
    return ToolOutput(_tree_text(tree, "Health Monitor Report", 28, 60))


def _tree_text(tree: dict[str, TreeNode], header: str, left: int, right: int) -> str:
    """DCGM's DcgmiOutputTree layout: `-> ` prefixed levels, overflow rows with an empty label."""
    hline = "+" + "-" * (left - 1) + "+" + "-" * (right - 2) + "+"
    out = [hline, "| " + header.ljust(left + right - 3) + "|", hline.replace("-", "=")]

    def row(level: int, label: str, value: str, prefix: str = "-> ") -> None:
        text = (" " * (3 * level - 3) + prefix + label) if level else label
        out.append(f"| {text:<{left - 3}} | {value:<{right - 4}} |")

    def walk(level: int, label: str, node: TreeNode) -> None:
        row(level, label, str(node.get("value", "")))
        for extra in node.get("overflow", []):
            out.append(f"| {'':<{left - 3}} | {extra:<{right - 4}} |")
        for name, child in (node.get("children") or {}).items():
            walk(level + 1, name, child)

    for name, node in tree.items():
        walk(0, name, node)
    out.append(hline)
    return "\n".join(out) + "\n"


def _nvlink(host: HostState, argv: list[str], rest: list[str], as_json: bool) -> ToolOutput:
    gpus = nvml.devices(host)
    if rest in (["-s"], ["--link-status"]):
        lines = ["+----------------------+", "|  NvLink Link Status  |", "+----------------------+", "GPUs:"]
        for i, gpu in enumerate(gpus):
            states = " ".join("U" if s else "D" for s in gpu.nvlink) if gpu.nvlink else " ".join(["_"] * NO_NVLINK)
            lines += [f"    gpuId {i}:", "        " + states]
        lines.append("NvSwitches:")
        if host.nvswitch_count:
            for k in range(host.nvswitch_count):
                lines += [f"    physicalId {8 + k}:", "        " + " ".join(["U"] * 64)]
        else:
            lines.append("    No NvSwitches found.")
        lines += ["", "Key: Up=U, Down=D, Disabled=X, Not Supported=_"]
        return ToolOutput("\n".join(lines) + "\n")
    if len(rest) == 3 and rest[0] in ("-e", "--errors") and rest[1] in ("-g", "--gpuid"):
        try:
            gpu = gpus[int(rest[2])]
        except (ValueError, IndexError):
            return ToolOutput("Error: Invalid GPU ID\n", "", 255)
        noisy = next((k for k, s in enumerate(gpu.nvlink) if not s), 0)
        tree: dict[str, TreeNode] = {}
        for link in range(len(gpu.nvlink)):
            crc = gpu.nvlink_crc_errors if link == noisy else 0
            replay = gpu.nvlink_replay_errors if link == noisy else 0
            tree[f"Link {link}"] = {"children": {
                "CRC FLIT Error": {"value": "0"}, "CRC Data Error": {"value": str(crc)},
                "Replay Error": {"value": str(replay)}, "Recovery Error": {"value": "1" if replay else "0"}}}
        if as_json:
            doc = {"body": tree, "header": ["NVLINK Error Counts", f"GPU {rest[2]}"]}
            return ToolOutput(json.dumps(doc, indent=3, sort_keys=True, separators=(",", " : ")) + "\n")
        text = _tree_text(tree, "NVLINK Error Counts", 30, 50)
        lines = text.splitlines()
        lines.insert(2, "| " + f"GPU {rest[2]}".ljust(77) + "|")
        return ToolOutput("\n".join(lines) + "\n")
    return usage_error("dcgmi", argv)
