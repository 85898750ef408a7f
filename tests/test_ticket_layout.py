"""What people receive: the ticket's first screen holds the cause, where it is, the lines behind it and the action;
the customer's answers come before the incident and the checks; the search path is last and folded; titles are
never cut mid-word; each channel says how its own user approves a load test; who should act is said.

Ten dev incidents (every fifth of tests/fixtures/dev_incident_texts.jsonl, their simulated faults in
dev_incident_scenarios.jsonl) are diagnosed on their simulated hosts; `make bench` runs all fifty
(eval/bench_tickets.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.diagnosis import Diagnoser
from agent.incident import Incident
from agent.options import DiagnoseOptions
from agent.report import Report, RootCause, acting_party
from agent.sim.scenario import create_scenario
from agent.ticket import CHANNELS, clip_words, render_markdown, ticket_data, ticket_title
from eval.bench_tickets import first_screen_misses

FIXTURES = Path(__file__).parent / "fixtures"
TEXTS = {r["id"]: r for r in map(json.loads, (FIXTURES / "dev_incident_texts.jsonl").read_text().splitlines())}
SCENARIOS = [json.loads(line) for line in (FIXTURES / "dev_incident_scenarios.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def tickets(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> dict[str, tuple[Report, dict]]:
    out = {}
    for record in SCENARIOS:
        root = tmp_path_factory.mktemp(record["id"])
        scenario = create_scenario(root, record["faults"], record["noise"], hosts=record["hosts"] or None)
        options = DiagnoseOptions(hosts=[f"sim:{scenario.root}"], data_dir=str(data_dir), knowledge=False,
                                  checkpoint=False)
        report = Diagnoser(options).run(Incident(text=TEXTS[record["id"]]["description"],
                                                 environment=record["environment"]))
        out[record["id"]] = (report, ticket_data(report))
    return out


@pytest.mark.parametrize("incident", [r["id"] for r in SCENARIOS])
def test_the_first_screen_holds_cause_where_lines_and_action(incident: str, tickets: dict) -> None:
    report, data = tickets[incident]
    for channel in CHANNELS:
        markdown = render_markdown(data, channel)
        assert first_screen_misses(markdown, report.resolved) == [], (channel, markdown[:3000])
    markdown = render_markdown(data)
    assert markdown.startswith(f"# {data['title']}\n")
    assert markdown.index("## Incident") > markdown.index("## Root cause" if report.resolved else "## No root cause")
    if data["path"]:  # the search path is last, folded
        assert markdown.index("<summary>Search path") > markdown.index("## Checks run")


def test_resolved_and_escalated_tickets_are_titled_and_say_who_acts(tickets: dict) -> None:
    statuses = {data["status"] for _, data in tickets.values()}
    assert "resolved" in statuses
    for report, data in tickets.values():
        title = ticket_title(data)
        assert title.startswith("Resolved: " if report.resolved else "Escalation: ")
        assert "escalation ticket" not in render_markdown(data)
        party = acting_party(report)
        assert data["acting_party"] == party
        assert f"who should act: **the {party}" in render_markdown(data)


def report_with(label: str, resolved: bool = True) -> Report:
    cause = RootCause(label=label, confidence=0.9, evidence=[], why="", where=["node-1"])
    return Report(run_id="r1", resolved=resolved, pipeline=2 if resolved else 0,
                  root_causes=[cause] if resolved else [], title="t")


def test_who_acts_follows_the_side_of_the_machine_the_cause_is_on() -> None:
    assert acting_party(report_with("FRAMEWORK_LIBRARY.DEEPSPEED.BUG")) == "customer"
    assert acting_party(report_with("USER_APPLICATION.CONFIG.BATCH_SIZE_OOM")) == "customer"
    assert acting_party(report_with("GPU.MEMORY.UNCORRECTABLE_ECC")) == "provider"
    assert acting_party(report_with("FRAMEWORK_LIBRARY.DEEPSPEED.BUG", resolved=False)) == "provider"


def test_titles_are_cut_between_words_never_inside_a_version() -> None:
    text = "DeepSpeed ZeRO-3 stage hangs after upgrading from deepspeed 0.15.3 to deepspeed 0.16.4 on 16 nodes " * 2
    cut = clip_words(text, 110)
    assert len(cut) <= 112 and cut.endswith(" …")
    assert all(word in text.split() for word in cut[:-2].split())


def test_each_channel_tells_its_own_user_how_to_approve_a_load_test(tickets: dict) -> None:
    _, data = next(iter(tickets.values()))
    skipped = {**data, "checks": [{"check": "gpu_exec", "host": "node-1", "tier": "active", "verdict": "UNKNOWN",
                                   "summary": "", "reason": "active check: needs the operator's approval",
                                   "commands": [], "findings": [], "lines": [], "output_sha256": ""}]}
    words = {channel: render_markdown(skipped, channel) for channel in CHANNELS}
    assert "--approve-active" in words["cli"]
    assert "--approve-active" not in words["chat"] and "answer yes" in words["chat"]
    assert "--approve-active" not in words["page"] and "approval box" in words["page"]
    with pytest.raises(ValueError, match="unknown ticket channel"):
        render_markdown(data, "fax")


def test_a_large_log_given_whole_is_listed_with_its_hash() -> None:
    from agent.incident import Attachment

    report = report_with("GPU.MEMORY.UNCORRECTABLE_ECC")
    report.attachments = [Attachment(name="train.log", path="/var/lib/aidai/runs/r1.attachments/train.log",
                                     sha256="ab" * 32, bytes=52_428_800, excerpted_lines=412)]
    markdown = render_markdown(ticket_data(report))
    assert "## Attached logs" in markdown
    assert f"train.log: 52,428,800 bytes, sha256 `{'ab' * 32}`" in markdown and "412 of its lines" in markdown
