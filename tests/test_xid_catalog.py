"""NVIDIA's Xid/SXid catalogue as data, the wordings drivers print, and the repetition and chain rules of xid_scan.

Kernel lines here follow the real drivers' formats; the multi-line fallen-off-the-bus form and the old wording are
those NVSentinel's gpufallen tests assert (NVIDIA/NVSentinel, Apache-2.0), the GSP, RmInitAdapter and row-remap lines
are the wordings of real driver logs posted in public issue threads.
"""

from __future__ import annotations

import csv
import re
from typing import Any

import pytest

from agent.paths import SCRIPTS_DIR
from agent.taxonomy import load_taxonomy
from tests.conftest import FakeTools, run_script

ACTIONS = {"none", "restart_app", "update_sw_fw", "reset_gpu", "drain_reset", "reboot", "drain_contact_support"}
NODE_LEVEL = {"update_sw_fw", "reset_gpu", "drain_reset", "reboot", "drain_contact_support"}
AT = 1_750_000_000.0  # the incident's time (epoch), so dated lines are placed relative to it


def rows(name: str) -> list[dict[str, str]]:
    with (SCRIPTS_DIR / name).open(newline="") as handle:
        return list(csv.DictReader(handle))


XIDS = rows("xid_catalog.csv")
SXIDS = rows("sxid_catalog.csv")
IN_USE = [r for r in XIDS if r["action"]]


def test_every_in_use_xid_has_an_action_a_place_and_a_severity() -> None:
    taxonomy = load_taxonomy()
    labels = {n.label for n in taxonomy.root.descendants}
    assert len([r for r in XIDS if r["applies_to"]]) == 109  # NVIDIA's catalogue: 109 Xids in use on A100..GB200
    assert len({int(r["code"]) for r in XIDS}) == len(XIDS)
    for row in IN_USE:
        assert row["action"] in ACTIONS | {"from_line"}, row
        assert row["severity"] in ("fatal", "nonfatal", "from_line"), row
        assert row["app_induced"] in ("yes", "no"), row
        assert row["leaf"] in labels or (not row["leaf"] and row["action"] in ("none", "from_line")), row
        assert row["source"], row
    for row in (r for r in XIDS if not r["action"]):
        assert not row["applies_to"], row  # NVIDIA: applies to none of A100, H100, B100, GB200


def test_every_sxid_has_an_action_a_place_and_a_severity() -> None:
    labels = {n.label for n in load_taxonomy().root.descendants}
    assert len(SXIDS) > 400 and len({int(r["code"]) for r in SXIDS}) == len(SXIDS)
    for row in SXIDS:
        assert row["kind"] == "SXID" and row["action"] in ACTIONS and row["leaf"] in labels, row
        assert row["severity"] in ("fatal", "nonfatal", "from_line") and row["source"], row


def test_catalogue_leaves_agree_with_the_taxonomy() -> None:
    """An Xid the catalogue places on a leaf is evidence for that leaf (its xid_scan rule matches xid_<code>) and
    is one of the leaf's Xids; a leaf's Xids are the ones the catalogue places there."""
    taxonomy = load_taxonomy()
    leaves = {n.label: n for n in taxonomy.root.descendants if not n.children}
    placed: dict[str, set[int]] = {}
    for row in IN_USE:
        if row["leaf"] in leaves and row["action"] not in ("none", "from_line"):
            placed.setdefault(row["leaf"], set()).add(int(row["code"]))
    unused = {int(r["code"]) for r in XIDS if not r["action"]}
    for label, codes in placed.items():
        rules = [r.split(":", 1)[1] for r in leaves[label].evidence if r.startswith("xid_scan:")]
        for code in codes:
            assert any(re.fullmatch(rule, f"xid_{code}") for rule in rules), (label, code)
        assert codes <= set(leaves[label].xids), (label, codes - set(leaves[label].xids))
    for label, leaf in leaves.items():
        assert set(leaf.xids) - unused <= {int(r["code"]) for r in IN_USE if r["leaf"] == label}, label


# ---- running xid_scan --------------------------------------------------------------------------------------
def iso(offset_s: float) -> str:
    from datetime import UTC, datetime
    return datetime.fromtimestamp(AT + offset_s, UTC).strftime("%Y-%m-%dT%H:%M:%S,000000+00:00")


