"""The SQL store: dedupe by (env, content), cosine top-k with filters, persistence, dimension checks."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl_core.experience.store import ExperienceStore, safe_url
from agentrl_core.experience.summarise import ExperienceRecord


def unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


VECS = {"a": unit(1, 0, 0), "b": unit(1, 1, 0), "c": unit(0, 1, 0), "d": unit(-1, 0, 0), "q": unit(1, 0.2, 0)}


class DictEmbed:
    """Hand-made vectors by text; counts calls."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, texts):
        self.texts.extend(texts)
        return np.stack([VECS[t] for t in texts])


def rec(when: str, content: str, env: str = "household", score: float = 1.0) -> ExperienceRecord:
    return ExperienceRecord(env=env, task_id=None, when_to_use=when, content=content, score=score)


def test_dedupe_and_top_k_order(tmp_path):
    embed = DictEmbed()
    store = ExperienceStore(f"sqlite:///{tmp_path / 'x.db'}", embed)
    assert store.add([rec("a", "A"), rec("b", "B"), rec("c", "C"), rec("d", "D")]) == (4, 0)
    # same content (whitespace aside) in the same env is a duplicate; in another env it is not
    assert store.add([rec("a", " A "), rec("c", "C", env="alfworld")]) == (1, 1)
    assert embed.texts == ["a", "b", "c", "d", "c"]  # duplicates are never embedded
    hits = store.retrieve("q", k=3, env="household")
    # q = (1, .2, 0)/|.|: cos with a = .981, b = .832, c = .196, d = -.981
    assert [h.record.content for h in hits] == ["A", "B", "C"]
    np.testing.assert_allclose([h.similarity for h in hits], [0.98058, 0.83205, 0.19612], atol=1e-4)
    assert [h.record.content for h in store.retrieve("q", k=5)] == ["A", "B", "C", "C", "D"]
    assert [h.record.env for h in store.retrieve("q", k=5)][2:4] == ["household", "alfworld"]  # tie: older first
    assert store.counts_by_env() == {"alfworld": 1, "household": 4}


def test_score_filter_persistence_and_dimension_check(tmp_path):
    url = f"sqlite:///{tmp_path / 'y.db'}"
    store = ExperienceStore(url, DictEmbed())
    store.add([rec("a", "low", score=0.2), rec("b", "high", score=0.9)])
    assert [h.record.content for h in store.retrieve("q", k=3, min_score=0.5)] == ["high"]
    store.close()
    again = ExperienceStore(url, DictEmbed())  # vectors reloaded from the table
    assert len(again) == 2 and [h.record.content for h in again.retrieve("q", k=1)] == ["low"]
    assert again.add([rec("a", "low")]) == (0, 1)
    again.embed = lambda texts: np.ones((len(texts), 5), dtype=np.float32)
    with pytest.raises(ValueError, match="5-d vectors but the store"):
        again.add([rec("new", "new lesson")])
    assert ExperienceStore(f"sqlite:///{tmp_path / 'z.db'}", DictEmbed()).retrieve("q", k=2) == []


def test_safe_url_hides_passwords():
    assert safe_url("postgresql+psycopg://bob:s3cret@db:5432/x") == "postgresql+psycopg://bob:***@db:5432/x"
