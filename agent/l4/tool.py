"""L4 as a pre-triage tool: the incident's "logs" attachment -> hosts to check first, findings, taxonomy priors."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from agent.l4.localize import L4Result, localize
from agent.l4.patterns import PatternLibrary, library_path
from agent.models import Finding, ToolResult

if TYPE_CHECKING:
    from agent.incident import Incident

# Failure-indicating event text -> (taxonomy label, prior). Small on purpose: only signatures whose meaning does not
# depend on context; the planner treats priors as a head start, not a verdict.
PRIOR_RULES: list[tuple[re.Pattern[str], str, float]] = [
    (re.compile(r"fallen off the bus|Xid\D{0,20}\b79\b", re.I), "GPU.AVAILABILITY.FALLEN_OFF_BUS", 0.8),
    (re.compile(r"uncorrectable ECC|double bit error|\(DBE\)|Xid\D{0,20}\b48\b", re.I),
     "GPU.MEMORY.UNCORRECTABLE_ECC", 0.8),
    (re.compile(r"Row Remapp|Xid\D{0,20}\b6[34]\b", re.I), "GPU.MEMORY.ROW_REMAP_PENDING", 0.6),
    (re.compile(r"Xid\D{0,20}\b9[45]\b|Contained: SM", re.I), "GPU.MEMORY.CONTAINED_ECC_ERROR", 0.6),
    (re.compile(r"NVLink: fatal|Xid\D{0,20}\b74\b", re.I), "INTERCONNECT_NETWORKING.NVLINK.LINK_HARDWARE_FAULT", 0.7),
    (re.compile(r"Xid\D{0,20}\b1(19|20)\b|GSP", re.I), "SYSTEM_SOFTWARE.DRIVER.GSP_FIRMWARE_BUG", 0.5),
    (re.compile(r"CUDA error: unknown error|Cuda failure 'unknown error'|unspecified launch failure", re.I),
     "GPU.HARDWARE.FAULTY_GPU", 0.5),
    (re.compile(r"Link down|lost carrier|port error|IBV_WC_RETRY_EXC_ERR", re.I),
     "INTERCONNECT_NETWORKING.IB.LINK_FLAPPING", 0.6),
    (re.compile(r"NET/IB.*(completion|error)|ibv_\w+ failed|ncclRemoteError", re.I), "INTERCONNECT_NETWORKING.IB",
     0.4),
    (re.compile(r"Watchdog caught collective operation timeout|NCCL (WARN|error)", re.I), "INTERCONNECT_NETWORKING",
     0.2),
    (re.compile(r"CUDA out of memory|OutOfMemoryError", re.I), "USER_APPLICATION.CONFIG.BATCH_SIZE_OOM", 0.7),
    (re.compile(r"illegal memory access", re.I), "USER_APPLICATION.CODE.ILLEGAL_MEMORY_ACCESS", 0.5),
    (re.compile(r"Bus error.*shared memory|/dev/shm.*(No space|too small)|DataLoader worker .* killed by signal: Bus",
                re.I), "USER_APPLICATION.CONFIG.CONTAINER_SHM_TOO_SMALL", 0.7),
    (re.compile(r"No such file or directory: '[^']*\.(idx|bin|arrow|jsonl|parquet)'", re.I),
     "OTHER.STORAGE.DATA_FILES_PURGED", 0.4),
    (re.compile(r"CUDA driver version is insufficient", re.I), "SYSTEM_SOFTWARE.DRIVER.CUDA_DRIVER_MISMATCH", 0.7),
]
MAX_FINDINGS = 20
PATTERN_PRIOR = 0.9


def priors_for(texts: list[str]) -> dict[str, float]:
    priors: dict[str, float] = {}
    for text in texts:
        for pattern, label, prior in PRIOR_RULES:
            if pattern.search(text):
                priors[label] = max(priors.get(label, 0.0), prior)
    return priors


def to_tool_result(result: L4Result) -> ToolResult:
    # Nodes that deviate in nothing are listed by the localizer for completeness, not as hosts to check first.
    hosts = [n.node for n in result.nodes if n.score > 0] or [n.node for n in result.nodes[:1]]
    findings = [Finding(id=f"l4:{e.id[:8]}", severity="WARN", entity=e.nodes[0] if e.nodes else "",
                        message=e.template, raw_line=e.example) for e in result.events[:MAX_FINDINGS]]
    priors = priors_for([f"{e.template}\n{e.example}" for e in result.events])
    for match in result.patterns:
        if match.label:
            priors[match.label] = max(priors.get(match.label, 0.0), PATTERN_PRIOR * match.score)
    top = f"; check {', '.join(hosts[:3])} first" if hosts else ""
    summary = (f"{result.lines} log lines, {len(result.events)} failure-indicating events, failed in "
               f"{result.stage}{top}")
    return ToolResult(tool="l4", summary=summary, hosts=hosts, findings=findings, priors=priors,
                      data=result.model_dump(mode="json", exclude={"templates"}), duration_s=result.seconds)


def l4_pretriage(incident: Incident) -> ToolResult | None:
    logs = incident.attachments.get("logs")
    if not logs:
        return None
    began = time.perf_counter()
    success = incident.attachments.get("success")
    library = PatternLibrary(library_path())
    result = localize(logs, [success] if success else None, library=library)
    out = to_tool_result(result)
    out.duration_s = round(time.perf_counter() - began, 3)
    return out