def scan(fake: FakeTools, lines: list[tuple[float, str]] | str, **params: Any) -> dict[str, Any]:
    text = lines if isinstance(lines, str) else "".join(f"{iso(t)} {line}\n" for t, line in lines)
    for tool in ("nvidia-smi", "lspci", "journalctl"):
        fake.tool(tool, stderr=f"sh: 1: {tool}: not found\n", rc=127)
    fake.tool("dmesg", text)
    return run_script("xid_scan.py", fake.env(), {"host": "node-1", "incident_at": AT, **params})


def found(result: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(f["id"], f["entity"]): f for f in result["findings"]}


def xid(code: int, text: str, bus: str = "0000:3b:00", pid: str = "'<unknown>'", name: str = "<unknown>") -> str:
    return f"NVRM: Xid (PCI:{bus}): {code}, pid={pid}, name={name}, {text}"


@pytest.fixture
def fake(fake_tools: FakeTools) -> FakeTools:
    return fake_tools


def test_every_in_use_xid_is_classified_with_nvidias_action(fake: FakeTools) -> None:
    """One line per catalogued Xid, each on its own GPU: the finding's severity follows NVIDIA's action."""
    lines = []
    for k, row in enumerate(IN_USE):
        lines.append((-60.0, xid(int(row["code"]), row["name"], bus=f"{k + 1:04x}:3b:00")))
    result = scan(fake, lines)
    by_bus = {f["entity"]: f for f in result["findings"]}
    expected_severity = {"none": "INFO", "restart_app": "WARN"}
    for k, row in enumerate(IN_USE):
        code, finding = int(row["code"]), by_bus[f"{k + 1:04x}:3b:00"]
        assert finding["id"] == f"xid_{code}", finding
        if row["action"] == "from_line" or code == 45:
            continue
        assert finding["severity"] == expected_severity.get(row["action"], "FAIL"), (row, finding)
        assert "NVIDIA:" in finding["message"] and finding["action"], finding
        assert "not in NVIDIA's catalogue" not in finding["message"]


def test_unknown_and_unused_xids_warn_without_an_action(fake: FakeTools) -> None:
    result = found(scan(fake, [(-60.0, xid(199, "something new")), (-50.0, xid(2, "old", bus="0000:4c:00"))]))
    assert result[("xid_199", "0000:3b:00")]["severity"] == "WARN"
    assert "not in NVIDIA's catalogue" in result[("xid_199", "0000:3b:00")]["message"]
    assert "marks it unused" in result[("xid_2", "0000:4c:00")]["message"]


def test_nvlink5_xids_follow_the_fatal_word_on_their_line(fake: FakeTools) -> None:
    nonfatal = "RLW_REMAP Nonfatal XC1 i0 Link 10 (0x00000004 0x00000040 0x00000000 0x00000000 0x00000000 0x00000000)"
    fatal = "NETIR_LINK_EVT  Fatal   XC0 i0 Link 09 (0x025525c6 0x00000000 0x00000000 0x00000000 0x00000000)"
    result = scan(fake, [(-60.0, xid(145, nonfatal)), (-30.0, xid(145, nonfatal)),
                         (-20.0, xid(149, fatal, "0018:01:00"))])
    # a recovered link: the application may need a restart, the GPU nothing; never NVLink hardware evidence
    assert found(result)[("xid_145_nonfatal", "0000:3b:00")]["severity"] == "WARN"
    assert found(result)[("xid_149", "0018:01:00")]["severity"] == "FAIL"
    assert scan(fake, [(-60.0, xid(145, nonfatal))])["verdict"] == "WARN"


# ---- wordings without an Xid line ---------------------------------------------------------------------------
FALLEN_MULTILINE = ("[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
                    "               NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
                    "               NVRM: fallen off the bus and is not responding to commands.\n")


