"""GPU check parsers against real tool outputs (tests/fixtures/gpu, see its SOURCES.md).

Each test serves a fixture as a tool's output through fake executables; every other tool a script
might call answers "not found", so nothing on this machine leaks in.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from agent.checks.manifest import profile
from tests.conftest import FakeTools, fixture_text, run_script

ISOLATED = ("nvidia-smi", "lspci", "dcgmi", "nvbandwidth", "journalctl", "dmesg", "lsmod", "modinfo", "systemctl",
            "nv-fabricmanager")
H100 = profile("H100-SXM-8")
A100 = {"nvlink_links": 12, "nvlink_link_gbps": 25.0, "topo_nvlink": "NV12", "gpu_name": "NVIDIA A100-SXM4-80GB"}
ALL_TIME = {"window_s": 0}


def gpu(name: str) -> str:
    return fixture_text("gpu", name)


def isolate(fake: FakeTools) -> FakeTools:
    for name in ISOLATED:
        fake.tool(name, stderr=f"sh: 1: {name}: not found\n", rc=127)
    fake.tool("journalctl", stderr="No journal files were found.\n", rc=1)
    return fake


def by_args(fake: FakeTools, name: str, cases: dict[str, str], default: str = "") -> None:
    """`name` prints cases[pattern] for the first pattern found in its arguments (files, so any text is safe)."""
    body = ['args="$*"']
    for k, (pattern, text) in enumerate(cases.items()):
        path = fake.outputs / f"{name}.{k}.out"
        path.write_text(text)
        body.append(f'case "$args" in *"{pattern}"*) cat "{path}"; exit 0;; esac')
    default_path = fake.outputs / f"{name}.default.out"
    default_path.write_text(default)
    body.append(f'cat "{default_path}"')
    fake.script(name, "\n".join(body) + "\n")


def check(fake: FakeTools, script: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run on the H100-SXM-8 expectations, which the fixtures come from; a test's profile overrides some of them."""
    params = dict(params or {})
    params["profile"] = {**H100, **params.get("profile", {})}
    return run_script(f"{script}.py", fake.env(), params)


def ids(result: dict[str, Any], severity: str | None = None) -> set[tuple[str, str]]:
    return {(f["id"], f["entity"]) for f in result["findings"] if severity is None or f["severity"] == severity}


@pytest.fixture
def fake(fake_tools: FakeTools) -> FakeTools:
    return isolate(fake_tools)


# ---- nvlink_status ----------------------------------------------------------------------------------------
def test_nvlink_good_a100(fake: FakeTools) -> None:
    for name in ("azurehpc_good_nvlink_status.txt", "gpud_nvidia-smi.nvlink.status.a100.txt"):
        fake.tool("nvidia-smi", gpu(name))
        result = check(fake, "nvlink_status", {"profile": A100})
        assert result["verdict"] == "PASS", (name, result)
    assert result["metrics"]["active_links"] == {f"GPU{i}": 12 for i in range(8)}


def test_nvlink_all_inactive_fails_that_gpu(fake: FakeTools) -> None:
    fake.tool("nvidia-smi", gpu("azurehpc_bad_nvlink_status.txt"))
    result = check(fake, "nvlink_status", {"profile": A100})
    assert result["verdict"] == "FAIL"
    assert ids(result, "FAIL") == {("nvlink_all_inactive", "GPU6")}
    assert "all links are inactive" in result["findings"][0]["raw_line"]


def test_nvlink_dcgmi_fallback(fake: FakeTools) -> None:
    fake.tool("dcgmi", gpu("gcm_dcgmi_nvlink_s_pass.txt"))
    assert check(fake, "nvlink_status", {"profile": A100})["verdict"] == "PASS"
    fake.tool("dcgmi", gpu("gcm_dcgmi_nvlink_s_fail.txt"))
    result = check(fake, "nvlink_status", {"profile": A100})
    assert result["verdict"] == "FAIL"
    assert {e for _, e in ids(result, "FAIL")} == {"GPU0", "GPU1"}


def test_nvlink_missing_tools_is_unknown(fake: FakeTools) -> None:
    assert check(fake, "nvlink_status")["verdict"] == "UNKNOWN"


