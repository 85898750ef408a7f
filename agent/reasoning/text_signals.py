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
GPU_INDEX = re.compile(r"\b(?:GPU|cuda:|device)\s?#?(\d{1,2})\b", re.IGNORECASE)
RANK = re.compile(r"\brank\s*[:=]?\s*(\d{1,5})\b", re.IGNORECASE)
# "NVRM: Xid (PCI:0000:3b:00): 79, ...", old drivers' "Xid (0000:01:00): 79", and prose "Xid 79" / "XID: 79"
XID = re.compile(r"\bXid\b(?:\s*\((?:PCI:)?[0-9a-fA-F:.]+\))?\s*[:=]?\s*(\d{1,3})\b", re.IGNORECASE)
DEVICE = re.compile(r"\b(mlx5_(?:ib)?\d+|ib\d+|eth\d+|ens\w+|enp\w+|bond\d+|eno\d+|hsn\d+)\b")
HOST = re.compile(r"\b((?:[a-z][a-z0-9]*-)+[a-z0-9]*\d[a-z0-9]*|node\d+|gpu\d{2,}|c\d{3}(?:-\d+)?)\b",
                  re.IGNORECASE)
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
    found.hosts = _unique(m.group(1) for m in HOST.finditer(text)
                          if not DEVICE.fullmatch(m.group(1)) and not m.group(1).lower().startswith(("cuda", "nccl")))
    found.error_codes = _unique(m.group(1) for m in ERROR_CODE.finditer(text))
    for name, pattern in VERSIONS.items():
        match = pattern.search(text)
        if match:
            found.versions[name] = match.group(1)
    return found


def title(text: str, lines: list[str]) -> str:
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return (lines[0] if lines and len(first) < 12 else first)[:120]


def _unique(values) -> list[str]:  # type: ignore[no-untyped-def]
    return list(dict.fromkeys(values))[:32]
