"""dcgmi diag -r LEVEL [-j]: per-GPU test outcomes derived from the GPU state, in DCGM 3.x or 4.x form.

DCGM 3.x prints the legacy "DCGM GPU Diagnostic" JSON (gpu_ids, Pass/Fail) and the boxed text with
"Pass - All" / "Fail - GPU: n"; 4.x prints "DCGM Diagnostic" with entity results and test summaries.
Messages and error ids are DCGM's (dcgm_errors.h).
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field

from agent.sim.state import Gpu, HostState
from agent.sim.tools import _nvml as nvml

# (3.x name, 4.x name, category, minimum level)
TESTS = [
    ("Denylist", "software", "Deployment", 1), ("NVML Library", "software", "Deployment", 1),
    ("CUDA Main Library", "software", "Deployment", 1), ("Permissions and OS Blocks", "software", "Deployment", 1),
    ("Persistence Mode", "software", "Deployment", 1), ("Environment Variables", "software", "Deployment", 1),
    ("Page Retirement/Row Remap", "software", "Deployment", 1), ("Graphics Processes", "software", "Deployment", 1),
    ("Inforom", "software", "Deployment", 1), ("Fabric Manager", "software", "Deployment", 1),
    ("PCIe", "pcie", "Integration", 2), ("GPU Memory", "memory", "Hardware", 2),
    ("Diagnostic", "diagnostic", "Hardware", 3), ("Targeted Stress", "targeted_stress", "Stress", 3),
    ("Targeted Power", "targeted_power", "Stress", 3), ("Memory Bandwidth", "memory_bandwidth", "Stress", 3),
    ("Memtest", "memtest", "Hardware", 4), ("Pulse Test", "pulse_test", "Hardware", 4),
]
LEVELS = {"1": 1, "quick": 1, "short": 1, "2": 2, "medium": 2, "3": 3, "long": 3, "4": 4, "xlong": 4}
BAD_CUDA_ENV = ("CUDA_LAUNCH_BLOCKING", "CUDA_INJECTION64_PATH", "CUDA_AUTO_BOOST")


@dataclass
class Outcome:
    status: str = "Pass"
    warnings: list[tuple[str, int, int, int]] = field(default_factory=list)  # msg, error_id, category, severity


def _outcome(host: HostState, test: str, gpu_id: int, gpu: Gpu) -> Outcome:
    out = Outcome()

    def fail(msg: str, error_id: int, category: int, severity: int, status: str = "Fail") -> None:
        out.warnings.append((msg, error_id, category, severity))
        if out.status != "Fail":
            out.status = status

    if test == "Persistence Mode" and not gpu.persistence_mode:
        fail(f"Persistence mode for GPU {gpu_id} is disabled.", 29, 3, 5)
    elif test == "Environment Variables":
        for name in BAD_CUDA_ENV:
            if name in host.env:
                fail(f"Found CUDA performance-limiting environment variable '{name}'.", 28, 3, 5, "Warn")
    elif test == "Page Retirement/Row Remap":
        if gpu.remap_failure:
            fail(f"GPU {gpu_id} had uncorrectable memory errors and row remapping failed.", 80, 10, 4)
        if gpu.remap_pending:
            fail(f"GPU {gpu_id} had memory errors and row remappings are pending", 85, 10, 6)
    elif test == "Inforom" and gpu.inforom_corrupt:
        fail(f"A corrupt InfoROM has been detected in GPU {gpu_id}.", 9, 10, 4)
    elif test == "Fabric Manager" and host.nvswitch_count and host.fabric_manager.state != "Completed":
        fail(f"The fabric manager has not finished training GPU {gpu_id}: fabric state "
             f"'{host.fabric_manager.state}'.", 108, 3, 4)
    elif test == "PCIe":
        if gpu.pcie_width_current < gpu.pcie_width_max:
            fail(f"GPU {gpu_id} is running at PCI link width {gpu.pcie_width_current}X, which is below the minimum "
                 f"allowed link generation of {gpu.pcie_width_max} (parameter 'min_pci_width')", 46, 13, 2)
        if gpu.pcie_gen_current < gpu.pcie_gen_max:
            fail(f"GPU {gpu_id} is running at PCI link generation {gpu.pcie_gen_current}, which is below the minimum "
                 f"allowed link generation of {gpu.pcie_gen_max} (parameter 'min_pci_generation')", 45, 13, 2)
        if nvml.switch_acs(host, gpu):
            fail(f"GPU {gpu_id} was unsuccessfully written to in a peer-to-peer test: PCIe P2P write", 86, 13, 2)
    elif test in ("GPU Memory", "Memtest"):
        used = sum(p.used_mib for p in gpu.processes)
        if gpu.ecc_volatile_dram_uncorrected or gpu.ecc_volatile_sram_uncorrected:
            fail(f"CUDA APIs have indicated that a double-bit ECC error has occured on GPU {gpu_id}.", 57, 10, 2)
        if gpu.remap_pending:
            fail(f"GPU {gpu_id} had memory errors and row remappings are pending", 85, 10, 6)
        if gpu.sm_defect:
            fail(f"A memory mismatch was detected on GPU {gpu_id}, but no error was reported by CUDA or NVML.",
                 58, 10, 2)
        if used > gpu.memory_total_mib // 2:
            fail(f"Couldn't allocate at least 90.0% of GPU memory on GPU {gpu_id}", 56, 6, 2)
        if gpu.clocks_event_reasons & 0x60:
            fail(f"There were thermal violations totaling 13.3 seconds for GPU {gpu_id}", 40, 9, 1, "Warn")
    elif test in ("Diagnostic", "Pulse Test") and gpu.sm_defect:
        fail(f"A memory mismatch was detected on GPU {gpu_id}, but no error was reported by CUDA or NVML.",
             58, 10, 2)
    elif test == "Targeted Stress" and gpu.perf_factor < 0.9:
        fail(f"Max stress level of {3000 * gpu.perf_factor:.1f} did not reach desired stress level of 3000.0 for "
             f"GPU {gpu_id}", 50, 1, 1)
    elif test == "Targeted Power":
        if gpu.clocks_event_reasons & 0x80:
            fail(f"Detected clock throttling due to power violation in GPU {gpu_id}.", 12, 14, 1)
        if gpu.clocks_event_reasons & 0x40:
            fail(f"There were thermal violations totaling 41.7 seconds for GPU {gpu_id}", 40, 9, 1)
    return out


def results(host: HostState, level: int) -> list[tuple[str, str, str, list[tuple[int, Gpu, Outcome]]]]:
    """(3.x name, 4.x name, category, [(gpu id, gpu, outcome)]) for every test the level runs."""
    gpus = list(enumerate(nvml.cuda_devices(host)))
    return [(name, new, category, [(i, g, _outcome(host, name, i, g)) for i, g in gpus])
            for name, new, category, minimum in TESTS if level >= minimum
            and (name != "Fabric Manager" or host.nvswitch_count)]


def dcgm_version(host: HostState) -> str:
    raw = host.software.packages.get("datacenter-gpu-manager") or host.software.packages.get(
        "datacenter-gpu-manager-4-core", "3.3.5")
    return raw.split(":", 1)[-1].split("-")[0]


def render(host: HostState, level: int, as_json: bool) -> tuple[str, int]:
    tests = results(host, level)
    failed = any(o.status == "Fail" for *_, rows in tests for _, _, o in rows)
    version = dcgm_version(host)
    modern = int(version.split(".")[0]) >= 4
    if as_json:
        doc = _json_modern(host, tests, version) if modern else _json_legacy(tests, version)
        text = json.dumps(doc, indent=3, sort_keys=True, separators=(",", " : ")) + "\n"
    else:
        text = _text(tests, modern, version, host)
    return text, 226 if failed else 0


def _warn_json(outcome: Outcome) -> list[dict[str, object]]:
    return [{"warning": m, "error_id": e, "error_category": c, "error_severity": s} for m, e, c, s in outcome.warnings]


def _json_legacy(tests, version: str) -> dict[str, object]:
    categories: dict[str, list[dict[str, object]]] = {}
    for name, _new, category, rows in tests:
        entries: list[dict[str, object]]
        if category == "Deployment" and all(o.status == "Pass" for _, _, o in rows):
            entries = [{"gpu_ids": ",".join(str(i) for i, _, _ in rows), "status": "Pass"}]
        else:
            entries = []
            for i, _gpu, outcome in rows:
                entry: dict[str, object] = {"gpu_ids": str(i), "status": outcome.status}
                if outcome.warnings:
                    entry["warnings"] = _warn_json(outcome)
                entries.append(entry)
        categories.setdefault(category, []).append({"name": name, "results": entries})
    return {"DCGM GPU Diagnostic": {
        "test_categories": [{"category": c, "tests": t} for c, t in categories.items()], "version": version}}


def _json_modern(host: HostState, tests, version: str) -> dict[str, object]:
    merged: dict[tuple[str, str], dict[int, Outcome]] = {}
    for _name, new, category, rows in tests:
        per_gpu = merged.setdefault((category, new), {})
        for i, _gpu, outcome in rows:
            slot = per_gpu.setdefault(i, Outcome())
            slot.warnings += outcome.warnings
            if outcome.status == "Fail" or (outcome.status == "Warn" and slot.status == "Pass"):
                slot.status = outcome.status
    categories: dict[str, list[dict[str, object]]] = {}
    for (category, new), per_gpu in merged.items():
        entries = []
        for i, outcome in per_gpu.items():
            entry: dict[str, object] = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": i,
                                        "status": outcome.status}
            if outcome.warnings:
                entry["warnings"] = _warn_json(outcome)
            entries.append(entry)
        statuses = {o.status for o in per_gpu.values()}
        summary = "Fail" if "Fail" in statuses else "Warn" if "Warn" in statuses else "Pass"
        categories.setdefault(category, []).append({"name": new, "results": entries,
                                                    "test_summary": {"status": summary}})
    gpus = nvml.cuda_devices(host)
    return {"DCGM Diagnostic": {"test_categories": [{"category": c, "tests": t} for c, t in categories.items()]},
            "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1, "entities": [
                {"entity_id": i, "device_id": g.pci_device_id, "serial_num": g.serial} for i, g in enumerate(gpus)]}],
            "metadata": {"version": version, "Driver Version Detected": host.driver.kernel_module_version}}


def _row(left: str, right: str) -> str:
    return f"| {left:<25} | {right:<46} |"


def _text(tests, modern: bool, version: str, host: HostState) -> str:
    rule = "+" + "-" * 27 + "+" + "-" * 48 + "+"
    lines = ["Successfully ran diagnostic for group.", rule, _row("Diagnostic", "Result"),
             "+" + "=" * 27 + "+" + "=" * 48 + "+"]
    if modern:
        lines += [f"|{'-----  Metadata  ':-<27}+{'-' * 48}|", _row("DCGM Version", version),
                  _row("Driver Version Detected", host.driver.kernel_module_version)]
    warnings: list[str] = []
    seen: list[str] = []
    for name, new, category, rows in tests:
        if category not in seen:
            edge = "|" if not seen and not modern else "+"
            lines.append(f"{edge}{'-----  ' + category + '  ':-<27}+{'-' * 48}{edge}")
            seen.append(category)
        statuses = [(i, o.status) for i, _, o in rows]
        label = new if modern else name
        texts = _per_entity(statuses) if modern else _grouped(statuses)
        if category == "Deployment" and not modern and len(texts) == 1:
            texts = [texts[0].split(" - ")[0]]
        for text in texts:
            lines.append(_row(label, text))
            label = ""
        for _, _, outcome in rows:
            warnings += [w[0] for w in outcome.warnings]
    for message in warnings:
        chunks = textwrap.wrap(message, 46) or [""]
        lines.append(_row("Warning", chunks[0]))
        lines += [_row("", " " + chunk) for chunk in chunks[1:]]
    lines.append(rule)
    return "\n".join(lines) + "\n"


def _grouped(statuses: list[tuple[int, str]]) -> list[str]:
    kinds = sorted({s for _, s in statuses}, key=["Fail", "Warn", "Pass", "Skip"].index)
    if len(kinds) == 1:
        return [f"{kinds[0]} - All"]
    out = []
    for kind in kinds:
        ids = [str(i) for i, s in statuses if s == kind]
        out.append(f"{kind} - GPU{'s' if len(ids) > 1 else ''}: {', '.join(ids)}")
    return out


def _per_entity(statuses: list[tuple[int, str]]) -> list[str]:
    kinds = {s for _, s in statuses}
    overall = "Fail" if "Fail" in kinds else "Warn" if "Warn" in kinds else "Pass"
    return [overall] + [f"GPU{i}: {s}" for i, s in statuses]
