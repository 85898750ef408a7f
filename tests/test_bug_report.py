"""NVIDIA's nvidia-bug-report.log[.gz] as a recorded host (`--host bundle:FILE`): its sections become the outputs
the checks replay. The fixture frames this project's own real H200 capture (tests/fixtures/real_h200: `nvidia-smi -q`
and the kernel log after the application faults) as nvidia-bug-report.sh writes sections; see SOURCES.md there."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from agent.checks.runner import CheckRunner
from agent.collect.bugreport import gpu_rows, parse_bug_report, sections
from agent.executors.hosts import executors_for
from tests.conftest import FIXTURES, fixture_text

REPORT = FIXTURES / "real_h200" / "nvidia-bug-report_h200.log"


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    gz = tmp_path_factory.mktemp("report") / "nvidia-bug-report.log.gz"  # as customers attach it
    gz.write_bytes(gzip.compress(REPORT.read_bytes()))
    (host,) = executors_for([f"bundle:{gz}"])
    try:
        runner = CheckRunner([host])
        assert not runner.take_inventory()[host.name].cannot_check
        return {r.check: (r.verdict.value, r.summary) for r in runner.run(runner.passive_ids())}
    finally:
        host.close()


def test_sections_become_recorded_outputs() -> None:
    recording = parse_bug_report(REPORT.read_text(), REPORT.name)
    assert recording.hostname == "vm" and recording.source == "nvidia-bug-report"
    runs = {" ".join(r["run"]): r for r in recording.runs}
    assert runs["nvidia-smi -q"]["stdout"].strip() == fixture_text("real_h200", "smi_q.txt").strip()
    assert "Xid (PCI:0000:00:06): 31" in runs["dmesg --time-format iso"]["stdout"]
    # the inventory's GPU query, reworded from -q: the same values the real `--query-gpu` printed
    row = gpu_rows(runs["nvidia-smi -q"]["stdout"]).split(", ")
    real = fixture_text("real_h200", "smi_query.txt").splitlines()[1].split(", ")
    assert row[1:3] == real[1:3] and row[6:8] == real[3:5]  # name, bus id, uuid, serial
    assert recording.collected_at == 1795763100.0  # Date: Fri Nov 27 07:05:00 UTC 2026


def test_file_sections_and_missing_files() -> None:
    sep = "_" * 44
    text = (f"{sep}\n\nStart of NVIDIA bug report log file.  Please include this file\n\nDate: Tue Oct 27 14:31:54 "
            f"EDT 2009\nuname: Linux gpu-7 5.15.0 x86_64\n\n{sep}\n\n*** /proc/driver/nvidia/version\n"
            f"*** ls: -r--r--r-- 1 root root 0 2009-10-27 /proc/driver/nvidia/version\nNVRM version: test\n\n{sep}\n\n"
            f"*** /etc/issue does not exist\n\n{sep}\n\nfree -m\n\nnot a tool the checks run\n")
    assert len(sections(text)) == 4
    recording = parse_bug_report(text)
    assert recording.hostname == "gpu-7"
    assert recording.files == {"/proc/driver/nvidia/version": "NVRM version: test\n", "/etc/issue": None}
    assert recording.exists == {"/etc/issue": False} and recording.runs == []


def test_the_h200_report_keeps_the_application_fault(verdicts: dict[str, tuple[str, str]]) -> None:
    verdict, summary = verdicts["xid_scan"]
    assert verdict == "WARN" and "application fault" in summary and "restart the application" in summary


def test_what_the_report_lacks_is_unknown_never_judged(verdicts: dict[str, tuple[str, str]]) -> None:
    assert "FAIL" not in {v for v, _ in verdicts.values()}
    for check in ("topology", "nvlink_status", "gpu_memory_errors", "pcie_link", "clocks_thermal_power"):
        verdict, summary = verdicts[check]
        assert verdict == "UNKNOWN" and "not in the bundle" in summary, (check, summary)


def test_a_report_that_is_no_report_is_refused(tmp_path: Path) -> None:
    from agent.executors.hosts import HostSpecError

    bad = tmp_path / "nvidia-bug-report.log.gz"
    bad.write_bytes(gzip.compress(b"hello, not a report\n"))
    with pytest.raises(HostSpecError, match="neither"):
        executors_for([f"bundle:{bad}"])
