"""Inventory first: what a host is decides what its checks expect; a host that cannot be checked runs nothing and
the diagnosis says so instead of blaming what it could not see."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent import inventory as inv
from agent.checks.runner import CheckRunner
from agent.diagnosis import Diagnoser
from agent.executors.hosts import executors_for
from agent.executors.local import LocalExecutor
from agent.incident import Incident
from agent.models import Verdict
from agent.options import DiagnoseOptions
from agent.sim.scenario import create_scenario

FIXTURES = Path(__file__).parent / "fixtures"
DEV_TEXTS = [json.loads(line) for line in (FIXTURES / "dev_incident_texts.jsonl").read_text().splitlines()]
THIS_MACHINE_HAS_NVIDIA = os.path.exists("/proc/driver/nvidia") or any(
    Path(d, "vendor").read_text().strip() == "0x10de" for d in Path("/sys/bus/pci/devices").glob("*")
    if Path(d, "vendor").exists())
gpu_less = pytest.mark.skipif(THIS_MACHINE_HAS_NVIDIA, reason="this machine has an NVIDIA GPU or driver")


def host(**fields: object) -> inv.HostInventory:
    """An inventory as the script would report it: a PCI-readable bare-metal host with no GPU unless told."""
    base: dict[str, object] = {"host": "h", "pci_source": "sysfs", "nvswitches": 0, "platform": "bare-metal"}
    return inv.HostInventory.model_validate(base | fields)


def h100s(count: int, **fields: object) -> inv.HostInventory:
    gpus = [{"bus_id": f"0000:{i:02x}:00.0", "device_id": "2330"} for i in range(count)]
    return host(gpus_pci=gpus, driver_loaded=True, driver_version="535.161.08", **fields)


def ib_ports(count: int) -> list[dict[str, str]]:
    return [{"device": f"mlx5_{i}", "link_layer": "InfiniBand", "state": "4: ACTIVE"} for i in range(count)]


# ---- expectations from an inventory -------------------------------------------------------------------------
def test_a_full_hgx_board_matches_its_profile() -> None:
    found = inv.expectations(h100s(8, nvswitches=4, rdma=ib_ports(8)))
    assert (found.source, found.profile, found.cannot_check) == ("profile", "H100-SXM-8", "")
    assert found.values["gpu_count"] == 8 and found.values["hca_count"] == 8 and found.values["nvswitch"] is True


def test_seven_gpus_of_an_eight_gpu_sku_are_a_missing_gpu_not_a_smaller_vm() -> None:
    found = inv.expectations(h100s(7, nvswitches=4, rdma=ib_ports(8)))
    assert found.values["gpu_count"] == 8
    assert "expecting 8" in found.why


def test_a_smaller_vm_shape_is_held_to_what_it_is() -> None:
    # a 2-GPU slice of an HGX board: no NVSwitch passed through, no IB, no full-board bandwidth targets
    found = inv.expectations(h100s(2, platform="vm"))
    values = found.values
    assert values["gpu_count"] == 2 and values["nvswitch"] is False and values["hca_count"] == 0
    assert values["nccl_intranode_busbw"] is None and values["p2p_gbps"] is None
    assert "no RDMA NIC on this host" in found.why


def test_one_gpu_has_no_nvlink_peer_to_expect() -> None:
    values = inv.expectations(h100s(1, platform="vm")).values
    assert values["nvlink_links"] is None and values["topo_nvlink"] is None


def test_a_board_whose_nvswitches_are_not_pci_functions_keeps_them() -> None:
    b200 = host(gpus_pci=[{"bus_id": f"0000:{i:02x}:00.0", "device_id": "2901"} for i in range(8)],
                driver_loaded=True, rdma=ib_ports(8))
    found = inv.expectations(b200)
    assert found.profile == "B200-SXM-8" and found.values["nvswitch"] is True


def test_a_gpu_no_profile_knows_gets_expectations_from_the_host_alone() -> None:
    t4 = host(gpus_pci=[{"bus_id": "0000:00:1e.0", "device_id": "1eb8"}], driver_loaded=True,
              gpus=[{"index": 0, "name": "Tesla T4", "device_id": "1eb8"}])
    found = inv.expectations(t4)
    assert found.source == "derived" and found.profile is None
    assert found.values["gpu_count"] == 1 and found.values["hca_count"] == 0
    assert found.values["pcie_gen"] is None and found.values["temp_limit_c"] is None  # nothing invented
    assert "no shipped profile for Tesla T4" in found.why


def test_a_container_that_cannot_see_nics_expects_nothing_of_them() -> None:
    values = inv.expectations(h100s(8, nvswitches=4, platform="container")).values
    assert values["hca_count"] is None and values["link_layer"] is None


def test_infiniband_nics_whose_driver_is_not_loaded_are_still_expected() -> None:
    nics = [{"bus_id": f"0000:{i:02x}:00.0", "device_id": "1021", "kind": "InfiniBand"} for i in range(8)]
    values = inv.expectations(h100s(8, nvswitches=4, nics_pci=nics)).values
    assert values["hca_count"] == 8


def test_profile_override_wins_and_says_so() -> None:
    found = inv.expectations(h100s(2), override="A100-SXM-8")
    assert (found.source, found.profile, found.values["gpu_count"]) == ("override", "A100-SXM-8", 8)
    assert "--profile A100-SXM-8" in found.line()


def test_no_gpu_and_no_driver_cannot_be_checked() -> None:
    found = inv.expectations(host())
    assert "no NVIDIA GPU and no NVIDIA driver" in found.cannot_check
    # a GPU on the bus without a driver is a node to diagnose (not provisioned), not one to give up on
    bare = host(gpus_pci=[{"bus_id": "0000:18:00.0", "device_id": "2330"}])
    assert inv.expectations(bare).cannot_check == ""


def test_an_inventory_that_could_not_be_taken_cannot_be_checked() -> None:
    found = inv.expectations(inv.HostInventory(host="ssh://n@h", error="cannot reach h:22: refused"))
    assert found.cannot_check == "cannot reach h:22: refused"
    assert found.line() == "could not check ssh://n@h: cannot reach h:22: refused"


# ---- the inventory script on real and simulated hosts ---------------------------------------------------------
@gpu_less
def test_this_gpu_less_machine_is_seen_as_it_is() -> None:
    taken = inv.take(LocalExecutor())
    assert taken.error == "" and taken.gpu_count == 0 and taken.hostname
    assert taken.tools["nvidia-smi"] is False
    assert "no NVIDIA GPU" in inv.expectations(taken).cannot_check


def test_a_simulated_hgx_host_is_learnt_from_its_tools(tmp_path: Path) -> None:
    create_scenario(tmp_path / "h100", [{"fault": "gpu.missing", "gpu": 3}])
    runner = CheckRunner(executors_for([f"sim:{tmp_path / 'h100'}"]))
    found = runner.take_inventory()["node-1"]
    taken = runner.inventories["node-1"]
    assert len(taken.gpus) == 7 and taken.gpu_count == 8  # nvidia-smi lost one, the PCI bus did not
    assert (found.profile, found.values["gpu_count"], found.values["hca_count"]) == ("H100-SXM-8", 8, 8)
    assert taken.driver_version == "535.161.08" and taken.cuda_version == "12.2" and taken.nvswitches == 4


def test_checks_get_the_hosts_expectations(tmp_path: Path) -> None:
    create_scenario(tmp_path / "h100", [{"fault": "gpu.missing", "gpu": 3}])
    runner = CheckRunner(executors_for([f"sim:{tmp_path / 'h100'}"]))
    [result] = runner.run(["gpu_inventory"])
    assert result.verdict == Verdict.FAIL  # the missing GPU, judged against the 8 the SKU has


# ---- cannot check: say so and stop --------------------------------------------------------------------------
def diagnose(hosts: list[str], text: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    options = DiagnoseOptions(hosts=hosts, data_dir=str(tmp_path / "data"), checkpoint=False, history=False,
                              knowledge=False, ssh={"connect_timeout": 5.0})
    diagnoser = Diagnoser(options)
    try:
        return diagnoser.run(Incident(text=text))
    finally:
        for executor in diagnoser.runner.executors.values():
            executor.close()


def test_an_unreachable_host_stops_after_the_inventory(tmp_path: Path) -> None:
    report = diagnose(["ssh://nobody@127.0.0.1:1"], DEV_TEXTS[0]["description"], tmp_path)
    assert not report.resolved and report.checks_run == 0 and report.hypotheses == []
    [host_view] = report.inventory
    assert "cannot reach 127.0.0.1:1" in host_view.cannot_check
    assert report.explanation.startswith("Could not check ssh://nobody@127.0.0.1:1: cannot reach")
    assert report.contract()["details"]["could_not_check"] == {"ssh://nobody@127.0.0.1:1": host_view.cannot_check}


def test_an_uncheckable_host_is_left_out_and_the_others_are_diagnosed(tmp_path: Path) -> None:
    create_scenario(tmp_path / "ecc", [{"fault": "gpu.ecc_uncorrectable", "gpu": 2}])
    text = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    report = diagnose([f"sim:{tmp_path / 'ecc'}", "ssh://nobody@127.0.0.1:1"], text, tmp_path)
    assert report.resolved and report.root_causes[0].label == "GPU.MEMORY.UNCORRECTABLE_ECC"
    assert {r.host for r in report.results} == {"node-1"}
    assert [e.host for e in report.inventory if e.cannot_check] == ["ssh://nobody@127.0.0.1:1"]


@gpu_less
@pytest.mark.parametrize("record", DEV_TEXTS, ids=[r["id"] for r in DEV_TEXTS])
def test_every_real_incident_on_this_gpu_less_machine_confirms_nothing(record: dict[str, str],
                                                                       tmp_path: Path) -> None:
    report = diagnose(["local"], record["description"], tmp_path)
    assert not report.resolved and report.root_causes == [] and report.checks_run == 0
    assert report.explanation.startswith("Could not check local (this machine, ")


@gpu_less
def test_cli_on_this_machine_exits_unresolved_and_says_why(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "agent.cli.main", "diagnose", "--data-dir", str(tmp_path),
                           "--no-history", "--json", DEV_TEXTS[6]["description"]],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 1, proc.stderr
    assert "no --host given: checking this machine (local)" in proc.stderr
    out = json.loads(proc.stdout)
    assert out["resolved"] is False and out["root_causes"] == []
    assert "no NVIDIA GPU and no NVIDIA driver" in out["details"]["could_not_check"]["local"]