# ---- gpu_memory_errors -------------------------------------------------------------------------------------
def test_memory_errors_healthy_h100_q(fake: FakeTools) -> None:
    # the excerpt holds GPU0 of an 8-GPU dump; declare one attached GPU so the excerpt is the whole answer
    text = re.sub(r"(Attached GPUs\s+:) 8", r"\1 1", gpu("gpud_nvidia-smi-q.535.161.08.h100_gpu0_excerpt.txt"))
    by_args(fake, "nvidia-smi", {"-q": text})
    result = check(fake, "gpu_memory_errors")
    assert result["verdict"] == "PASS", result
    assert result["metrics"]["volatile_uncorrected"] == {"GPU0": 0}


def test_memory_errors_truncated_or_na_never_pass(fake: FakeTools) -> None:
    for name in ("gpud_nvidia-smi-q.535.183.01.h100.truncated_invalid.txt", "gpud_nvidia-smi-q.560.35.03.titanv.txt",
                 "gpud_nvidia-smi-q.535.161.08.h100_gpu0_excerpt.txt"):
        fake.tool("nvidia-smi", gpu(name))
        assert check(fake, "gpu_memory_errors")["verdict"] == "UNKNOWN", name


def test_memory_errors_retired_pages(fake: FakeTools) -> None:
    fake.tool("nvidia-smi", gpu("azurehpc_orig_nvsmi8_output.txt"))
    assert check(fake, "gpu_memory_errors")["verdict"] == "PASS"
    fake.tool("nvidia-smi", gpu("azurehpc_bad_nvsmi8_output.txt"))
    result = check(fake, "gpu_memory_errors")
    assert result["verdict"] == "FAIL"
    assert ids(result, "FAIL") == {("retired_pages_limit", f"GPU{i}") for i in (0, 1, 5, 7)}
    assert ("retired_pages_pending", "GPU3") in ids(result, "WARN")


def test_memory_errors_query_csv_by_field_name(fake: FakeTools) -> None:
    # the research memo's sample rows (real layout): N/A fields and Yes/No flags
    csv = ("0, 00000000:19:00.0, Enabled, 0, 0, 0, 0, 0, 0\n"
           "1, 00000000:9B:00.0, Enabled, 2, 0, 0, 2, 0, 0\n"
           "2, 00000000:DB:00.0, Enabled, [N/A], [N/A], [Unknown Error], 0, 0, 0\n")
    remap = "00000000:19:00.0, 0, 0, No, No\n00000000:9B:00.0, 0, 3, Yes, No\n00000000:DB:00.0, 1, 9, No, Yes\n"
    by_args(fake, "nvidia-smi", {"--query-gpu": csv, "--query-remapped-rows": remap})
    result = check(fake, "gpu_memory_errors")
    assert ids(result, "FAIL") == {("ecc_uncorrectable", "GPU1"), ("row_remap_pending", "GPU1"),
                                   ("row_remap_failure", "GPU2")}


