#!/usr/bin/env python3
"""DCGM diagnostic (active): `dcgmi diag -r LEVEL -j` (params level, default 2: deployment + memory + pcie).

Parses DCGM 4.x ("DCGM Diagnostic", entity results) and 3.x/legacy ("DCGM GPU Diagnostic", gpu_ids)
JSON, else the boxed text. Fail on a hardware test confirms; a failing configuration test (persistence
mode, environment, graphics processes) is only weak evidence for GPU hardware. Refuses busy GPUs.
"""

import json
import re

import checklib
import checklib_gpu

CONFIG_TESTS = {"persistence mode", "environment variables", "environmental variables", "graphics processes",
                "denylist", "blacklist", "permissions and os blocks", "permissions and os-related blocks"}
CONFIG_ERROR_IDS = {23, 25, 28, 29}  # denylisted driver, graphics processes, CUDA env, persistence mode
CONFIG_CATEGORY = 3  # DCGM_FR_EC_SOFTWARE_CONFIG
# DCGM_FR_MEMORY_MISMATCH (dcgm_errors.h): the memory test read back other data than it wrote and neither CUDA nor
# NVML reported an ECC error: silent corruption on the GPU, not an ECC event ("... but no error was reported by CUDA
# or NVML", its message in every DCGM version)
MEMORY_MISMATCH_ID = 58
MEMORY_MISMATCH_RE = re.compile(r"memory mismatch was detected.*no error was reported by CUDA or NVML", re.IGNORECASE)
# the PCIe test judges transfer paths, not the GPU (DCGM's PCIe plugin page): a link trained below its generation or
# width or replaying too often (DCGM_FR_PCI_REPLAY_RATE 3, DCGM_FR_PCIE_GENERATION 45, DCGM_FR_PCIE_WIDTH 46), or a
# peer-to-peer write or read that did not arrive (ACS or the IOMMU redirecting P2P)
PCIE_LINK_IDS = {3, 45, 46}
PCIE_LINK_RE = re.compile(r"PCI link (?:width|generation)|PCIe replays", re.IGNORECASE)
PCIE_P2P_RE = re.compile(r"peer-to-peer|\bp2p\b", re.IGNORECASE)
ROW_RE = re.compile(r"^\| (.{0,25}?)\s*\| (.*?)\s*\|$")
TEXT_RESULT_RE = re.compile(r"^(Pass|Fail|Warn|Skip)(?: - (All|GPUs?: ([\d, ]+)))?$", re.IGNORECASE)
ENTITY_RESULT_RE = re.compile(r"^GPU(\d+): (Pass|Fail|Warn|Skip)", re.IGNORECASE)
# a deployment error that stops the diagnostic but names broken memory is hardware evidence by itself
MEMORY_ERROR_RE = re.compile(r"uncorrectable memory|row remap|retired pages|page retirement", re.IGNORECASE)
GPU_RE = re.compile(r"\bGPU (\d+)\b")
# how DCGM names a GPU inside a warning: "for GPU 2", "GPU 5 has", "GPU 0:", "GPU3"
GPU_NAME_RE = re.compile(r"\bGPU ?(\d+)\b")


