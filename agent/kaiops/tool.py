"""KAIOPS as a pre-triage tool: when the incident carries a metrics CSV (attachment "metrics"), classify the job
from it, the log tail (attachment "logs", plus the incident text's lines) and its hosts (incident hosts and an
optional "hosts" attachment, one a line); priors over the taxonomy's MAIN categories from the class
probabilities, and the knowledge graph's root cause and solutions for the predicted category."""

from __future__ import annotations

import time
from pathlib import Path

from agent.executors.hosts import HostSpecError, parse_spec
from agent.incident import Incident
from agent.kaiops import KaiopsError
from agent.models import Finding, ToolResult
from agent.taxonomy import load_taxonomy

# KAIOPS class -> shares over MAIN categories (each row sums to 1); Normal points nowhere
MAIN_SHARES: dict[str, dict[str, float]] = {
    "Software": {"USER_APPLICATION": 0.5, "FRAMEWORK_LIBRARY": 0.3, "SYSTEM_SOFTWARE": 0.2},
    "Performance": {"GPU": 0.4, "INTERCONNECT_NETWORKING": 0.2, "USER_APPLICATION": 0.2, "OTHER": 0.2},
    "Network": {"INTERCONNECT_NETWORKING": 1.0},
    "Hardware": {"GPU": 0.75, "OTHER": 0.25},
}
MAX_PRIOR = 0.6  # a classifier trained on simulated jobs: a head start, never as strong as a failing check


def main_priors(probabilities: dict[str, float]) -> dict[str, float]:
    mains = [n.name for n in load_taxonomy().children()]
    return {m: round(MAX_PRIOR * sum(p * MAIN_SHARES.get(c, {}).get(m, 0.0) for c, p in probabilities.items()), 4)
            for m in mains}


def _hosts(incident: Incident) -> list[str]:
    hosts = [_host_name(h) for h in incident.hosts]
    listed = incident.attachments.get("hosts")
    if listed and Path(listed).is_file():
        hosts += [line.strip() for line in Path(listed).read_text(encoding="utf-8").splitlines() if line.strip()]
    return [h for h in dict.fromkeys(hosts) if h and h != "local"]


def kaiops_pretriage(incident: Incident) -> ToolResult | None:
    path = incident.attachments.get("metrics")
    if not path:
        return None
    began = time.perf_counter()
    from agent.kaiops.classify import classify_job

    logs = incident.attachments.get("logs")
    try:
        out = classify_job(Path(path), Path(logs) if logs else None, _hosts(incident),
                           extra_lines=[line for line in incident.text.splitlines() if line.strip()][-8:])
    except (KaiopsError, OSError) as exc:
        return ToolResult(tool="kaiops", status="error", summary=f"cannot classify {path}: {exc}", reason=str(exc),
                          duration_s=round(time.perf_counter() - began, 3))
    probs = out["probabilities"]
    label = out["label"]
    findings = [Finding(id="kaiops_class", severity="INFO" if label == "Normal" else "WARN", entity=label,
                        message=f"KAIOPS class {label} (p={probs[label]:.2f}); "
                                + ", ".join(f"{k} {v:.2f}" for k, v in probs.items()))]
    summary = f"{label} (p={probs[label]:.2f})"
    rca = out.get("rca")
    if rca and rca.get("root_cause"):
        findings.append(Finding(id="kaiops_root_cause", severity="INFO", entity=rca["root_cause"],
                                message=f"knowledge graph: {rca['root_cause']} (score {rca['score']:.2f}); "
                                        f"solutions: {' | '.join(rca['solutions'][:3])}"))
        summary += f"; KG root cause {rca['root_cause']}"
    return ToolResult(tool="kaiops", status="ok", summary=summary, findings=findings, priors=main_priors(probs),
                      data=out, duration_s=round(time.perf_counter() - began, 3))


def _host_name(text: str) -> str:
    """The name KAIOPS's placement knows a host by: a sim scenario's directory, an ssh:// spec's host; a name that is
    not a spec is that name."""
    try:
        spec = parse_spec(text)
    except HostSpecError:
        return text
    return Path(spec.target).name if spec.kind == "sim" else spec.target if spec.kind == "ssh" else ""