# ---- xid_scan ----------------------------------------------------------------------------------------------
def xid_run(fake: FakeTools, text: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    fake.tool("dmesg", text)
    return check(fake, "xid_scan", params or ALL_TIME)


def test_xid_ctime_31_and_48(fake: FakeTools) -> None:
    result = xid_run(fake, gpu("gcm_dmesg_xid31_48.log"))
    assert result["verdict"] == "FAIL"
    assert ("xid_48", "000d:00:00") in ids(result, "FAIL")
    assert ("xid_app", "000d:00:00") in ids(result, "WARN")
    assert result["metrics"]["xids"] == {"31": ["000d:00:00"], "48": ["000d:00:00"]}


def test_xid_iso_48_63_94_sequence(fake: FakeTools) -> None:
    result = xid_run(fake, gpu("gpud_dmesg-iso-xid48-63-94.log"))
    assert result["verdict"] == "FAIL"
    # NVIDIA's catalogue: 48 with 63 -> drain and reset; 94 (contained) -> restart the application; 63 -> no action
    assert ids(result, "FAIL") == {("xid_48", "0000:19:00")}
    assert "drain the node, then reset" in result["findings"][0]["action"]
    assert ("xid_94", "0000:19:00") in ids(result, "WARN") and ("xid_63", "0000:19:00") in ids(result, "INFO")
    assert set(result["metrics"]["xids"]) == {"48", "63", "94"}
    assert result["metrics"]["xid_counts"]["94"] == 9


def test_xid_window_excludes_old_events(fake: FakeTools) -> None:
    result = xid_run(fake, gpu("gpud_dmesg-iso-xid48-63-94.log"), {"window_s": 7200})
    assert result["verdict"] == "PASS" and result["metrics"]["xids"] == {}


def test_xid_119_gsp_burst(fake: FakeTools) -> None:
    result = xid_run(fake, gpu("gpud_dmesg-with-xid-119.log"))
    assert ids(result, "FAIL") == {("xid_119", "0000:9b:00")}
    assert result["metrics"]["xid_counts"] == {"119": 5}


def test_xid_decoded_13_43_is_app_side(fake: FakeTools) -> None:
    result = xid_run(fake, gpu("gpud_dmesg-xid13-43_excerpt.log"))
    assert result["verdict"] == "WARN"
    assert {"13", "43"} <= set(result["metrics"]["xids"])


def test_xid_healthy_boot_and_peermem_noise_pass(fake: FakeTools) -> None:
    assert xid_run(fake, gpu("gpud_dmesg-boot-h100-healthy_excerpt.log"))["verdict"] == "PASS"
    fake.file("/proc/uptime", "230000.00 400000.00\n")
    assert xid_run(fake, gpu("gpud_kmsg.peermem.log"))["verdict"] == "PASS"


def test_xid_catalog_lines_and_sxids(fake: FakeTools) -> None:
    result = xid_run(fake, gpu("nvsentinel_xid_sxid_lines.txt"))
    fails = {i for i, _ in ids(result, "FAIL")}
    assert {"xid_79", "xid_74", "xid_149", "xid_154", "sxid_fatal"} <= fails
    assert {"xid_13", "xid_32", "xid_69"} <= {i for i, _ in ids(result, "WARN")}
    # Xid 145 printed Nonfatal and the Non-fatal SXids: reported, not failed
    assert ("xid_145_nonfatal", "0000:00:08") in ids(result, "WARN") and "sxid_nonfatal" in {
        i for i, _ in ids(result, "INFO")}
    assert ("xid_154", "0008:01:00") in ids(result, "FAIL")


def test_xid_raw_dmesg_dated_from_uptime(fake: FakeTools) -> None:
    nhc = gpu("azurehpc_distributed_nhc_health_log_examples.txt")
    raw = nhc[nhc.index("[ 3606.832215]"):].splitlines()[0]
    fake.file("/proc/uptime", "4000.00 9000.00\n")
    assert ids(xid_run(fake, raw + "\n", {"window_s": 7200}), "FAIL") == {("xid_119", "0002:00:00")}
    fake.file("/proc/uptime", "20000.00 9000.00\n")
    assert xid_run(fake, raw + "\n", {"window_s": 7200})["verdict"] == "PASS"


def test_xid_no_kernel_log_is_unknown(fake: FakeTools) -> None:
    assert check(fake, "xid_scan")["verdict"] == "UNKNOWN"


# ---- dcgm_diag ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "verdict"), [
    ("gcm_dcgmi_diag_r1_pass.json", "PASS"), ("gcm_dcgmi_diag_r1_warn.json", "WARN"),
    ("gcm_dcgmi_diag_r1_fail.json", "WARN"),  # Persistence Mode failing is configuration, not hardware
    ("dcgm_diag_json_legacy_per_gpu.json", "FAIL"), ("gcm_dcgmi_diag_r4_pass.txt", "PASS"),
])
def test_dcgm_diag_outputs(fake: FakeTools, name: str, verdict: str) -> None:
    fake.tool("dcgmi", gpu(name), rc=226 if verdict == "FAIL" else 0)
    result = check(fake, "dcgm_diag")
    assert result["verdict"] == verdict, result
    if name == "dcgm_diag_json_legacy_per_gpu.json":
        assert ids(result, "FAIL") == {("diag_sm_stress", f"GPU{i}") for i in (0, 2, 3)}
        assert "did not exceed desired stress level" in result["findings"][0]["message"]
    if name == "gcm_dcgmi_diag_r1_fail.json":
        assert ("diag_config", "Persistence Mode") in ids(result, "WARN")


def deployment_error(message: str) -> str:
    """DCGM's boxed text when a deployment pre-check stops the diagnostic, message wrapped at the box edge."""
    rows = ["+---------------------------+------------------------------------------------+",
            "| Diagnostic                | Result                                         |",
            "+===========================+================================================+",
            "|-----  Deployment  --------+------------------------------------------------|"]
    for k in range(0, len(message), 46):
        rows.append(f"| {'Error' if k == 0 else '':<25} | {message[k:k + 46]:<46} |")
    return "\n".join(rows) + "\n"