def results_from_json(text):
    """[(test, entity or None, status, [(message, error_id, category)])], or None when not diag JSON.

    Layouts by generation (NVIDIA/DCGM sources): NVVS 1.3 lists one result per test for all GPUs
    ("gpu_ids": "0,1,2,3") and names the failing GPUs only inside its warning strings; NVVS 1.7 / DCGM
    2.x-3.x list one result per GPU ("gpu_ids" or "gpu_id", a string or a number; arrays may hold nulls),
    with warnings as strings, as one string, or as {warning, error_id, error_category} objects; a 3.x
    deployment test puts its extra errors in further result entries without a status; DCGM 4.x names
    entities (entity_group / entity_id)."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    root = doc.get("DCGM Diagnostic") or doc.get("DCGM GPU Diagnostic")
    if not isinstance(root, dict):
        return None
    if root.get("runtime_error"):
        return [("runtime", None, "error", [(str(root["runtime_error"]), None, None)])]
    out = []
    for category in dicts(root.get("test_categories")):
        for test in dicts(category.get("tests")):
            out += test_results(str(test.get("name") or "?"), dicts(test.get("results")))
    return out


def dicts(value):
    """The objects of a JSON array (DCGM's arrays may hold nulls where an index was skipped)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def test_results(name, results):
    """One test's rows: results without a status carry more warnings for the first result that has one."""
    rows, orphans = [], []
    for result in results:
        warnings = warning_list(result)
        status = normal_status(result.get("status"))
        if status is None:
            orphans += warnings
            continue
        rows.append([status, entities(result), warnings])
    if rows and orphans:
        rows[0][2] = rows[0][2] + orphans
    out = []
    for status, who, warnings in rows:
        for entity, messages in attribute(who, status, warnings):
            out.append((name, entity, status, messages))
    return out


def normal_status(value):
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    status = str(value).strip().lower()
    if status.startswith("skip") or status.replace("_", " ") in ("not run", "notrun", "not applicable", "n/a"):
        return "skip"
    return status


def warning_list(result):
    """[(message, error_id, category)] of one result, whichever way its DCGM version spelled them."""
    raw = result.get("warnings")
    if raw is None:
        return []
    items = raw if isinstance(raw, list) else [raw]
    out = []
    for w in items:
        if isinstance(w, dict):
            out.append((str(w.get("warning") or ""), w.get("error_id"), w.get("error_category")))
        elif w is not None and str(w).strip():
            # DCGM 2.x-3.x put a string warning's error_id / error_category beside it in the result
            out.append((str(w), result.get("error_id"), result.get("error_category")))
    return out


def entities(result):
    if "entity_id" in result:
        return ["%s%s" % (result.get("entity_group", "GPU"), result["entity_id"])]
    ids = result.get("gpu_ids", result.get("gpu_id"))
    if ids is None:
        return [None]
    return ["GPU%s" % i.strip() for i in str(ids).split(",") if i.strip()] or [None]


def attribute(who, status, warnings):
    """[(entity, warnings)]: a failing or warning result that covers several GPUs (or none named) blames
    only the GPUs its warnings name; when they name none, every GPU it lists (DCGM's own reading)."""
    if status not in ("fail", "warn") or (len(who) == 1 and who[0] is not None):
        return [(entity, warnings) for entity in who]
    named = {}
    for warning in warnings:
        for gpu in GPU_NAME_RE.findall(warning[0]):
            entity = "GPU" + gpu
            if who == [None] or entity in who:
                named.setdefault(entity, []).append(warning)
    if not named:
        return [(entity, warnings) for entity in who]
    return sorted(named.items(), key=lambda kv: int(kv[0][3:]))


def results_from_text(text):
    """The boxed table: 'Pass - All', 'Fail - GPU: 0', 'GPU3: Fail', and 'Warning'/'Error' rows with
    continuations."""
    out, test, warning = [], None, None
    for line in text.splitlines():
        match = ROW_RE.match(line.strip())
        if not match or line.startswith("|-----") or line.startswith("+"):
            continue
        label, value = match.group(1).strip(), match.group(2).strip()
        if label in ("Diagnostic", "Metadata") or label.startswith("DCGM Version") or "Detected" in label:
            continue
        if label in ("Warning", "Error"):
            warning = [value]
            out.append((label.lower(), None, label.lower() + "-text", warning))
            continue
        if not label and warning is not None and not TEXT_RESULT_RE.match(value) \
                and not ENTITY_RESULT_RE.match(value):
            warning[0] = (warning[0] + " " + value).strip()
            continue
        warning = None
        test = label or test
        entity = ENTITY_RESULT_RE.match(value)
        if entity:
            out.append((test, "GPU" + entity.group(1), entity.group(2).lower(), []))
            continue
        result = TEXT_RESULT_RE.match(value)
        if result:
            ids = result.group(3)
            for gpu in ([i.strip() for i in ids.split(",") if i.strip()] if ids else [None]):
                out.append((test, "GPU" + gpu if gpu else None, result.group(1).lower(), []))
    return out or None


def busy(check):
    cmd = check.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"])
    return [p for p in cmd.out.split() if p.isdigit()]


def body(check):
    level = str(check.params.get("level", 2))
    if not check.params.get("allow_busy"):
        pids = busy(check)
        if pids:
            check.unknown("GPUs in use by %d process(es): the diagnostic needs idle GPUs (params allow_busy)"
                          % len(pids))
    # stay inside the runner's own timeout (params timeout_s) so a hang is reported, not killed
    limit = max(30.0, float(check.params.get("timeout_s", 570)) - 30)
    cmd = check.run(["dcgmi", "diag", "-r", level, "-j"], timeout=limit)
    if cmd.missing:
        check.unknown("dcgmi not found (DCGM not installed)")
    if cmd.timed_out:
        check.unknown("dcgmi diag -r %s timed out" % level)
    results = results_from_json(cmd.out) or results_from_text(cmd.out)
    if not results:
        check.unknown("no diagnostic results (%s)" % (checklib.first_line(cmd.text) or cmd.why()))
    check.metrics.update({"level": int(level) if level.isdigit() else level, "rc": cmd.rc,
                          "tests": sorted(set(r[0] for r in results if not r[2].endswith("-text")))})
    judge(check, results)


def pcie_finding(warnings):
    """diag_pcie_p2p (peer-to-peer transfers), diag_pcie_link (the link's training or replays), else diag_pcie."""
    if any(PCIE_P2P_RE.search(m or "") for m, _, _ in warnings):
        return "diag_pcie_p2p"
    if warnings and all(e in PCIE_LINK_IDS or PCIE_LINK_RE.search(m or "") for m, e, _ in warnings):
        return "diag_pcie_link"
    return "diag_pcie"


def judge(check, results):
    failed = []
    text_warnings = [w[0] for t, _, s, w in results if s == "warn-text"]
    errors = [w[0] for t, _, s, w in results if s == "error-text"]
    for error in errors:
        if MEMORY_ERROR_RE.search(error):
            gpu = GPU_RE.search(error)
            check.fail("diag_deployment_memory", "GPU" + gpu.group(1) if gpu else "host",
                       "DCGM refused to run: " + error, error)
    if errors and not check.findings and all(s.endswith("-text") for _, _, s, _ in results):
        check.unknown("dcgmi diag did not run: " + "; ".join(errors))
    for test, entity, status, warnings in results:
        if status.endswith("-text"):
            continue
        who = entity or test
        messages = "; ".join(m for m, _, _ in warnings if m) or ""
        if status == "error":
            check.unknown("dcgmi diag runtime error: %s" % messages)
        if status == "fail":
            failed.append(test)
            config = test.lower() in CONFIG_TESTS or (warnings and all(
                e in CONFIG_ERROR_IDS or c == CONFIG_CATEGORY for _, e, c in warnings))
            detail = messages or next((w for w in text_warnings if entity and entity[3:] in w), "")
            text = "DCGM %s failed on %s%s" % (test, who, ": " + detail if detail else "")
            finding = "diag_" + re.sub(r"[^a-z0-9]+", "_", test.lower()).strip("_")
            if config:
                check.warn("diag_config", who, text + " (configuration, not hardware)", detail)
            elif test.lower() == "pcie":
                check.fail(pcie_finding(warnings), who, text, detail)
            elif ("mem" in test.lower() and warnings
                  and all(e == MEMORY_MISMATCH_ID or MEMORY_MISMATCH_RE.search(m) for m, e, _ in warnings)):
                check.fail(finding + "_mismatch", who, text, detail)
            else:
                check.fail(finding, who, text, detail)
        elif status == "warn":
            check.warn("diag_warning", who, "DCGM %s warning on %s%s" % (test, who, ": " + messages if messages
                                                                        else ""), messages)
    check.metrics["failed_tests"] = sorted(set(failed))
    # a memory test fails on a GPU that still carries an old ECC error: dated by its Xid lines
    checklib_gpu.date_gpu_findings(check, {test: checklib_gpu.MEMORY_XIDS for test in (
        "diag_memory", "diag_gpu_memory", "diag_page_retirement_row_remap", "diag_deployment_memory")})


if __name__ == "__main__":
    checklib.main("dcgm_diag", body)
