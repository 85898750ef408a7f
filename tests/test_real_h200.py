"""The checks against what one real H200 printed (driver 580.159.04, a one-GPU VM; tests/fixtures/real_h200 and its
SOURCES.md): every output below is served as the tool's real output, every other tool answers "not found"."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest

from tests.conftest import FakeTools, fixture_text, run_script
from tests.test_gpu_checks import by_args, isolate

# the one GPU as the real `--query-gpu` printed it (index, bus id, uuid: the fields the checks ask for)
QUERY_ROW = fixture_text("real_h200", "smi_query.txt").splitlines()[1].split(", ")
INDEX_BUS_UUID = f"{QUERY_ROW[0]}, {QUERY_ROW[2]}, {QUERY_ROW[3]}\n"
INDEX_BUS = f"{QUERY_ROW[0]}, {QUERY_ROW[2]}\n"


def real(name: str) -> str:
    return fixture_text("real_h200", name)


def smi(fake: FakeTools, **cases: str) -> None:
    """nvidia-smi answering as the H200 did: `-q`, the GPU query, topo, an empty `nvlink`; `cases` override."""
    answers = {"topo": real("smi_topo.txt"), "nvlink": "", "--query-gpu=index,pci.bus_id,uuid": INDEX_BUS_UUID,
               "--query-gpu=index,pci.bus_id ": INDEX_BUS, "-q": real("smi_q.txt")}
    answers.update(cases)
    by_args(fake, "nvidia-smi", answers, default=real("smi.txt"))


@pytest.fixture
def fake(fake_tools: FakeTools) -> FakeTools:
    return isolate(fake_tools)


def run(fake: FakeTools, script: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return run_script(f"{script}.py", fake.env(), params or {})


def test_topology_reads_the_underlined_header_of_driver_580(fake: FakeTools) -> None:
    assert "\x1b[4mGPU0" in real("smi_topo.txt")  # the escape is really in the capture
    smi(fake)
    result = run(fake, "topology")
    assert result["verdict"] == "PASS", result
    assert result["targets"] == ["GPU0"] and result["metrics"]["gpus"] == 1
    assert "\x1b" not in result["raw_excerpt"]


def test_topology_without_the_escapes_still_unknown_when_empty(fake: FakeTools) -> None:
    smi(fake, topo="\x1b[4mGPU0\tCPU Affinity\x1b[0m\n")  # a header and no row: still no matrix
    result = run(fake, "topology")
    assert result["verdict"] == "UNKNOWN" and "no topology matrix" in result["summary"]


def test_nvlink_on_a_one_gpu_host_has_no_peer(fake: FakeTools) -> None:
    assert real("smi_nvlink_s.txt") == ""  # what `nvidia-smi nvlink -s` printed there: nothing, exit 0
    smi(fake, nvlink=real("smi_nvlink_s.txt"))
    result = run(fake, "nvlink_status")
    assert result["verdict"] == "PASS", result
    assert "no NVLink peer" in result["summary"] and "one-GPU" in result["summary"]
    assert [(f["id"], f["entity"]) for f in result["findings"]] == [("nvlink_no_peer", "GPU0")]


def test_empty_nvlink_on_several_gpus_is_not_passed(fake: FakeTools) -> None:
    two = INDEX_BUS + INDEX_BUS.replace("0, ", "1, ", 1).replace("00:06.0", "00:07.0")
    smi(fake, **{"--query-gpu=index,pci.bus_id ": two})
    result = run(fake, "nvlink_status")
    assert result["verdict"] == "UNKNOWN" and "dcgmi not found" in result["summary"]


def test_nvlink_one_gpu_with_a_profile_that_expects_links_is_unknown(fake: FakeTools) -> None:
    smi(fake)
    result = run(fake, "nvlink_status", {"profile": {"nvlink_links": 18}})
    assert result["verdict"] == "UNKNOWN" and "no NVLink peer" in result["summary"]


def test_xid_31_stays_an_application_fault_and_43_is_info(fake: FakeTools) -> None:
    by_args(fake, "dmesg", {"iso": real("dmesg_iso_after_app_faults.txt")})
    smi(fake)
    result = run(fake, "xid_scan", {"window_s": 0})
    assert result["verdict"] == "WARN", result
    found = {f["id"]: f for f in result["findings"]}
    app = found["xid_app"]
    assert app["entity"] == "GPU0" and "application fault" in app["message"] and "pid 464" in app["message"]
    assert app["action"] == "restart the application"
    assert found["xid_43"]["severity"] == "INFO" and "x2" in found["xid_43"]["message"]
    assert result["metrics"]["xids"] == {"31": ["GPU0"], "43": ["GPU0"]}
    assert result["metrics"]["gpu_mapping"] == "nvidia-smi"


def test_xid_scan_reads_the_same_log_with_human_timestamps(fake: FakeTools) -> None:
    # no dmesg here (fake: not found): the `dmesg -T` capture of the same log, read as a kernel log file
    fake.file("/var/log/kern.log", real("dmesg_T_after_app_faults.txt"))
    smi(fake)
    result = run(fake, "xid_scan", {"window_s": 0})
    assert result["metrics"]["xids"] == {"31": ["GPU0"], "43": ["GPU0"]}, result


@pytest.mark.parametrize("script", ["gpu_memory_errors", "pcie_link"])
def test_q_of_the_healthy_h200_passes(fake: FakeTools, script: str) -> None:
    smi(fake, **{"-q -d ECC": real("smi_q_ecc.txt")})
    fake.file("/sys/bus/pci/devices/.keep", "")
    result = run(fake, script)
    assert result["verdict"] in ("PASS", "UNKNOWN"), result
    assert result["verdict"] != "FAIL" and not [f for f in result["findings"] if f["severity"] in ("FAIL", "WARN")]


def test_q_parser_agrees_with_the_xml_of_the_same_gpu() -> None:
    import sys

    from agent.paths import SCRIPTS_DIR

    sys.path.insert(0, str(SCRIPTS_DIR))
    try:
        import checklib
    finally:
        sys.path.remove(str(SCRIPTS_DIR))
    (gpu,) = checklib.parse_q_sections(real("smi_q.txt"))
    xml = ET.fromstring(real("smi_qx.txt")).find("gpu")
    assert xml is not None
    assert gpu["_bus_id"] == xml.get("id")
    pairs = {"Product Name": "product_name", "Serial Number": "serial", "GPU UUID": "uuid",
             "VBIOS Version": "vbios_version", "FB Memory Usage/Total": "fb_memory_usage/total",
             "PCI/Bus Id": "pci/pci_bus_id", "PCI/GPU Link Info/PCIe Generation/Max": "pci/pci_gpu_link_info/"
             "pcie_gen/max_link_gen", "PCI/GPU Link Info/Link Width/Current": "pci/pci_gpu_link_info/link_widths/"
             "current_link_width"}
    for text_key, xml_path in pairs.items():
        assert gpu.get(text_key) == (xml.findtext(xml_path) or "").strip(), text_key
    assert gpu["Product Name"] == "NVIDIA H200"
