"""Deterministic reading of incident text: the error lines that matter and the entities they name."""

from __future__ import annotations

import re

from agent.incident import Entities

MAX_KEY_LINES = 12
MAX_LINE = 300
# lines a human would copy into a ticket: errors, hardware events, hangs and kills
ERROR_LINE = re.compile(
    r"error|fail|fatal|exception|traceback|warn\b|nccl warn|xid|sxid|ecc|timeout|timed out|refused|killed|"
    r"segfault|segmentation fault|core dumped|abort|panic|hang|hung|stuck|oom|out of memory|not found|"
    r"no such|unable|cannot|can't|couldn't|mismatch|unsupported|not supported|denied|lost|down\b|"
    r"fallen off|throttl|degraded|invalid|illegal|corrupt|too old|insufficient|unhandled|deadlock",
    re.IGNORECASE)
NOISE_LINE = re.compile(r"^\s*(?:#|//|\$ |>>> )|^\s*$")
PCI_BUS = re.compile(r"\b(?:[0-9a-f]{4,8}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\b", re.IGNORECASE)
# a zero-padded number is a host's name (gpu01, gpu-node07), never a GPU index: the tools do not pad indices
GPU_INDEX = re.compile(r"\b(?:GPU|cuda:|device)\s?#?(0|[1-9]\d?)\b", re.IGNORECASE)
RANK = re.compile(r"\brank\s*[:=]?\s*(\d{1,5})\b", re.IGNORECASE)
# "NVRM: Xid (PCI:0000:3b:00): 79, ...", old drivers' "Xid (0000:01:00): 79", and prose "Xid 79" / "XID: 79"
XID = re.compile(r"\bXid\b(?:\s*\((?:PCI:)?[0-9a-fA-F:.]+\))?\s*[:=]?\s*(\d{1,3})\b", re.IGNORECASE)
DEVICE = re.compile(r"\b(mlx5_(?:ib)?\d+|ib\d+|eth\d+|ens\w+|enp\w+|bond\d+|eno\d+|hsn\d+)\b")
# host-name candidates; `_host_name` keeps those that read as hosts (model, stage and package names share the shape)
HOST = re.compile(r"\b((?:[a-z][a-z0-9]*-)+[a-z0-9]*\d[a-z0-9]*|node\d+|gpu\d{2,}|c\d{3}(?:-\d+)?)\b",
                  re.IGNORECASE)
HOST_SHAPE = re.compile(r"node\d+|gpu\d{2,}|c\d{3}(?:-\d+)?", re.IGNORECASE)
# first words of host names that need no context (node-7, gpu-a17, dgx-03, ip-10-0-0-12)
HOST_WORDS = {"node", "host", "gpu", "worker", "compute", "server", "srv", "vm", "dgx", "hgx", "cn", "gn", "ip",
              "instance", "machine", "rack", "login", "head"}
# a name-part no host name has: a model size (70B, 8x7b, 80GB), a CUDA/Python tag (cu12, py3), a form factor
# (SXM5, PCIe, NVL72), a number format (fp8, bf16, int4) or an architecture
NOT_HOST_PART = re.compile(r"\d+(?:\.\d+)?[kmbt]b?|\d+x\d+[kmbt]?b?|cu\d+|py\d+|sxm\d*|pcie\d*|nvl\d*|fp\d+|bf\d+|"
                           r"int\d+|x86|x64|amd64|arm64|aarch64", re.IGNORECASE)
NOT_HOST_PREFIX = ("cuda", "nccl", "nvidia", "lib", "python", "torch", "pytorch")
# what precedes a host name in prose and logs: "hosts a-1, b-2", "node=x-3", "user@x-3", "ssh x-3"
HOST_BEFORE = re.compile(r"(?:\b(?:hosts?|hostnames?|nodes?|servers?|machines?|workers?|vms?|instances?)\b\s*[:=]?\s*"
                         r"(?:[\w.-]+\s*(?:,|\band\b)\s*)*|@|\bssh\s+)$", re.IGNORECASE)
ERROR_CODE = re.compile(r"\b(CUDA_ERROR_[A-Z_]+|cuda(?:Error)[A-Za-z]+|nccl[A-Z][A-Za-z]+Error|NCCL_[A-Z_]+|"
                        r"DCGM_FR_[A-Z_]+|E(?:CONNREFUSED|CONNRESET|TIMEDOUT|HOSTUNREACH|NOMEM|NODEV|PERM|"
                        r"ACCES|NOENT|AGAIN|IO)|SIG(?:KILL|SEGV|ABRT|BUS|TERM)|Xid \d+)\b")
VERSIONS = {
    "driver": re.compile(r"(?:driver(?: version)?|NVRM version:.*Kernel Module)\s*:?\s*(\d{3}\.\d{1,3}(?:\.\d{1,3})?)",
                         re.IGNORECASE),
    "cuda": re.compile(r"\bCUDA(?: Version| version| runtime| toolkit)?\s*:?\s*(\d{1,2}\.\d{1,2}(?:\.\d+)?)\b",
                       re.IGNORECASE),
    "nccl": re.compile(r"\bNCCL(?: version)?\s*v?(\d\.\d{1,2}\.\d{1,2}(?:[.-]\d+)?)", re.IGNORECASE),
    "torch": re.compile(r"\b(?:torch|pytorch)(?: version)?\s*[=:v ]\s*=?(\d\.\d{1,2}(?:\.\d+)?)", re.IGNORECASE),
    "deepspeed": re.compile(r"\bdeepspeed(?: version)?\s*[=:v ]\s*=?(\d\.\d{1,2}(?:\.\d+)?)", re.IGNORECASE),
    "accelerate": re.compile(r"\baccelerate(?: version)?\s*[=:v ]\s*=?(\d\.\d{1,2}(?:\.\d+)?)", re.IGNORECASE),
    "ofed": re.compile(r"\bMLNX_OFED_LINUX-(\d[\w.-]+)", re.IGNORECASE),
}