@pytest.mark.parametrize(("text", "code", "where"), [
    (FALLEN_MULTILINE, 79, "0000:b3:00"),
    ("[ 52.1] NVRM: GPU at 0000:01:00.0 has fallen off the bus.\n", 79, "0000:01:00"),
    ("[ 52.1] NVRM: The NVIDIA GPU 0000:b4:00.0 fallen off the bus and is not responding to commands.\n", 79,
     "0000:b4:00"),
    ("[ 428.09] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x26:0x1a:1227)\n"
     "[ 428.09] NVRM: GPU 0000:01:00.0: rm_init_adapter failed, device minor number 0\n", 143, "0000:01:00"),
    ("[ 6.07] NVRM: _kgspIsHeartbeatTimedOut: Heartbeat timed out, GPU 0000:9b:00.0\n", 119, "0000:9b:00"),
    ("[ 77.1] NVRM: GPU 0000:9b:00.0: Timeout waiting for RPC from GSP! Expected function 76 (GSP_RM_CONTROL)\n",
     119, "0000:9b:00"),
    ("[ 90.2] NVRM: GPU 0000:3b:00.0: row remapping failed, no spare rows left\n", 64, "0000:3b:00"),
])
def test_driver_wordings_without_an_xid_line(fake: FakeTools, text: str, code: int, where: str) -> None:
    result = scan(fake, text, window_s=0)
    assert result["verdict"] == "FAIL", result
    assert [(f["id"], f["entity"]) for f in result["findings"]] == [(f"xid_{code}", where)]
    assert "no Xid line" in result["findings"][0]["message"]


def test_a_wording_beside_its_xid_line_counts_once(fake: FakeTools) -> None:
    text = ("[ 1843.30] NVRM: Xid (PCI:0000:b3:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
            "[ 1843.30] NVRM: GPU 0000:b3:00.0: GPU has fallen off the bus.\n" + FALLEN_MULTILINE)
    result = scan(fake, text, window_s=0)
    assert [(f["id"], f["severity"]) for f in result["findings"]] == [("xid_79", "FAIL")]
    assert "no Xid line" not in result["findings"][0]["message"]
    assert result["findings"][0]["action"] == "reboot the node"  # RESTART_BM


def test_healthy_nvrm_lines_are_not_failures(fake: FakeTools) -> None:
    text = ("[ 5.1] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  550.90.07\n"
            "[ 6.2] NVRM: GPU at PCI:0000:3b:00: GPU-4f667a85-72a7-4605-2197-8f6a16b663a1\n"
            "[ 8.4] nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping\n")
    assert scan(fake, text, window_s=0)["verdict"] == "PASS"


# ---- repetition and chains ----------------------------------------------------------------------------------
def test_a_burst_counts_once_and_five_in_a_day_escalate(fake: FakeTools) -> None:
    burst = [(-100.0 + k, xid(119, "Timeout after 6s of waiting for RPC response from GPU0 GSP!")) for k in range(6)]
    one = found(scan(fake, burst))[("xid_119", "0000:3b:00")]
    assert "x6 in one burst" in one["message"] and one["action"] == "reset the GPU at 0000:3b:00"
    # four earlier bursts in the last 24 h (before the 2 h window: history, counted but not reported alone)
    history = [(-3600.0 * h, xid(119, "Timeout after 6s")) for h in (20, 15, 10, 5)]
    repeated = found(scan(fake, history + burst))[("xid_119", "0000:3b:00")]
    assert repeated["action"] == "drain the node and contact support (RMA)"
    assert "5 times in 24 h" in repeated["message"]
    three = found(scan(fake, history[1:] + burst))[("xid_119", "0000:3b:00")]
    assert three["action"] == "reset the GPU at 0000:3b:00"
    assert scan(fake, history)["findings"] == []  # all outside the incident window


def test_xid_45_is_churn_after_another_xid_and_never_a_failure(fake: FakeTools) -> None:
    after = found(scan(fake, [(-60.0, xid(79, "GPU has fallen off the bus.")),
                              *[(-59.0 + k, xid(45, "Ch 00000010")) for k in range(40)]]))
    assert after[("xid_45", "0000:3b:00")]["severity"] == "INFO"
    assert "churn after Xid 79" in after[("xid_45", "0000:3b:00")]["message"]
    vague = scan(fake, [(-60.0, xid(45, "Preemptive Channel Removal caused by a previous error"))])
    assert vague["verdict"] == "PASS" and "churn after an earlier Xid" in vague["findings"][0]["message"]
    # a line that names its cause: the Xid 45 is still churn, and the cause it names is the event (its own line
    # may be missing from the log), judged as that Xid
    said = found(scan(fake, [(-60.0, xid(45, "Preemptive Channel Removal caused by previous Xid 31"))]))
    assert said[("xid_45", "0000:3b:00")]["severity"] == "INFO"
    assert "churn after Xid 31" in said[("xid_45", "0000:3b:00")]["message"]
    assert said[("xid_31", "0000:3b:00")]["severity"] == "WARN"
    assert "named as its cause by an Xid 45 line" in said[("xid_31", "0000:3b:00")]["message"]


