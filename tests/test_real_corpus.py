"""Every committed case of the real-output corpus (eval/corpus/cases.yaml, fixtures under tests/fixtures) gives
the verdict its source says the output shows. Cases the parsers still get wrong are strict xfails: when a parser
is fixed the test turns XPASS and fails, and the case should be removed from DISAGREE."""

from __future__ import annotations

import pytest

from eval.corpus.run import Row, load_cases, run_cases

CASES = [c for c in load_cases() if c.committed]

# case id -> what the parser gets wrong (see `python -m eval.corpus.run`)
DISAGREE = {
    "gpud_xid146_tlw_rx_pipe0_fatal_word_warning.log::xid_scan":
        "Xid 146 TLW_RX 'Fatal' with errorStatus 0x4 is a warning for gpud's test; the script follows the line's Fatal "
        "word and NVIDIA's decode row for it (Fatal, RESET_GPU)",
}


@pytest.fixture(scope="module")
def results() -> dict[str, Row]:
    return {row.case.id: row for row in run_cases(CASES, shared=None)}


def test_corpus_is_committed_and_named_uniquely() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 80
    assert set(DISAGREE) <= set(ids), "DISAGREE names a case that is not in the corpus"


@pytest.mark.parametrize("case_id", [
    pytest.param(c.id, marks=pytest.mark.xfail(strict=True, reason=DISAGREE[c.id])) if c.id in DISAGREE else c.id
    for c in CASES])
def test_real_output_verdict(case_id: str, results: dict[str, Row]) -> None:
    row = results[case_id]
    assert row.got is not None, f"{row.case.fixture} is missing"
    assert row.agree, f"{case_id}: expected {row.case.expected_text}, got {row.got} ({row.case.expected_from})"
