"""Verification instructions from history (AidAI §4.1): per leaf, the commands the OCEs ran to confirm the cause
and what they saw, mapped onto the existing checks, or turned into a check *proposal* for a person to review.

A command is mined from the discussion and resolution text: a `backticked` span or a `$ `-prompted line whose
first word is a diagnostic tool. It maps onto the existing checks whose script runs the same tool, ranked by how
many of the command's words the script and its manifest description share. A command no check runs becomes a
proposal: the commands, the results the OCEs reported and the incidents they come from, as text to review. Nothing
here writes a script or runs anything; mined text never becomes a command line.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.checks.manifest import Manifest, load_manifest
from agent.history.labeling import Labelled

TOOLS = ("nvidia-smi", "dcgmi", "ibstat", "ibv_devinfo", "ibv_devices", "ibdiagnet", "ibdev2netdev", "iblinkinfo",
         "perfquery", "all_reduce_perf", "all_gather_perf", "ib_write_bw", "ib_read_bw", "lspci", "dmesg",
         "journalctl", "systemctl", "ethtool", "docker", "nvcc", "ulimit", "df", "mount", "ipmitool", "py-spy",
         "nv-fabricmanager", "nvidia-bug-report.sh", "nvidia-container-cli", "rdma", "show_gids", "mst", "mlxlink",
         "lsmod", "modinfo", "numactl", "nvidia-persistenced", "sinfo", "scontrol", "kubectl", "python", "python3",
         "pip", "free", "top", "ip", "ping", "env")
_CMD = re.compile(r"`([^`\n]{3,200})`|^\s*[$#]\s+(\S[^\n]{2,200})$", re.MULTILINE)
_LIB_PREFIX = "checklib"


@dataclass(frozen=True)
class MinedCommand:
    command: str
    tool: str
    result: str  # the sentence of the discussion the command appeared in (what was seen)
    incident: str


@dataclass
class CheckProposal:
    """A new check for review: what it should run and see, from which incidents. Not a script."""

    label: str
    tool: str
    commands: list[str]
    results: list[str]
    incidents: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "tool": self.tool, "commands": self.commands, "results": self.results,
                "incidents": self.incidents, "status": "proposal: write and review a check script, then add it "
                                                      "to verification_scripts/manifest.yaml"}


@dataclass
class LeafVerification:
    label: str
    commands: list[MinedCommand] = field(default_factory=list)
    mapped: dict[str, list[str]] = field(default_factory=dict)  # check id -> the mined commands it covers
    proposals: list[CheckProposal] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "commands": sorted({c.command for c in self.commands}),
                "checks": self.mapped, "proposals": [p.to_dict() for p in self.proposals]}


def _tool_of(command: str) -> str | None:
    words = command.strip().split()
    while words and (words[0] in ("sudo", "time", "watch") or "=" in words[0] or words[0].startswith("-")):
        words = words[1:]
    if not words:
        return None
    head = words[0].rsplit("/", 1)[-1]
    return head if head in TOOLS else None


def _sentence_around(text: str, start: int, end: int) -> str:
    left = max(text.rfind(". ", 0, start), text.rfind("\n", 0, start))
    right_candidates = [i for i in (text.find(". ", end), text.find("\n", end)) if i >= 0]
    right = min(right_candidates) if right_candidates else len(text)
    return re.sub(r"\s+", " ", text[left + 1:right + 1]).strip()[:300]


def mine_commands(text: str, incident: str) -> list[MinedCommand]:
    out: list[MinedCommand] = []
    for match in _CMD.finditer(text):
        command = (match.group(1) or match.group(2) or "").strip()
        tool = _tool_of(command)
        if tool:
            out.append(MinedCommand(command, tool, _sentence_around(text, match.start(), match.end()), incident))
    return out


def _helpers(folder: Path) -> dict[str, set[str]]:
    """`module.function` -> the tools it runs (`check.run(["tool", ...])`), for the shared helpers (checklib*.py)
    the check scripts call: a tool a script runs through a helper (checklib.loaded_modules runs lsmod) is that
    script's tool too."""
    out: dict[str, set[str]] = {}
    for path in sorted(folder.glob(f"{_LIB_PREFIX}*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef):
                out[f"{path.stem}.{node.name}"] = {
                    call.args[0].elts[0].value for call in ast.walk(node)
                    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "run"
                    and call.args and isinstance(call.args[0], ast.List) and call.args[0].elts
                    and isinstance(call.args[0].elts[0], ast.Constant) and isinstance(call.args[0].elts[0].value, str)}
    return out


def _script_words(manifest: Manifest) -> dict[str, tuple[set[str], str]]:
    """Per check: the words of its script and description, and that text with the tools the helpers it calls run
    (read once per manifest object)."""
    if id(manifest) in _WORDS:
        return _WORDS[id(manifest)][1]
    out: dict[str, tuple[set[str], str]] = {}
    helpers: dict[Path, dict[str, set[str]]] = {}
    for spec in manifest.checks:
        try:
            source = spec.script_path.read_text()
        except OSError:
            source = ""
        folder = spec.script_path.parent
        if folder not in helpers:
            helpers[folder] = _helpers(folder)
        called = dict.fromkeys(re.findall(rf"\b({_LIB_PREFIX}\w*\.\w+)\(", source))
        tools = sorted({tool for name in called for tool in helpers[folder].get(name, set())})
        text = f"{source}\n{spec.description}"
        out[spec.id] = (set(re.findall(r"[a-z][a-z0-9_.-]+", text.lower())), "\n".join([text, *tools]))
    _WORDS[id(manifest)] = (manifest, out)  # the manifest is kept so that its id is not reused
    return out


_WORDS: dict[int, tuple[Manifest, dict[str, tuple[set[str], str]]]] = {}


def map_command(command: MinedCommand, manifest: Manifest, prefer: set[str] | None = None, label: str = ""
                ) -> str | None:
    """The existing check that best covers the command, or None when no check's script runs its tool. Ranked by
    the command's words the script and description share, then by the leaf's words in the check's id and
    description (an ECC query is gpu_memory_errors' business more than gpu_inventory's), then `prefer`."""
    words = _script_words(manifest)
    tool_re = re.compile(rf"(?<![\w-]){re.escape(command.tool)}(?![\w-])")
    tokens = {t for t in re.findall(r"[a-z][a-z0-9_.-]+", command.command.lower()) if t != command.tool}
    leaf_words = {w for w in re.split(r"[._]", label.lower()) if len(w) > 2}
    best: tuple[float, str] | None = None
    for check_id, (vocab, text) in words.items():
        if not tool_re.search(text):
            continue
        spec_words = set(re.split(r"[^a-z0-9]+", f"{check_id} {manifest.get(check_id).description}".lower()))
        score = len(tokens & vocab) + 0.5 * len(leaf_words & spec_words) + (0.5 if prefer and check_id in prefer
                                                                             else 0.0)
        if best is None or score > best[0]:
            best = (score, check_id)
    return best[1] if best else None


def mine(labelled: list[Labelled], manifest: Manifest | None = None,
         bound: dict[str, list[str]] | None = None) -> dict[str, LeafVerification]:
    """Per label: the mined commands, their mapping onto existing checks, and proposals for the unmapped ones.
    `bound` (label -> checks already verifying it) breaks ties in favour of those checks."""
    manifest = manifest or load_manifest()
    out: dict[str, LeafVerification] = {}
    for item in labelled:
        text = "\n".join(p for p in (item.record.discussion, item.record.resolution) if p.strip())
        leaf = out.setdefault(item.label, LeafVerification(item.label))
        leaf.commands += mine_commands(text, item.record.id)
    for label, leaf in out.items():
        unmapped: dict[str, list[MinedCommand]] = defaultdict(list)
        for cmd in leaf.commands:
            check = map_command(cmd, manifest, set((bound or {}).get(label, [])), label)
            if check:
                leaf.mapped.setdefault(check, [])
                if cmd.command not in leaf.mapped[check]:
                    leaf.mapped[check].append(cmd.command)
            else:
                unmapped[cmd.tool].append(cmd)
        for tool, cmds in unmapped.items():
            leaf.proposals.append(CheckProposal(
                label, tool, sorted({c.command for c in cmds}), sorted({c.result for c in cmds if c.result}),
                sorted({c.incident for c in cmds})))
    return {k: v for k, v in out.items() if v.commands}