def test_dcgm_diag_deployment_errors(fake: FakeTools) -> None:
    fake.tool("dcgmi", deployment_error("GPU 5 has uncorrectable memory errors and row remappings are pending"),
              rc=226)
    result = check(fake, "dcgm_diag")
    assert result["verdict"] == "FAIL" and ids(result, "FAIL") == {("diag_deployment_memory", "GPU5")}
    assert "row remappings are pending" in result["findings"][0]["message"]
    fake.tool("dcgmi", deployment_error("Persistence mode for GPU 0 is disabled."), rc=226)
    result = check(fake, "dcgm_diag")
    assert result["verdict"] == "UNKNOWN" and "Persistence mode" in result["summary"]


def test_dcgm_diag_refuses_busy_gpus(fake: FakeTools) -> None:
    by_args(fake, "nvidia-smi", {"--query-compute-apps": "41721\n"})
    fake.tool("dcgmi", gpu("gcm_dcgmi_diag_r1_pass.json"))
    assert check(fake, "dcgm_diag")["verdict"] == "UNKNOWN"


# ---- topology ----------------------------------------------------------------------------------------------
def test_topology_real_matrices_pass(fake: FakeTools) -> None:
    fake.tool("nvidia-smi", gpu("nvsentinel_topo_m_h100_8gpu_mlx5cols.txt"))
    result = check(fake, "topology")
    assert result["verdict"] == "PASS", result
    assert result["metrics"]["gpu_pairs"] == {"NV18": 28}
    fake.tool("nvidia-smi", gpu("nvsentinel_topo_m_h100_4gpu_nic_legend.txt"))
    result = check(fake, "topology", {"profile": {"gpu_count": 4}})
    assert result["verdict"] == "PASS", result
    assert result["metrics"]["closest_nic"] == {f"GPU{i}": "PXB" for i in range(4)}


def test_topology_degraded_and_misdetected(fake: FakeTools) -> None:
    text = gpu("nvsentinel_topo_m_h100_8gpu_mlx5cols.txt")
    rows = text.splitlines()
    # GPU2 lost two links: its row and column read NV16
    rows = [r.replace("NV18", "NV16") if r.startswith("GPU2") else r for r in rows]
    rows = [r if r.startswith(("GPU2", "\t")) or not r.startswith("GPU") else
            "\t".join(c if k != 3 else "NV16" for k, c in enumerate(r.split("\t"))) for r in rows]
    fake.tool("nvidia-smi", "\n".join(rows) + "\n")
    assert ids(check(fake, "topology"), "FAIL") == {("nvlink_degraded", "GPU2")}
    sys_only = re.sub(r"\t(PIX|PXB|NODE)(?=\t)", "\tSYS", text)
    fake.tool("nvidia-smi", sys_only)
    assert ("topology_misdetected", "vm") in {(i, "vm") for i, _ in ids(check(fake, "topology"), "FAIL")}


# ---- driver_health / fabric_manager / pcie_link ------------------------------------------------------------
def healthy_driver_files(fake: FakeTools, version: str) -> None:
    fake.file("/proc/driver/nvidia/version", f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Tue Jun 25 "
                                             "2024\n")
    for node in ("nvidiactl", "nvidia0", "nvidia1", "nvidia-uvm"):
        fake.file(f"/dev/{node}", "")
    fake.tool("lsmod", "Module                  Size  Used by\nnvidia_uvm            1437696  0\n"
                       "nvidia              56463360  1 nvidia_uvm\n")
    fake.tool("modinfo", version + "\n")
    fake.tool("systemctl", "active\n")


def test_driver_health_real_table(fake: FakeTools) -> None:
    healthy_driver_files(fake, "550.90.07")
    fake.tool("nvidia-smi", gpu("gpud_nvidia-smi.550.90.07.txt"))
    fake.tool("dmesg", gpu("gpud_dmesg-boot-h100-healthy_excerpt.log"))
    result = check(fake, "driver_health")
    assert result["verdict"] == "PASS", result
    assert result["metrics"]["driver_version"] == "550.90.07"


def test_driver_health_missing_nvidia_smi_is_unknown(fake: FakeTools) -> None:
    assert check(fake, "driver_health")["verdict"] == "UNKNOWN"


def test_fabric_manager_real_q(fake: FakeTools) -> None:
    healthy_driver_files(fake, "535.161.08")
    fake.tool("nv-fabricmanager", "Fabric Manager version is : 535.161.08\n")
    fake.tool("nvidia-smi", gpu("gpud_nvidia-smi-q.535.161.08.h100_gpu0_excerpt.txt"))
    result = check(fake, "fabric_manager")
    assert result["verdict"] == "PASS", result
    fake.tool("nvidia-smi", gpu("gpud_nvidia-smi-q.535.183.01.h100.truncated_invalid.txt"))
    assert check(fake, "fabric_manager")["verdict"] == "UNKNOWN"