# the job's shape in its own words: one host ("single node", torchrun's --nnodes=1, NCCL's "nNodes 1", or NCCL's
# channels all via P2P/SHM, which it picks only between GPUs of one host) ...
ONE_HOST = re.compile(r"\b(?:single|one)[- ](?:node|machine|host|server|workstation)\b|--nnodes[= ]1\b|"
                      r"--num_machines[= ]1\b|\bnNodes 1\b|\bvia (?:P2P|SHM)/", re.IGNORECASE)
# ... unless anything says it spans several (NCCL's channels via NET/ cross hosts)
SEVERAL_HOSTS = re.compile(
    r"\bmulti-?(?:node|host|machine)|\b(?:multiple|several|many|across(?: \w+)?) (?:nodes|machines|hosts|servers)\b|"
    r"\binter-?node\b|\b(?:[2-9]|\d{2,}|two|three|four|eight)\s?x?\s?(?:nodes|machines|hosts|servers)\b|"
    r"--nnodes[= ](?:[2-9]|\d{2,})|--num_machines[= ](?:[2-9]|\d{2,})|\bnNodes (?:[2-9]|\d{2,})|\bnodes:\s*[2-9]|"
    r"\bvia NET/", re.IGNORECASE)


def key_lines(text: str, boost: list[re.Pattern[str]] | None = None) -> list[str]:
    """Error lines verbatim (trimmed), lines matching a taxonomy signature first, duplicates dropped."""
    seen: set[str] = set()
    strong: list[str] = []
    other: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if NOISE_LINE.match(raw) or not ERROR_LINE.search(line):
            continue
        # Xid bursts repeat with new timestamps: compare without the leading [time] stamp
        norm = re.sub(r"^\[[^\]]*\]\s*", "", line)[:MAX_LINE]
        if norm in seen:
            continue
        seen.add(norm)
        target = strong if boost and any(p.search(line) for p in boost) else other
        target.append(line[:MAX_LINE])
    return (strong + other)[:MAX_KEY_LINES]


def entities(text: str) -> Entities:
    found = Entities()
    found.gpus = _unique([m.group(0).lower() for m in PCI_BUS.finditer(text)]
                         + [f"GPU{m.group(1)}" for m in GPU_INDEX.finditer(text)])
    found.ranks = sorted({int(m.group(1)) for m in RANK.finditer(text)})[:64]
    found.xids = sorted({int(m.group(1)) for m in XID.finditer(text)})
    found.devices = _unique(m.group(1) for m in DEVICE.finditer(text))
    found.hosts = _unique(m.group(1) for m in HOST.finditer(text) if _host_name(m.group(1), text, m.start(1)))
    found.error_codes = _unique(m.group(1) for m in ERROR_CODE.finditer(text))
    for name, pattern in VERSIONS.items():
        match = pattern.search(text)
        if match:
            found.versions[name] = match.group(1)
    return found


def one_host(text: str) -> str | None:
    """The words that show the incident's job runs on one host, or None (several hosts, or nothing says)."""
    if SEVERAL_HOSTS.search(text):
        return None
    match = ONE_HOST.search(text)
    return match.group(0) if match else None


def _host_name(token: str, text: str, start: int) -> bool:
    """A HOST candidate that reads as a host name: never a device, a product or stage name in mixed case (ZeRO-3,
    ConnectX-7) or a token with a part no host name has (llama3-70B, A100-SXM-8, nvidia-nccl-cu12); then either
    said to be a host by what precedes it (`on hosts x-7`, `user@x-7`, a log line's `x-7:` prefix) or shaped like
    one (node12, node-7, gpu-a17, a name of three or more parts ending in a number: gpu-node-07)."""
    if DEVICE.fullmatch(token) or token.lower().startswith(NOT_HOST_PREFIX) or re.search(r"[a-z][A-Z]", token):
        return False
    parts = token.lower().split("-")
    if any(NOT_HOST_PART.fullmatch(part) for part in parts):
        return False
    line_start = text.rfind("\n", 0, start) + 1
    before = text[max(line_start, start - 120):start]
    if HOST_BEFORE.search(before) or (not before.strip(" \t[") and text[start + len(token):].startswith((":", "]"))):
        return True
    if HOST_SHAPE.fullmatch(token) or parts[0] in HOST_WORDS:
        return True
    return len(parts) >= 3 and parts[-1].isdigit()


def title(text: str, lines: list[str]) -> str:
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return clip_words(lines[0] if lines and len(first) < 12 else first, 120)


def clip_words(text: str, limit: int) -> str:
    """`text` cut at a word boundary within `limit` characters (versions and ids are never cut in half)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return (cut if len(cut) > limit // 2 else text[:limit]).rstrip(" ,;:-") + " …"


def _unique(values) -> list[str]:  # type: ignore[no-untyped-def]
    return list(dict.fromkeys(values))[:32]
