"""Healthy means quiet: on a healthy host of any shipped profile, learnt by its inventory as a real host would be,
no check fails or warns and no real incident text gets a confirmed cause."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.checks.manifest import load_profiles
from agent.checks.runner import CheckRunner
from agent.diagnosis import Diagnoser
from agent.executors.hosts import executors_for
from agent.incident import Incident
from agent.models import Verdict
from agent.options import DiagnoseOptions
from agent.sim.scenario import create_scenario

FIXTURES = Path(__file__).parent / "fixtures"
DEV_TEXTS = [json.loads(line) for line in (FIXTURES / "dev_incident_texts.jsonl").read_text().splitlines()]
PROFILES = sorted(load_profiles())
# every text on the profile with the most checks to trip; a spread of texts on every other profile
SAMPLE = DEV_TEXTS[::10]


@pytest.mark.parametrize("name", PROFILES)
def test_the_inventory_recognises_the_sku_and_no_passive_check_fails(name: str, tmp_path: Path) -> None:
    create_scenario(tmp_path / "host", profile=name)
    runner = CheckRunner(executors_for([f"sim:{tmp_path / 'host'}"]))
    found = runner.take_inventory()["node-1"]
    assert (found.source, found.profile, found.cannot_check) == ("profile", name, "")
    loud = [(r.check, r.verdict.value, r.summary) for r in runner.run(runner.passive_ids())
            if r.verdict in (Verdict.FAIL, Verdict.WARN)]
    assert loud == []


@pytest.mark.parametrize("name", PROFILES)
def test_real_incident_texts_confirm_nothing_on_a_healthy_host(name: str, tmp_path: Path, data_dir: Path) -> None:
    create_scenario(tmp_path / "host", profile=name)
    # one diagnoser for every text: the host does not change, so its read-only checks run once and are cached
    diagnoser = Diagnoser(DiagnoseOptions(hosts=[f"sim:{tmp_path / 'host'}"], data_dir=str(data_dir),
                                          checkpoint=False, knowledge=False))
    texts = DEV_TEXTS if name == "H100-SXM-8" else SAMPLE
    confirmed = {}
    for record in texts:
        report = diagnoser.run(Incident(text=record["description"]))
        if report.resolved:
            confirmed[record["id"]] = [c.label for c in report.root_causes]
    assert confirmed == {}


@pytest.mark.parametrize("view", ["vm", "container"])
def test_a_narrower_view_stays_quiet_and_still_finds_a_gpu_fault(view: str, tmp_path: Path, data_dir: Path) -> None:
    create_scenario(tmp_path / "healthy", view=view)
    create_scenario(tmp_path / "ecc", [{"fault": "gpu.ecc_uncorrectable", "gpu": 0}], view=view)
    options = {"data_dir": str(data_dir), "checkpoint": False, "knowledge": False}
    healthy = Diagnoser(DiagnoseOptions(hosts=[f"sim:{tmp_path / 'healthy'}"], **options))
    assert [r["id"] for r in SAMPLE if healthy.run(Incident(text=r["description"])).resolved] == []
    ecc = next(r for r in DEV_TEXTS if "uncorrectable ECC" in r["description"])
    report = Diagnoser(DiagnoseOptions(hosts=[f"sim:{tmp_path / 'ecc'}"], **options)).run(
        Incident(text=ecc["description"]))
    assert report.root_causes[0].label == "GPU.MEMORY.UNCORRECTABLE_ECC"
