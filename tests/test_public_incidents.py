"""eval/incidents/public.jsonl: real public incidents kept apart from the dev set, the seed DB and the knowledge
base. Every record is well formed, names its source and who confirmed it, and builds the host its fault describes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.knowledge.incident_db import read_jsonl
from agent.paths import KNOWLEDGE_DIR, ROOT
from agent.sim.faults.registry import REGISTRY
from agent.taxonomy import load_taxonomy
from eval.harness.problems import load_problems

PUBLIC = ROOT / "eval" / "incidents" / "public.jsonl"
RECORDS = [json.loads(line) for line in PUBLIC.read_text().splitlines() if line.strip()]


def test_there_are_at_least_a_hundred_distinct_threads() -> None:
    assert len(RECORDS) >= 100
    assert len({r["id"] for r in RECORDS}) == len(RECORDS)
    assert len({r["source"] for r in RECORDS}) == len(RECORDS)


@pytest.mark.parametrize("record", RECORDS, ids=[r["id"] for r in RECORDS])
def test_each_record_names_its_thread_its_confirmation_and_a_fault_of_its_leaf(record: dict) -> None:
    leaves = {leaf.label for leaf in load_taxonomy().leaves()}
    assert record["source"].startswith("https://") and record["confirmed_by"].strip() and record["fix"].strip()
    assert 0 < len(record["description"]) <= 2000
    assert record["label"] in leaves
    assert any(REGISTRY[f["fault"]].leaf == record["label"] for f in record["faults"])


def test_they_load_and_build_their_hosts(tmp_path: Path) -> None:
    problems = load_problems(PUBLIC)
    assert len(problems) == len(RECORDS)
    for problem in problems[::10]:  # a sample: every tenth record's hosts
        assert problem.materialize(tmp_path / problem.id)


def test_none_is_in_the_seed_db_or_the_knowledge_base() -> None:
    seed, _ = read_jsonl(KNOWLEDGE_DIR / "incidents" / "seed.jsonl")
    seed_text = (KNOWLEDGE_DIR / "incidents" / "seed.jsonl").read_text()
    kb = " ".join(p.read_text(errors="replace") for p in (KNOWLEDGE_DIR / "kb").rglob("*") if p.is_file())
    for record in RECORDS:
        assert record["source"] not in seed_text and record["source"] not in kb
        assert record["description"][:120] not in seed_text
    assert seed
