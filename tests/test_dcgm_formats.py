"""dcgm_diag and dcgm_health against the JSON and text layouts of DCGM 1.x-4.x.

Real outputs come from tests/fixtures/gpu (see SOURCES.md). The DCGM 2.x/3.x `dcgmi diag -j` shapes below
are built the way NVIDIA/DCGM's own dcgmi/Diag.cpp writes them (HelperJsonAddBasicTests /
HelperJsonAddResult at 2.4.7 @0fb6699 and 3.3.1 @a33560c: status Pass/Skip/Fail, a warning as one string,
a 3.x deployment test's extra errors in status-less result entries beside error_id), with DCGM's own
messages from dcgmlib/dcgm_errors.h. The `dcgmi health -c` tree and JSON follow dcgmi/Health.cpp and
DcgmiOutput.cpp, unchanged from 2.2.6 to 4.6.0.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.evidence import assess
from agent.models import CheckResult
from agent.taxonomy import load_taxonomy
from tests.conftest import FakeTools
from tests.test_gpu_checks import check, gpu, ids, isolate

TAXONOMY = load_taxonomy()


@pytest.fixture
def fake(fake_tools: FakeTools) -> FakeTools:
    return isolate(fake_tools)


def diag(fake: FakeTools, text: str, rc: int = 0) -> dict[str, Any]:
    fake.tool("dcgmi", text, rc=rc)
    return check(fake, "dcgm_diag")


def doc(*categories: tuple[str, list[dict[str, Any]]], version: str | None = None) -> str:
    root: dict[str, Any] = {"test_categories": [{"category": c, "tests": t} for c, t in categories]}
    if version:
        root["version"] = version
    return json.dumps({"DCGM GPU Diagnostic": root}, indent=3)


# ---- dcgm_diag: NVVS 1.3 (one result per test, failing GPUs named in the warnings) -------------------------
def test_nvvs_1_3_fails_only_the_gpus_its_warnings_name(fake: FakeTools) -> None:
    result = diag(fake, gpu("dcgm_nvvs_1_3_json.json"), rc=226)
    assert result["verdict"] == "FAIL", result
    # sm_stress covers GPUs 0-3 with one FAIL; its warnings name 0, 2 and 3 (GPU 1 reached its stress level)
    assert ids(result, "FAIL") == {("diag_sm_stress", f"GPU{i}") for i in (0, 2, 3)}
    by_gpu = {f["entity"]: f["message"] for f in result["findings"]}
    assert "1096.5" in by_gpu["GPU2"] and "2128.7" not in by_gpu["GPU2"]
    assert by_gpu["GPU0"].startswith("DCGM sm_stress failed on GPU0")


def test_nvvs_1_3_multi_gpu_fail_naming_no_gpu_blames_the_listed_gpus(fake: FakeTools) -> None:
    data = json.loads(gpu("dcgm_nvvs_1_3_json.json"))
    stress = data["DCGM GPU Diagnostic"]["test_categories"][3]["tests"][1]["results"][0]
    stress["warnings"] = ["Max stress level did not exceed desired stress level"]
    result = diag(fake, json.dumps(data), rc=226)
    assert ids(result, "FAIL") == {("diag_sm_stress", f"GPU{i}") for i in range(4)}


# ---- dcgm_diag: 3.1.0 real output (null array entries, numeric gpu_ids, text before the JSON) --------------
def test_dcgm_3_1_real_output_with_nulls_passes(fake: FakeTools) -> None:
    result = diag(fake, gpu("dcgm_diag_json_3.1.0_real_output.txt"))
    assert result["verdict"] == "PASS", result
    assert "software" in result["metrics"]["tests"] and "Inforom" in result["metrics"]["tests"]


# ---- dcgm_diag: DCGM 2.x dcgmi (warnings as one string) -------------------------------------------------
def test_dcgm_2x_string_warning_fails_that_gpu_with_the_whole_message(fake: FakeTools) -> None:
    text = doc(("Deployment", [{"name": "Blacklist", "results": [{"status": "Pass"}]},
                               {"name": "Page Retirement/Row Remap", "results": [{"status": "Pass"}]}]),
               ("Hardware", [{"name": "GPU Memory", "results": [
                   {"gpu_ids": "0", "status": "Pass"},
                   {"gpu_ids": "1", "status": "Fail",
                    "warnings": "GPU 1 had memory errors and row remappings are pending"}]}]))
    result = diag(fake, text, rc=226)
    assert ids(result, "FAIL") == {("diag_gpu_memory", "GPU1")}
    assert result["findings"][0]["message"].endswith("GPU 1 had memory errors and row remappings are pending")


def test_dcgm_2x_deployment_fail_without_gpu_ids_names_the_gpu_from_its_message(fake: FakeTools) -> None:
    text = doc(("Deployment", [{"name": "Page Retirement/Row Remap", "results": [
        {"status": "Fail", "warnings": "A pending retired page has been detected in GPU 3."}]}]))
    result = diag(fake, text, rc=226)
    assert ids(result, "FAIL") == {("diag_page_retirement_row_remap", "GPU3")}


# ---- dcgm_diag: DCGM 3.x (gpu_id, error objects, status-less extra errors) ------------------------------
def test_dcgm_3x_extra_deployment_errors_and_config_ids(fake: FakeTools) -> None:
    text = doc(("Deployment", [{"name": "Persistence Mode", "results": [
        {"status": "Fail", "warnings": "Persistence mode for GPU 0 is disabled.", "error_id": 29,
         "error_category": 3, "error_severity": 1},
        {"warnings": "Persistence mode for GPU 1 is disabled.", "error_id": 29, "error_category": 3,
         "error_severity": 1}]}]),
               ("Integration", [{"name": "PCIe", "results": [{"gpu_id": "0", "status": "Pass"},
                                                               {"gpu_id": "1", "status": "Pass"}]}]))
    result = diag(fake, text, rc=226)
    assert result["verdict"] == "WARN", result
    assert ids(result) == {("diag_config", "GPU0"), ("diag_config", "GPU1")}


def test_dcgm_3x_gpu_id_per_gpu_fail_and_skip(fake: FakeTools) -> None:
    text = doc(("Hardware", [{"name": "GPU Memory", "results": [
        {"gpu_id": "0", "status": "Skip"},
        {"gpu_id": "3", "status": "Fail", "warnings": [
            {"warning": "GPU 3 had memory errors and row remappings are pending", "error_id": 84,
             "error_category": 1, "error_severity": 2}]}]}]), version="3.3.1")
    result = diag(fake, text, rc=226)
    assert ids(result, "FAIL") == {("diag_gpu_memory", "GPU3")}
    assert "GPU Memory failed on GPU3" in result["summary"]


def test_a_memory_mismatch_no_ecc_counter_saw_is_the_gpus_fault_not_an_ecc_event(fake: FakeTools) -> None:
    # DCGM_FR_MEMORY_MISMATCH (58), by its id (3.x objects) and by its message (2.x strings)
    text = doc(("Hardware", [{"name": "GPU Memory", "results": [
        {"gpu_id": "1", "status": "Fail", "warnings": [
            {"warning": "A memory mismatch was detected on GPU 1, but no error was reported by CUDA or NVML.",
             "error_id": 58, "error_category": 10, "error_severity": 2}]},
        {"gpu_id": "2", "status": "Fail", "warnings": [
            {"warning": "GPU 2 had memory errors and row remappings are pending", "error_id": 84,
             "error_category": 1, "error_severity": 2}]}]}]), version="3.3.1")
    result = diag(fake, text, rc=226)
    assert ids(result, "FAIL") == {("diag_gpu_memory_mismatch", "GPU1"), ("diag_gpu_memory", "GPU2")}
    text = doc(("Hardware", [{"name": "GPU Memory", "results": [
        {"gpu_ids": "0", "status": "Fail",
         "warnings": "A memory mismatch was detected on GPU 0, but no error was reported by CUDA or NVML."}]}]))
    assert ids(diag(fake, text, rc=226), "FAIL") == {("diag_gpu_memory_mismatch", "GPU0")}


def test_a_pcie_failure_blames_the_transfer_path_not_the_gpu(fake: FakeTools) -> None:
    # DCGM's PCIe plugin judges host-to-GPU links (DCGM_FR_PCIE_WIDTH 46, _GENERATION 45, PCI_REPLAY_RATE 3) and
    # peer-to-peer paths: a riser or slot, or ACS redirecting P2P, never the GPU by itself
    text = doc(("Integration", [{"name": "PCIe", "results": [
        {"gpu_id": "0", "status": "Fail", "warnings": [
            {"warning": "GPU 0 is running at PCI link width 8X, which is below the minimum allowed link generation "
                        "of 16 (parameter 'min_pci_width')", "error_id": 46, "error_category": 13}]},
        {"gpu_id": "1", "status": "Fail", "warnings": [
            {"warning": "GPU 1 was unsuccessfully written to in a peer-to-peer test: PCIe P2P write",
             "error_id": 86, "error_category": 13}]},
        {"gpu_id": "2", "status": "Fail", "warnings": [
            {"warning": "Measured bandwidth 3.10 GB/s below threshold for GPU 2", "error_id": 30,
             "error_category": 13}]}]}]), version="3.3.1")
    result = diag(fake, text, rc=226)
    assert ids(result, "FAIL") == {("diag_pcie_link", "GPU0"), ("diag_pcie_p2p", "GPU1"), ("diag_pcie", "GPU2")}
    # the path's own checks judge the riser and ACS leaves (pcie_link, host_device_bw, system_config, p2p_bw)
    faulty_gpu = TAXONOMY.node("GPU.HARDWARE.FAULTY_GPU")
    assert assess(faulty_gpu.evidence, [CheckResult.model_validate(result)]).strength == "none"


def test_all_pass_or_skip_is_pass(fake: FakeTools) -> None:
    text = doc(("Integration", [{"name": "PCIe", "results": [{"gpu_id": "0", "status": "Skip"}]}]),
               ("Hardware", [{"name": "GPU Memory", "results": [{"gpu_id": "0", "status": "Pass"}, None]}]))
    assert diag(fake, text)["verdict"] == "PASS"


@pytest.mark.parametrize("text", [
    '{"DCGM GPU Diagnostic" : {"test_categories" : [{"category" : "Hardware", "tests" : [',  # cut short
    '{"DCGM GPU Diagnostic" : {"version" : "4.2.3"}}',  # no tests at all
    '{"DCGM GPU Diagnostic" : {"runtime_error" : "Couldn\'t parse json: \'\'"}}',
])
def test_unreadable_or_empty_json_is_unknown(fake: FakeTools, text: str) -> None:
    assert diag(fake, text, rc=226)["verdict"] == "UNKNOWN"


def test_existing_layouts_still_read(fake: FakeTools) -> None:
    assert ids(diag(fake, gpu("dcgm_diag_json_legacy_per_gpu.json"), rc=226), "FAIL") == {
        ("diag_sm_stress", f"GPU{i}") for i in (0, 2, 3)}
    assert diag(fake, gpu("gcm_dcgmi_diag_r4_pass.txt"))["verdict"] == "PASS"


# ---- dcgm_health: `dcgmi health -c` tree and -j JSON ---------------------------------------------------
HEALTH_TEXT = """\
+---------------------------+----------------------------------------------------------+
| Health Monitor Report                                                                |
+===========================+==========================================================+
| Overall Health            | Failure                                                  |
| GPU                       |                                                          |
| -> 2                      | Warning                                                  |
|    -> Errors              |                                                          |
|       -> PCIe system      | Warning                                                  |
|                           | Detected more than 8 PCIe replays per minute for GPU 2   |
|                           | : 13                                                     |
| -> 5                      | Failure                                                  |
|    -> Errors              |                                                          |
|       -> Memory system    | Failure                                                  |
|                           | A volatile double-bit ECC error has occurred for GPU 5.  |
+---------------------------+----------------------------------------------------------+
"""


def health_json() -> str:
    def system(value: str, *overflow: str) -> dict[str, Any]:
        return {"value": value, "overflow": list(overflow)}
    body = {"Overall Health": {"value": "Failure"}, "GPU": {"children": {
        "2": {"value": "Warning", "children": {"Errors": {"children": {
            "PCIe system": system("Warning", "Detected more than 8 PCIe replays per minute for GPU 2", ": 13")}}}},
        "5": {"value": "Failure", "children": {"Errors": {"children": {
            "Memory system": system("Failure", "A volatile double-bit ECC error has occurred for GPU 5.")}}}}}}}
    return json.dumps({"body": body, "header": ["Health Monitor Report"]}, indent=3, separators=(",", " : "))


@pytest.mark.parametrize("layout", ["text", "json"])
def test_health_layouts(fake: FakeTools, layout: str) -> None:
    fake.tool("dcgmi", HEALTH_TEXT if layout == "text" else health_json())
    result = check(fake, "dcgm_health")
    assert result["verdict"] == "FAIL", result
    assert ids(result, "FAIL") == {("dcgm_memory", "GPU5")}
    assert ids(result, "WARN") == {("dcgm_pcie", "GPU2")}
    pcie = next(f for f in result["findings"] if f["entity"] == "GPU2")
    assert "replays per minute for GPU 2 : 13" in pcie["message"]


def test_health_all_healthy_json_passes(fake: FakeTools) -> None:
    fake.tool("dcgmi", json.dumps({"body": {"Overall Health": {"value": "Healthy"}},
                                   "header": ["Health Monitor Report"]}))
    assert check(fake, "dcgm_health")["verdict"] == "PASS"


@pytest.mark.parametrize("text", ["Error: Health watches not enabled. Please enable watches. \n",
                                  '{"body" : {"GPU" : ', "Error: Unable to check health watches. Return: Timeout\n"])
def test_health_not_readable_is_unknown(fake: FakeTools, text: str) -> None:
    fake.tool("dcgmi", text, rc=255 if text.startswith("Error") else 0)
    assert check(fake, "dcgm_health")["verdict"] == "UNKNOWN"
