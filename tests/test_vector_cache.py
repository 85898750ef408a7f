"""Vectors of the taxonomy's node texts kept on disk: a later process encodes nothing it was given before, a
changed text is encoded again, a broken or unwritable file only costs time; the offline reasoner's similarities
are the same with the cache as without it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent.incident import IncidentSummary
from agent.knowledge import embeddings, vector_cache
from agent.reasoning.offline import OfflineReasoner, node_text
from agent.taxonomy import load_taxonomy


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[list[str]]:
    """embed() replaced by a deterministic fake that records each call; the cache in tmp_path."""
    monkeypatch.setenv(embeddings.ENV_MODEL_CACHE, str(tmp_path))
    calls: list[list[str]] = []

    def fake(texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        rows = np.array([[float(len(t)), float(sum(map(ord, t)) % 97), 1.0] + [0.0] * (embeddings.DIM - 3)
                         for t in texts], dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    monkeypatch.setattr(embeddings, "embed", fake)
    return calls


def test_a_later_process_encodes_only_what_is_new(counted: list[list[str]]) -> None:
    first = vector_cache.cached_embed(["gpu memory: ECC", "network: link flap"], "t1")
    assert counted == [["gpu memory: ECC", "network: link flap"]]
    again = vector_cache.cached_embed(["network: link flap", "gpu memory: ECC", "power: PSU"], "t1")
    assert counted[1:] == [["power: PSU"]]  # only the new text
    assert np.array_equal(again[0], first[1]) and np.array_equal(again[1], first[0])
    vector_cache.cached_embed(["gpu memory: ECC"], "t2")  # another scope (taxonomy) has its own file
    assert counted[2:] == [["gpu memory: ECC"]]


def test_a_broken_file_is_encoded_again(counted: list[list[str]]) -> None:
    vector_cache.cached_embed(["a text"], "t")
    vector_cache.cache_file("t").write_bytes(b"not a numpy file")
    assert vector_cache.cached_embed(["a text"], "t").shape == (1, embeddings.DIM)
    assert counted == [["a text"], ["a text"]]


def test_an_unwritable_cache_still_answers(counted: list[list[str]], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(embeddings.ENV_MODEL_CACHE, str(blocker / "models"))  # a path under a file: never a dir
    assert vector_cache.cached_embed(["x", "y"], "t").shape == (2, embeddings.DIM)
    assert vector_cache.cached_embed(["x"], "t").shape == (1, embeddings.DIM)
    assert counted == [["x", "y"], ["x"]]


def test_the_reasoner_gets_the_same_similarities_from_the_cache(counted: list[list[str]],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    taxonomy = load_taxonomy()
    labels = [c.label for c in taxonomy.children()]
    summary = IncidentSummary(title="t", query="Xid 48 double bit ECC error on GPU 3", text="Xid 48")

    plain = OfflineReasoner(taxonomy, embed=embeddings.embed)  # the fake, without the cache
    expected = plain.similarity(summary, labels)
    first = OfflineReasoner(taxonomy).similarity(summary, labels)  # the default: through the cache
    stored = len(counted)
    second = OfflineReasoner(taxonomy).similarity(summary, labels)
    assert first == pytest.approx(expected, abs=1e-6) and second == pytest.approx(expected, abs=1e-6)
    assert all(len(call) == 1 for call in counted[stored:])  # the second process encoded only its query
    assert [node_text(taxonomy, lb) for lb in labels] in counted
