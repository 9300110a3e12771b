"""What every rollout engine returns (`Generation`) and what the agent loop needs of one (`Engine`).

The engines: `native/engine.py` (ours: KV caches kept across turns), `hf_engine.py` (transformers'
`generate`), `vllm_engine.py`, `openai_engine.py` (any OpenAI-compatible server); `engine_factory.py` builds
the one `rollout.engine` names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from agentrl_core.config import SamplingConfig


@dataclass
class Generation:
    """One sampled reply: the new token ids, their log-probs and why generation stopped.

    `finish_reason` is "stop" when the reply ended with a stop token (kept in `token_ids`),
    "length" when `max_new_tokens` ran out. `weight_versions` is (first, last): the policy versions
    of the weights that generated its first and its last token, where weights change while a reply is
    generated (asynchronous training with in-flight weight updates); None where nobody counts them.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    weight_versions: tuple[int, int] | None = None


class Engine(Protocol):
    """What the agent loop needs from an engine: token ids in, token ids and log-probs out."""

    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig, seed: int) -> list[Generation]:
        ...
