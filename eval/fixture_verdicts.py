"""The verification scripts on real tool outputs: each case serves one fixture of
../shared/fixtures/real/gpu_checks as the output of the tool (or log file) a check reads, with every
other tool answering "not found", and compares the verdict with what the fixture shows.

Expected verdicts come from what each fixture's SOURCES row says it shows, not from the scripts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.checks.manifest import profile
from agent.paths import SCRIPTS_DIR
from tests.conftest import FakeTools

# Tools a check may fall back to; shadowed so the benchmark machine's own tools never leak in.
SHADOWED = ("nvidia-smi", "lspci", "dcgmi", "nvbandwidth", "dmesg", "lsmod", "modinfo", "systemctl",
            "nv-fabricmanager", "ibstat", "ibstatus", "ip", "ibv_devinfo", "ib_write_bw", "all_reduce_perf", "mpirun")
A100 = profile("A100-SXM-8")
H100 = profile("H100-SXM-8")
WIDE = {"window_s": 0}  # the kernel logs are years old: read them whole
SYSLOG_WIDE = {"window_s": 400 * 86400}  # syslog dates carry no year: look back far enough to include them


@dataclass
class Case:
    fixture: str
    check: str
    expected: str
    tool: str = ""             # served as this tool's stdout
    file: str = ""             # or as this file under the sysroot
    header: str = ""           # the lines an excerpt cut off above it, restored so the tool output is whole
    rc: int = 0
    params: dict[str, Any] = field(default_factory=dict)


CASES = [
    Case("azurehpc_good_nvlink_status.txt", "nvlink_status", "PASS", tool="nvidia-smi", params={"profile": A100}),
    Case("gpud_nvidia-smi.nvlink.status.a100.txt", "nvlink_status", "PASS", tool="nvidia-smi",
         params={"profile": A100}),
    Case("azurehpc_bad_nvlink_status.txt", "nvlink_status", "FAIL", tool="nvidia-smi", params={"profile": A100}),
    Case("gcm_dcgmi_nvlink_s_pass.txt", "nvlink_status", "PASS", tool="dcgmi", params={"profile": A100}),
    Case("gcm_dcgmi_nvlink_s_fail.txt", "nvlink_status", "FAIL", tool="dcgmi", params={"profile": A100}),
    Case("azurehpc_orig_nvsmi8_output.txt", "gpu_memory_errors", "PASS", tool="nvidia-smi"),
    Case("azurehpc_bad_nvsmi8_output.txt", "gpu_memory_errors", "FAIL", tool="nvidia-smi"),
    Case("gpud_nvidia-smi-q.535.183.01.h100.truncated_invalid.txt", "gpu_memory_errors", "UNKNOWN",
         tool="nvidia-smi"),
    Case("stas00_nvidia-smi-q_a100_remap_pending_excerpt.txt", "gpu_memory_errors", "FAIL", tool="nvidia-smi"),
    Case("stas00_nvidia-smi-q_sram_uncorrectable_excerpt.txt", "gpu_memory_errors", "FAIL", tool="nvidia-smi",
         header="Attached GPUs                             : 1\nGPU 00000000:10:1C.0\n"),
    Case("gcm_dmesg_xid31_48.log", "xid_scan", "FAIL", tool="dmesg", params=WIDE),
    Case("gpud_dmesg-iso-xid48-63-94.log", "xid_scan", "FAIL", tool="dmesg", params=WIDE),
    Case("gpud_dmesg-with-xid-119.log", "xid_scan", "FAIL", tool="dmesg", params=WIDE),
    Case("gpud_dmesg-xid13-43_excerpt.log", "xid_scan", "WARN", tool="dmesg", params=WIDE),
    Case("gpud_dmesg-boot-h100-healthy_excerpt.log", "xid_scan", "PASS", tool="dmesg", params=WIDE),
    Case("nvsentinel_xid_sxid_lines.txt", "xid_scan", "FAIL", tool="dmesg", params=WIDE),
    Case("gcm_dcgmi_diag_r1_pass.json", "dcgm_diag", "PASS", tool="dcgmi"),
    Case("gcm_dcgmi_diag_r1_warn.json", "dcgm_diag", "WARN", tool="dcgmi"),
    # its only failing test is Persistence Mode: configuration, not a hardware fault
    Case("gcm_dcgmi_diag_r1_fail.json", "dcgm_diag", "WARN", tool="dcgmi", rc=226),
    Case("dcgm_diag_json_legacy_per_gpu.json", "dcgm_diag", "FAIL", tool="dcgmi", rc=226),
    Case("gcm_dcgmi_diag_r4_pass.txt", "dcgm_diag", "PASS", tool="dcgmi"),
    Case("stas00_dcgmi_diag_row_remap_pending_excerpt.txt", "dcgm_diag", "FAIL", tool="dcgmi", rc=226),
    Case("stas00_dcgmi_diag_r2_gpu_memory_fail_excerpt.txt", "dcgm_diag", "FAIL", tool="dcgmi", rc=226),
    Case("nvsentinel_topo_m_h100_8gpu_mlx5cols.txt", "topology", "PASS", tool="nvidia-smi"),
    Case("superbench_nvbandwidth_results.log", "host_device_bw", "PASS", tool="nvbandwidth"),
    # all eight InfiniBand rails are Active; the Down ports are spare Ethernet ports, so only a warning
    Case("gpud_ibstat.47.0.h100.some.down.0.txt", "nic_config", "WARN", tool="ibstat", params={"profile": H100}),
    Case("gpud_ibstat.47.0.h100.all.active.0.txt", "nic_config", "PASS", tool="ibstat", params={"profile": H100}),
    Case("gpud_ibstatus.39.0.a100.all.active.0.txt", "nic_config", "PASS", tool="ibstatus", params={"profile": A100}),
    Case("gcm_ip_json_ib_interfaces_fail.json", "nic_config", "FAIL", tool="ip", params={"profile": H100}),
    Case("azurehpc_0flap_syslog", "ib_link_errors", "PASS", file="/var/log/syslog", params=SYSLOG_WIDE),
    Case("azurehpc_1dev_6flap_syslog", "ib_link_errors", "FAIL", file="/var/log/syslog", params=SYSLOG_WIDE),
    Case("superbench_ib_loopback_8M_size.log", "rdma_perftest", "PASS", tool="ib_write_bw", params={"profile": A100}),
    Case("superbench_ib_loopback_all_sizes.log", "rdma_perftest", "PASS", tool="ib_write_bw",
         params={"profile": A100}),
    Case("superbench_nccl_allreduce.log", "nccl_intranode", "PASS", tool="all_reduce_perf",
         params={"profile": A100}),
    Case("gcm_nccltests_all_reduce_a100_8gpu_pass.log", "nccl_intranode", "PASS", tool="all_reduce_perf",
         params={"profile": A100}),
    # 338.8 GB/s bus bandwidth across two 8xH100 nodes: above the internode floor
    Case("nccltests_all_reduce_h100_2node_16gpu_a3mega.log", "nccl_internode", "PASS", tool="all_reduce_perf",
         params={"profile": H100}),
    Case("gcm_nccltests_mpirun_slots_failure.log", "nccl_internode", "UNKNOWN", tool="mpirun", rc=1,
         params={"profile": A100, "use_mpirun": True}),
]


def run_case(case: Case, fixtures: Path, work: Path) -> str:
    fake = FakeTools(work)
    for name in SHADOWED:
        fake.tool(name, stderr=f"sh: 1: {name}: not found\n", rc=127)
    fake.tool("journalctl", stderr="No journal files were found.\n", rc=1)
    text = case.header + (fixtures / case.fixture).read_text()
    if case.tool:
        fake.tool(case.tool, text, rc=case.rc)
    if case.file:
        fake.file(case.file, text)
    if case.check == "rdma_perftest":
        # ib_write_bw needs a local HCA to bind to: one HDR port in the sysfs layout
        base = "/sys/class/infiniband/mlx5_0"
        for name, value in (("ports/1/state", "4: ACTIVE"), ("ports/1/phys_state", "5: LinkUp"),
                            ("ports/1/rate", "200 Gb/sec (4X HDR)"), ("ports/1/link_layer", "InfiniBand"),
                            ("hca_type", "MT4123"), ("device/net/ib0/operstate", "up")):
            fake.file(f"{base}/{name}", value + "\n")
    params = {"profile": H100, "host": "node-1", "sample_s": 0.05, "server_wait_s": 0.05, **case.params}
    proc = subprocess.run([sys.executable, "-S", str(SCRIPTS_DIR / f"{case.check}.py")], input=json.dumps(params),
                          capture_output=True, text=True, env=fake.env(), timeout=120)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        return f"error rc={proc.returncode}"
    return str(json.loads(lines[-1])["verdict"])


def fixture_rows(fixtures: Path) -> list[tuple[str, str, str, str, bool]]:
    """(fixture, check, expected, got, match) for every case whose fixture is present."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="aidai-fixtures-") as tmp:
        for k, case in enumerate(CASES):
            if not (fixtures / case.fixture).exists():
                continue
            got = run_case(case, fixtures, Path(tmp) / str(k))
            name = case.fixture + (" (with its GPU header)" if case.header else "")
            rows.append((name, case.check, case.expected, got, got == case.expected))
    return rows


if __name__ == "__main__":
    for row in fixture_rows(Path(sys.argv[1])):
        print(*row, sep="\t")
