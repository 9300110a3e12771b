"""The MiniLM embedder: unit float32 vectors, paraphrases closer than unrelated text, one model call per text."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl_core.experience.embed import DIM, MiniLMEmbedder


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def test_paraphrases_are_closer_than_unrelated_text(embedder: MiniLMEmbedder):
    v = embedder(["put a cool cup on the countertop", "place a chilled mug on the counter",
                  "the stock market fell sharply today"])
    assert v.shape == (3, DIM) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    para, unrelated = float(v[0] @ v[1]), float(v[0] @ v[2])
    assert para > 0.5 and unrelated < 0.2 and para > unrelated + 0.4


def test_each_text_is_computed_once(embedder: MiniLMEmbedder):
    before = embedder.computed
    a = embedder(["heat an egg", "heat an egg", "wash a plate"])
    assert embedder.computed == before + 2
    b = embedder(["wash a plate", "heat an egg"])
    assert embedder.computed == before + 2  # both cached
    np.testing.assert_array_equal(b, a[[2, 0]])
    assert embedder([]).shape == (0, DIM)