def test_xid_45_naming_nvlink_xids_is_the_nvlink_error(fake: FakeTools) -> None:
    # the wording of drivers that name the NVLink5 Xids an Xid 45 cleans up after; their own lines were not captured
    result = scan(fake, [(-60.0, xid(45, "Ch 00000008, Preemptive Cleanup caused by NVLink Xids 145/149"))])
    assert result["verdict"] == "FAIL"
    got = found(result)
    for code in (145, 149):
        assert got[(f"xid_{code}", "0000:3b:00")]["severity"] == "FAIL"
        assert got[(f"xid_{code}", "0000:3b:00")]["action"] == "reset the GPU at 0000:3b:00"
    assert got[("xid_45", "0000:3b:00")]["severity"] == "INFO"
    # the cause's own line in the log: one event per code, not two
    both = scan(fake, [(-61.0, xid(145, "RLW_REMAP Fatal XC0 i0 Link 00 (0x00000004 0x00000000 0x00000000 0x00000000 "
                                        "0x00000000 0x00000000 0x00000000)")),
                       (-60.0, xid(45, "Ch 00000008, caused by Xid 145"))])
    assert both["metrics"]["xid_counts"]["145"] == 1
    solo = scan(fake, [(-60.0, xid(45, "Ch 00000010"))])
    assert solo["verdict"] == "PASS" and "solo" in solo["findings"][0]["message"]


def test_xid_48_with_a_remap_means_drain_and_reset(fake: FakeTools) -> None:
    alone = found(scan(fake, [(-60.0, xid(48, "An uncorrectable double bit error (DBE) has been detected"))]))
    assert alone[("xid_48", "0000:3b:00")]["action"] == "reset the GPU at 0000:3b:00"
    both = found(scan(fake, [(-60.0, xid(48, "An uncorrectable double bit error (DBE) has been detected")),
                             (-59.0, xid(63, "Row Remapper: New row marked for remapping, reset gpu to activate."))]))
    assert both[("xid_48", "0000:3b:00")]["action"] == "drain the node, then reset the GPU at 0000:3b:00"
    assert both[("xid_63", "0000:3b:00")]["severity"] == "INFO"


def test_xid_154_sets_the_recovery_for_the_gpus_other_xids(fake: FakeTools) -> None:
    reboot = "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    result = found(scan(fake, [(-60.0, xid(119, "Timeout after 6s")), (-59.0, xid(154, reboot))]))
    assert result[("xid_119", "0000:3b:00")]["action"] == "reboot the node"
    assert result[("xid_154", "0000:3b:00")]["severity"] == "FAIL"
    cleared = "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)"
    assert scan(fake, [(-60.0, xid(154, cleared))])["verdict"] == "PASS"


def test_a_reengaged_power_smoother_cancels_its_disengage(fake: FakeTools) -> None:
    result = found(scan(fake, [(-60.0, xid(163, "PSHC disengaged")), (-30.0, xid(162, "PSHC reengaged"))]))
    assert "cancelled by a later Xid 162" in result[("xid_163", "0000:3b:00")]["message"]


def test_repeated_xid_13_on_one_gpc_tpc_from_different_processes_suspects_the_gpu(fake: FakeTools) -> None:
    warp = "Graphics SM Warp Exception on (GPC {}, TPC 3, SM 0): Out Of Range Address"
    one_job = [(-600.0 + k, xid(13, warp.format(1), pid="1001", name="python")) for k in range(3)]
    assert "xid_13_same_sm" not in {f["id"] for f in scan(fake, one_job)["findings"]}
    two_jobs = [*one_job, (-60.0, xid(13, warp.format(1), pid="2002", name="python"))]
    assert ("xid_13_same_sm", "0000:3b:00") in found(scan(fake, two_jobs))
    other_gpc = [*one_job, (-60.0, xid(13, warp.format(4), pid="2002", name="python"))]
    assert "xid_13_same_sm" not in {f["id"] for f in scan(fake, other_gpc)["findings"]}
    mmu = "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE"
    result = found(scan(fake, [(-900.0, xid(31, mmu, pid="1001", name="a")),
                               (-60.0, xid(31, mmu, pid="2002", name="b"))]))
    assert ("xid_31_same_gpu", "0000:3b:00") in result


