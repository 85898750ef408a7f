"""The documentation's words in the reading: an incident that uses a leaf's own vocabulary reads like that leaf, a
text that uses none lifts no leaf."""

from __future__ import annotations

import pytest

from agent.agents.reading import reading
from agent.incident import Incident
from agent.reasoning import offline
from agent.reasoning.lexicon import Lexicon, lexicon
from agent.reasoning.offline import OfflineReasoner
from agent.taxonomy import load_taxonomy


@pytest.fixture(scope="module")
def taxonomy():
    return load_taxonomy()


def top(scores: dict[str, float], k: int = 3) -> list[str]:
    return sorted(scores, key=lambda label: -scores[label])[:k]


def test_a_leaf_s_own_words_put_it_first(taxonomy):
    words = lexicon(taxonomy)
    assert top(words.scores("nvidia_peermem is not loaded, so GPUDirect RDMA is off and NCCL stages through host "
                            "memory"))[0] == "INTERCONNECT_NETWORKING.GDR.GPUDIRECT_RDMA_DISABLED"
    assert "INTERCONNECT_NETWORKING.PCIE.RISER_OR_SLOT_FAULT" in top(words.scores(
        "since the cards were moved to another riser, GPUs keep dropping out of their PCIe slot"))


def test_words_no_leaf_uses_lift_none(taxonomy):
    words = lexicon(taxonomy)
    for text in ("", "hello there", "12345 67.89"):
        assert set(words.scores(text).values()) == {0.0}


def test_the_taxonomy_alone_is_a_lexicon(taxonomy):
    """Without knowledge-base passages the leaves' names, descriptions and runbooks still tell them apart."""
    scores = Lexicon(taxonomy, {}).scores("the power supply cannot keep up when every GPU draws full power")
    assert "GPU.POWER.PSU_INSUFFICIENT" in top(scores)


def test_the_reading_weighs_the_words(taxonomy, monkeypatch):
    reader = OfflineReasoner(taxonomy)
    # no signature of the leaf matches: only its documentation's words (backplane, slot, reseat) point at it
    summary = reader.summarize(Incident(text="after reseating the card in another slot of the backplane the GPU "
                                             "appears again; in the old slot it keeps disappearing"))
    leaf = "INTERCONNECT_NETWORKING.PCIE.RISER_OR_SLOT_FAULT"
    with_words = reading(reader, taxonomy, summary, [])[leaf]
    monkeypatch.setattr(offline, "WORDS", 0.0)
    without = reading(reader, taxonomy, summary, [])[leaf]
    assert with_words < without
    assert with_words <= 3
