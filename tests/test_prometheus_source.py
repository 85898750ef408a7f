"""The simulator's dcgm-exporter, scraped by a real Prometheus (Debian's binary on loopback, 1 s scrapes), read by
the Prometheus pre-triage source: the faulty host first with the right findings and priors, the healthy host
quiet, a counter that rises inside the window dated to it, an old count called history, a host Prometheus has no
series for said so, hosts named by `instance` when the exporter writes no Hostname, and an unreachable or wrong
Prometheus a clean failure.

Scenario A (Hostname labels): node-1 with an uncorrectable ECC error on GPU 3, node-2 healthy, node-3 healthy until
the test raises its PCIe replay and NVLink CRC counters. Scenario B (`--no-hostname`, target labelled
instance=gpu-7:9400): gpu-7 overheating on GPU 5.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.incident import Incident
from agent.prometheus.client import Prometheus, PrometheusError, PrometheusUrlError, check_url
from agent.prometheus.tool import prometheus_pretriage
from agent.prometheus.triage import Window, triage
from agent.sim.exporter.render import DEFAULT_COUNTERS, CountersError, read_counters
from agent.sim.exporter.serve import ExporterFleet
from agent.sim.scenario import HOST_FILE, create_scenario
from agent.sim.state import HostState
from tests.chroma_server import free_port
from tests.prometheus_server import query, running_prometheus, wait_until

GPU_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]
ECC = "GPU.MEMORY.UNCORRECTABLE_ECC"
THERMAL = "GPU.THERMAL.OVERHEATING_THROTTLE"


@dataclass
class Fleet:
    prometheus: str
    log: Path
    a: Path  # scenario A
    urls: dict[str, str]  # host -> its exporter's /metrics


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("prom")
    a = create_scenario(root / "a", [{"fault": "gpu.ecc_uncorrectable", "gpu": 3, "host": "node-1"}], [],
                        hosts=["node-1", "node-2", "node-3"]).root
    b = create_scenario(root / "b", [{"fault": "gpu.thermal_throttle", "gpu": 5}], [], hosts=["gpu-7"]).root
    with_names, without = ExporterFleet(a, port=0), ExporterFleet(b, port=0, hostname=False)
    urls = {**with_names.start(), **without.start()}
    jobs = [{"job_name": "dcgm", "static_configs": [{"targets": [urls[h].split("/")[2] for h in
                                                                 ("node-1", "node-2", "node-3")]}]},
            # as a fleet names its nodes: the target's instance label is the node's name and the exporter's port
            {"job_name": "dcgm-no-hostname", "static_configs": [{"targets": [urls["gpu-7"].split("/")[2]],
                                                                 "labels": {"instance": "gpu-7:9400"}}]}]
    try:
        with running_prometheus(root / "prometheus", jobs) as url:
            log = root / "prometheus" / "prometheus.log"
            # every target scraped: 4 hosts x 8 GPUs of temperatures, and each host's error counters
            wait_until("samples of every target", lambda: len(query(url, "DCGM_FI_DEV_GPU_TEMP")) == 32
                       and len(query(url, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")) == 32
                       and len(query(url, 'up == 1')) == 4, log)
            yield Fleet(url, log, a, urls)
    finally:
        with_names.stop()
        without.stop()


def _families(url: str) -> dict[str, object]:
    text = httpx.get(url, timeout=10).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_exporter_serves_dcgm_exporter_names_labels_and_state(fleet: Fleet) -> None:
    counters = {c.field: c for c in read_counters(DEFAULT_COUNTERS) if c.kind != "label"}
    faulty, healthy = _families(fleet.urls["node-1"]), _families(fleet.urls["node-2"])
    # every metric of the collectors file the state can answer, with dcgm-exporter's type and help
    served = {name for name in faulty}
    assert {"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ROW_REMAP_PENDING",
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"} <= served
    # H100s remap rows: DCGM answers the retired-page fields blank and dcgm-exporter writes no line
    assert "DCGM_FI_DEV_RETIRED_DBE" not in served
    for name, family in faulty.items():
        counter = counters[name.removesuffix("_total") if name not in counters else name]
        assert family.type == counter.kind and family.documentation == counter.help
    dbe = {s.labels["gpu"]: s for s in faulty["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"].samples}
    assert list(dbe["3"].labels) == GPU_LABELS
    state = HostState.load(fleet.a / "node-1" / HOST_FILE)
    gpu3 = next(g for g in state.gpus if g.index == 3)
    assert dbe["3"].labels["UUID"] == gpu3.uuid and dbe["3"].labels["pci_bus_id"] == gpu3.bus_id
    assert dbe["3"].labels["device"] == "nvidia3" and dbe["3"].labels["Hostname"] == "node-1"
    assert dbe["3"].value == 1 and all(s.value == 0 for g, s in dbe.items() if g != "3")
    xids = {s.labels["gpu"]: s for s in faulty["DCGM_FI_DEV_XID_ERRORS"].samples}
    # the driver's newest Xid on GPU 3 (48 then 63), with dcgm-exporter's err_code and err_msg
    assert xids["3"].value == 63 and xids["3"].labels["err_code"] == "63"
    assert xids["3"].labels["err_msg"] == "ECC page retirement or row remapping recording event"
    assert xids["0"].labels["err_msg"] == "No Error" and xids["0"].value == 0
    # a healthy host is quiet: no error count, no Xid, no throttle reason but idle ones, cool
    for name in ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ROW_REMAP_PENDING",
                 "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
                 "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"):
        assert all(s.value == 0 for s in healthy[name].samples), name
    assert max(s.value for s in healthy["DCGM_FI_DEV_GPU_TEMP"].samples) < 60
    # --no-hostname: no Hostname label at all
    assert all("Hostname" not in s.labels for s in _families(fleet.urls["gpu-7"])["DCGM_FI_DEV_GPU_TEMP"].samples)


def test_faulty_host_first_with_findings_and_priors(fleet: Fleet) -> None:
    incident = Incident(text="NCCL WARN ... unhandled cuda error; rank 3 died", hosts=["node-2", "node-1"])
    result = prometheus_pretriage(incident, fleet.prometheus)
    assert result is not None and result.status == "ok", result
    assert result.hosts == ["node-1"]  # the healthy host is not a suspect
    first = result.findings[0]
    assert first.severity == "FAIL" and first.id == "prometheus_ecc_dbe" and first.entity == "node-1 GPU3"
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in first.message and "1 uncorrectable" in first.message
    assert 'gpu="3"' in first.raw_line and first.raw_line.endswith(" 1")
    ids = {f.id for f in result.findings}
    assert {"prometheus_row_remap_pending", "prometheus_xid_63"} <= ids
    assert not [f for f in result.findings if f.entity.startswith("node-2")]
    assert result.priors[ECC] == max(result.priors.values())
    assert result.priors["GPU.MEMORY.ROW_REMAP_PENDING"] > 0 and result.priors["GPU.MEMORY"] == result.priors[ECC]
    assert not any(label.startswith("INTERCONNECT") for label in result.priors)
    ranked = {h["host"]: h for h in result.data["hosts"]}
    assert ranked["node-2"]["series"] > 0 and ranked["node-2"]["score"] == 0 and ranked["node-2"]["findings"] == []
    assert ranked["node-1"]["matched_by"] == ["Hostname"]


def test_a_counter_that_rises_in_the_window_is_dated_to_it(fleet: Fleet) -> None:
    path = fleet.a / "node-3" / HOST_FILE
    state = HostState.load(path)
    gpu = next(g for g in state.gpus if g.index == 6)
    gpu.pcie_replays += 4200
    gpu.nvlink_crc_errors += 250
    state.save(path)
    wait_until("the new PCIe replay count", lambda: any(
        float(s["value"][1]) == 4200 for s in query(fleet.prometheus, 'DCGM_FI_DEV_PCIE_REPLAY_COUNTER'
                                                                      '{Hostname="node-3"}')), fleet.log)
    result = prometheus_pretriage(Incident(text="job slow", hosts=["node-3", "node-2"]), fleet.prometheus)
    assert result is not None and result.hosts == ["node-3"]
    found = {f.id: f for f in result.findings}
    replay = found["prometheus_pcie_replay"]
    assert replay.severity == "WARN" and replay.entity == "node-3 GPU6"
    assert "rose by 4200 in the incident's window" in replay.message and "now 4200" in replay.message
    assert found["prometheus_nvlink_crc_flit"].severity == "WARN"
    assert result.priors["INTERCONNECT_NETWORKING.PCIE.RISER_OR_SLOT_FAULT"] == 0.4
    assert result.priors["INTERCONNECT_NETWORKING.NVLINK.LINK_HARDWARE_FAULT"] == 0.4


def test_a_count_flat_since_before_the_window_is_history(fleet: Fleet) -> None:
    first = min(float(v[0]) for s in query(fleet.prometheus, 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{Hostname="node-1"}[1h]')
                for v in s["values"])
    # the window opens after Prometheus' first samples of node-1: wait until it has samples on both sides
    wait_until("samples after the window's start", lambda: max(float(s["value"][1]) for s in query(
        fleet.prometheus, 'timestamp(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{Hostname="node-1"})')) > first + 3, fleet.log)
    with Prometheus(fleet.prometheus) as prom:
        report = triage(prom, {"node-1": ["node-1"]}, Window(first + 2, time.time()))
    host = report.hosts[0]
    found = {f.id: f for f in host.findings}
    assert found["prometheus_ecc_dbe_history"].severity == "INFO"
    assert "unchanged since before the incident's window" in found["prometheus_ecc_dbe_history"].message
    assert found["prometheus_xid_63_history"].severity == "INFO"
    assert "prometheus_ecc_dbe" not in found and "prometheus_xid_63" not in found
    # the pending remap is a state, not an event: still set now, still said
    assert found["prometheus_row_remap_pending"].severity == "WARN"


def test_hosts_named_by_instance_when_the_exporter_writes_no_hostname(fleet: Fleet) -> None:
    result = prometheus_pretriage(Incident(text="GPU slow", hosts=["ssh://ops@gpu-7"]), fleet.prometheus)
    assert result is not None and result.status == "ok" and result.hosts == ["ssh://ops@gpu-7"]
    host = result.data["hosts"][0]
    assert host["names"] == ["gpu-7"] and host["matched_by"] == ["instance"]
    found = {f.id: f for f in result.findings}
    assert found["prometheus_overheating"].severity == "FAIL" and found["prometheus_overheating"].entity.endswith(
        "GPU5")
    assert "92 C" in found["prometheus_overheating"].message and "85 C limit" in found["prometheus_overheating"].message
    assert "hw_thermal" in found["prometheus_thermal_slowdown"].message
    assert result.priors[THERMAL] == 0.6


def test_a_host_without_series_is_not_checked_not_healthy(fleet: Fleet) -> None:
    result = prometheus_pretriage(Incident(text="x", hosts=["node-1", "node-9"]), fleet.prometheus)
    assert result is not None and result.status == "ok" and result.hosts == ["node-1"]
    unseen = [f for f in result.findings if f.id == "prometheus_no_series"]
    assert len(unseen) == 1 and unseen[0].entity == "node-9" and "not checked" in unseen[0].message
    assert "node-9 (not checked)" in result.summary
    only = prometheus_pretriage(Incident(text="x", hosts=["node-9"]), fleet.prometheus)
    assert only is not None and only.status == "skipped" and only.priors == {} and only.hosts == []
    assert "no dcgm-exporter series" in only.reason


def test_unreachable_or_wrong_prometheus_fails_cleanly(fleet: Fleet) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    result = prometheus_pretriage(Incident(text="x", hosts=["node-1"]), closed)
    assert result is not None and result.status == "error" and result.hosts == [] and result.priors == {}
    assert "cannot connect" in result.reason and closed in result.reason
    # something that answers HTTP but is not Prometheus' API (here: an exporter)
    wrong = prometheus_pretriage(Incident(text="x", hosts=["node-1"]), fleet.urls["node-1"].removesuffix("/metrics"))
    assert wrong is not None and wrong.status == "error" and "not a Prometheus API answer" in wrong.reason
    # the API's own error is passed on with the query
    with Prometheus(fleet.prometheus) as prom, pytest.raises(PrometheusError, match="bad_data"):
        prom.query("sum(", time.time())
    with pytest.raises(PrometheusUrlError):
        check_url("http://user:secret@prom:9090")
    with pytest.raises(PrometheusUrlError):
        check_url("prom:9090")


def test_the_diagnosis_runs_it_as_pre_triage(fleet: Fleet, tmp_path: Path) -> None:
    from agent.diagnosis import Diagnoser
    from agent.events import Event, PretriageEvent
    from agent.options import DiagnoseOptions

    options = DiagnoseOptions(hosts=[f"sim:{fleet.a}"], history=False, knowledge=False, checkpoint=False,
                              pretriage=["prometheus"], prometheus=fleet.prometheus, max_checks=1,
                              data_dir=str(tmp_path))
    events: list[Event] = []
    diagnoser = Diagnoser(options, emit=events.append)
    try:
        report = diagnoser.run(Incident(text="CUDA error: uncorrectable ECC error encountered on rank 3"))
    finally:
        diagnoser.close()
    tool = next(t for t in report.pretriage if t.tool == "prometheus")
    assert tool.status == "ok" and tool.hosts[0] == "node-1"
    assert tool.priors[ECC] == max(tool.priors.values())
    shown = [e for e in events if isinstance(e, PretriageEvent)]
    assert shown and shown[0].results[0].tool == "prometheus"


def test_a_collectors_file_with_a_field_the_simulator_cannot_answer_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "counters.csv"
    bad.write_text("DCGM_FI_PROF_SM_ACTIVE, gauge, The ratio of cycles an SM has at least 1 warp assigned.\n")
    with pytest.raises(CountersError, match="does not render DCGM_FI_PROF_SM_ACTIVE"):
        read_counters(bad)
    bad.write_text("DCGM_FI_DEV_GPU_TEMP gauge\n")
    with pytest.raises(CountersError, match="expected `FIELD, type, help`"):
        read_counters(bad)


def test_a_lost_gpu_and_a_broken_driver_scrape_as_dcgm_would(tmp_path: Path) -> None:
    lost = create_scenario(tmp_path / "fob", [{"fault": "gpu.fallen_off_bus", "gpu": 2}], []).root
    broken = create_scenario(tmp_path / "nomod", [{"fault": "driver.module_not_loaded"}], []).root
    fleets = [ExporterFleet(lost, port=0), ExporterFleet(broken, port=0)]
    try:
        (lost_url,), (broken_url,) = (list(f.start().values()) for f in fleets)
        families = _families(lost_url)
        assert "2" not in {s.labels["gpu"] for s in families["DCGM_FI_DEV_GPU_TEMP"].samples}
        xid = {s.labels["gpu"]: s.value for s in families["DCGM_FI_DEV_XID_ERRORS"].samples}
        assert xid["2"] == 79
        answer = httpx.get(broken_url, timeout=10)
        assert answer.status_code == 500 and "DCGM" in answer.text
    finally:
        for f in fleets:
            f.stop()


def test_the_cli_prints_each_host_and_its_url(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = create_scenario(tmp_path / "cli", [], [], hosts=["node-1", "node-2"]).root
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli.main", "sim", "exporter", str(root), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = [json.loads(proc.stdout.readline()) for _ in range(2)]
        assert [line["host"] for line in lines] == ["node-1", "node-2"]
        assert "DCGM_FI_DEV_GPU_TEMP" in httpx.get(lines[1]["url"], timeout=10).text
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_series_belong_to_a_host_by_its_name_short_name_or_address() -> None:
    from agent.prometheus.triage import HostMap

    hosts = HostMap({"ssh://ops@10.0.0.5": ["10.0.0.5"], "ssh://ops@gpu-7": ["gpu-7.cluster.local", "gpu-7"]})
    assert hosts.owner({"instance": "10.0.0.5:9400"}) == ("ssh://ops@10.0.0.5", "instance")
    assert hosts.owner({"instance": "10.0.0.55:9400"}) is None  # an address is never cut to its first number
    assert hosts.owner({"Hostname": "GPU-7"}) == ("ssh://ops@gpu-7", "Hostname")
    assert hosts.owner({"Hostname": "gpu-7.other.domain"}) == ("ssh://ops@gpu-7", "Hostname")
    assert hosts.owner({"Hostname": "gpu-70"}) is None and hosts.owner({"instance": "gpu-8:9400"}) is None


def test_the_cli_ranks_hosts_on_its_own(fleet: Fleet) -> None:
    from typer.testing import CliRunner

    from agent.cli.main import app

    result = CliRunner().invoke(app, ["prometheus", f"sim:{fleet.a}", "gpu-7", "--prometheus", fleet.prometheus,
                                      "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["tool"] == "prometheus" and out["status"] == "ok"
    assert out["hosts"][0] in ("node-1", "gpu-7") and {"node-1", "gpu-7"} <= set(out["hosts"])
    assert "node-2" not in out["hosts"]
    unread = CliRunner().invoke(app, ["prometheus", "node-1", "--prometheus", f"http://127.0.0.1:{free_port()}"])
    assert unread.exit_code == 1 and "cannot connect" in unread.output
    bad = CliRunner().invoke(app, ["prometheus", "node-1", "--prometheus", "prom:9090"])
    assert bad.exit_code == 2 and "expected http(s)://" in bad.output