# ---- SXids ------------------------------------------------------------------------------------------------------
def test_sxid_severity_from_the_line_the_data_line_or_the_catalogue(fake: FakeTools) -> None:
    switch = "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): "
    result = found(scan(fake, [(-60.0, switch + "24007, Fatal, Link 28 sourcetrack timeout error (First)"),
                               (-50.0, "nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 20009, Non-fatal, Link 04 RX Short "
                                       "Error Rate"),
                               (-40.0, "nvidia-nvswitch1: SXid (PCI:0000:c5:00.0): 12033, Severity 1 Engine "
                                       "instance 00 Sub-engine instance 00"),
                               (-30.0, "nvidia-nvswitch2: SXid (PCI:0000:c7:00.0): 26006, SOE HALTED")]))
    assert result[("sxid_fatal", "nvidia-nvswitch0 (0000:c3:00)")]["severity"] == "FAIL"
    assert result[("sxid_nonfatal", "nvidia-nvswitch3 (0000:c1:00)")]["severity"] == "INFO"
    assert result[("sxid_fatal", "nvidia-nvswitch1 (0000:c5:00)")]["severity"] == "FAIL"  # Severity 1 = fatal
    assert result[("sxid_fatal", "nvidia-nvswitch2 (0000:c7:00)")]["action"]


def test_a_non_fatal_sxid_with_an_nvidia_action_warns_and_never_fails(fake: FakeTools) -> None:
    # 12028: NVIDIA says restart the guest VM (its NVLink traffic stalls), the driver says it recovered
    result = scan(fake, [(-60.0, "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress "
                                 "non-posted PRIV error (First)")])
    assert result["verdict"] == "WARN"
    (finding,) = result["findings"]
    assert finding["id"] == "sxid_nonfatal" and finding["action"] == "reboot the node"
    assert "Non-fatal" in finding["message"] and "Restart Guest VM" in finding["message"]


@pytest.mark.parametrize("line", ["NVRM: GPU 18:00.0: GPU has fallen off the bus.",
                                  "NVRM: GPU at 18:00.0 has fallen off the bus."])
def test_fallen_off_the_bus_without_a_pci_domain_names_the_gpu(fake: FakeTools, line: str) -> None:
    result = scan(fake, [(-60.0, line)])
    assert ("xid_79", "0000:18:00") in found(result), result["findings"]
    assert scan(fake, [(-60.0, "NVRM: GPU 18:00: GPU has fallen off the bus.")])["findings"][0]["entity"] == "a GPU"


# ---- the reasoners ----------------------------------------------------------------------------------------------
def test_an_xid_no_leaf_names_reaches_its_sub_category_and_the_prompt_cites_nvidia() -> None:
    from agent.incident import Incident
    from agent.reasoning.offline import OfflineReasoner
    from agent.reasoning.prompts import summary_block

    taxonomy = load_taxonomy()
    reasoner = OfflineReasoner(taxonomy, embed=lambda texts: __import__("numpy").zeros((len(texts), 4)))
    summary = reasoner.summarize(Incident(text="NVRM: Xid (PCI:0000:3b:00): 39, pid=7, name=python, CE0 exception"))
    assert summary.entities.xids == [39]  # a copy-engine exception: NVIDIA places it under GPU.HARDWARE
    assert reasoner.xid_hit(summary, "GPU") and reasoner.xid_hit(summary, "GPU.HARDWARE")
    assert not reasoner.xid_hit(summary, "GPU.MEMORY") and not reasoner.xid_hit(summary, "USER_APPLICATION")
    assert "Xid 39 Copy Engine Exception: NVIDIA RESTART_APP -> GPU.HARDWARE" in summary_block(summary)
