"""Fixtures of the experience tests: the chat format, one real pool process, scripted engines."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl_core.models import load_tokenizer
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import Generation


@pytest.fixture(scope="session")
def exp_chat(embedded_model_path: Path) -> ChatFormat:
    return ChatFormat(load_tokenizer(embedded_model_path))


@pytest.fixture(scope="session")
def pool(tmp_path_factory: pytest.TempPathFactory):
    """One real experience pool process on 127.0.0.1 (SQLite in tmp); tests use distinct env names."""
    from agentrl_core.experience.launcher import launch_experience_pool

    db = tmp_path_factory.mktemp("pool") / "experience.db"
    server = launch_experience_pool(f"sqlite:///{db}")
    try:
        yield server
    finally:
        server.stop()


class ScriptedEngine:
    """Replies with fixed texts, one per turn (the same for every prompt of a batch); log-prob -0.5."""

    def __init__(self, chat: ChatFormat, replies: list[str]) -> None:
        self.chat, self.replies, self.calls = chat, replies, 0
        self.prompts: list[list[int]] = []

    def generate(self, prompts, sampling, seed):
        text = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        self.prompts.extend(list(p) for p in prompts)
        ids = self.chat.assistant_ids(text)
        return [Generation(list(ids), [-0.5] * len(ids), "stop") for _ in prompts]