def test_pcie_link_replays_from_real_q(fake: FakeTools) -> None:
    by_args(fake, "nvidia-smi", {"--query-gpu": "0, 00000000:19:00.0, 5, 5, 16, 16\n",
                                 "-q": gpu("gpud_nvidia-smi-q.535.161.08.h100_gpu0_excerpt.txt")})
    result = check(fake, "pcie_link")
    assert result["verdict"] == "PASS", result
    assert result["metrics"]["replays"] == {"GPU0": 67}
    by_args(fake, "nvidia-smi", {"--query-gpu": "0, 00000000:19:00.0, 5, 5, 8, 16\n"})
    assert ids(check(fake, "pcie_link"), "FAIL") == {("pcie_width_degraded", "GPU0")}


# ---- clocks_thermal_power / gpu_inventory: N/A fields and missing tools --------------------------------------
def test_clocks_accepts_na_fields(fake: FakeTools) -> None:
    rows = ("0, 34, 40, 72.00, 700.00, 700.00, 1980, 1980, 0, 0x0000000000000001\n"
            "1, [N/A], [N/A], [Unknown Error], 700.00, 700.00, [N/A], 1980, [N/A], [Unknown Error]\n"
            "2, 91, 97, 690.00, 700.00, 700.00, 1100, 1980, 100, 0x0000000000000080\n")
    by_args(fake, "nvidia-smi", {"--query-gpu": rows})
    result = check(fake, "clocks_thermal_power")
    assert ids(result, "FAIL") == {("overheating", "GPU2"), ("power_brake", "GPU2")}
    assert result["metrics"]["temperature_c"]["GPU1"] is None


def test_idle_gpus_leave_the_power_supply_unjudged(fake: FakeTools) -> None:
    from agent.evidence import assess
    from agent.models import CheckResult
    from agent.taxonomy import load_taxonomy

    idle = "0, 34, 40, 72.00, 700.00, 700.00, 345, 1980, 0, 0x0000000000000001\n"
    by_args(fake, "nvidia-smi", {"--query-gpu": idle})
    result = check(fake, "clocks_thermal_power")
    assert result["verdict"] == "PASS" and {i for i, _ in ids(result, "INFO")} == {"not_under_load"}
    # a brake shows only while the GPUs draw: an idle host keeps the PSU leaf open, it does not reject it
    leaf = load_taxonomy().node("GPU.POWER.PSU_INSUFFICIENT")
    assert assess(leaf.evidence, [CheckResult.model_validate(result)], leaf.undecided).strength == "unknown"
    by_args(fake, "nvidia-smi", {"--query-gpu": idle.replace("72.00", "650.00").replace(" 0, 0x", " 98, 0x")})
    busy = check(fake, "clocks_thermal_power")
    assert ids(busy, "INFO") == set()
    assert assess(leaf.evidence, [CheckResult.model_validate(busy)], leaf.undecided).strength == "none"


def test_inventory_missing_nvidia_smi_is_unknown(fake: FakeTools) -> None:
    assert check(fake, "gpu_inventory")["verdict"] == "UNKNOWN"


# ---- nvbandwidth -------------------------------------------------------------------------------------------
def test_host_device_bw_real_output(fake: FakeTools) -> None:
    fake.tool("nvbandwidth", gpu("superbench_nvbandwidth_results.log"))
    result = check(fake, "host_device_bw")
    assert result["verdict"] == "PASS"
    assert result["metrics"]["host_to_device_gbps"] == {"GPU0": 369.36, "GPU1": 299.33, "GPU2": 412.11}
    # the run has no device-to-device matrix (one GPU): P2P cannot be judged
    assert check(fake, "p2p_bw")["verdict"] == "UNKNOWN"


def test_bandwidth_missing_tool_is_unknown(fake: FakeTools) -> None:
    assert check(fake, "host_device_bw")["verdict"] == "UNKNOWN"
    assert check(fake, "p2p_bw")["verdict"] == "UNKNOWN"


def test_fixture_sources_listed() -> None:
    listed = gpu("SOURCES.md")
    names = [p.name for p in (Path(__file__).parent / "fixtures" / "gpu").iterdir() if p.name != "SOURCES.md"]
    assert all(name in listed for name in names)
