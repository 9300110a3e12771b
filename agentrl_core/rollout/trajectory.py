"""The trajectory record: exact token ids, loss mask, engine log-probs, rewards, outcome."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any


def observation_key(text: str) -> str:
    """A short key of an observation's exact text (16 hex digits of BLAKE2b): equal texts, equal keys.

    Steps are matched on it (GiGPO's anchor states), so it must be exact, never normalised; a hash
    keeps the parquet files small and leaves the text itself to `messages`.
    """
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


@dataclass
class Trajectory:
    """One multi-turn episode as the engine saw it, token for token.

    `token_ids` is the whole sequence (prompt, model turns, environment turns) exactly as fed to
    and produced by the engine; it is never re-tokenized from text. `loss_mask[i]` is 1 for a
    token the model generated and 0 for prompt/environment tokens; `logprobs[i]` is the engine's
    log-probability of a generated token (0.0 where `loss_mask` is 0). `prompt_len` tokens open
    the sequence. `turn_rewards` holds the environment's reward per step; `reward` is the final
    scalar the advantage estimator sees. `error` is set (and `reward` is meaningless) when the
    environment or engine failed: such a trajectory is excluded from training, not scored 0.

    Per model turn k (both lists grow with `record_turn`): `action_spans[k] = [start, end)`, the
    positions in `token_ids` of the tokens the model generated in turn k, and `observation_keys[k]`,
    the `observation_key` of the environment observation that action was taken in (the reset's
    observation for turn 0, without any appended experience context; the previous step's after).
    Step-level estimators (GiGPO) read them; files written before they existed read back empty.
    """

    task_id: int
    env: str
    group: int
    sample: int
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    prompt_len: int = 0
    turn_rewards: list[float] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    terminated: bool = False
    truncated: bool = False
    num_turns: int = 0
    error: str | None = None
    messages: list[dict[str, str]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    action_spans: list[list[int]] = field(default_factory=list)
    observation_keys: list[str] = field(default_factory=list)

    def append(self, ids: list[int], *, trainable: bool, logprobs: list[float] | None = None) -> None:
        """Append tokens; model tokens carry their engine log-probs, others get 0.0."""
        self.token_ids.extend(ids)
        self.loss_mask.extend([1 if trainable else 0] * len(ids))
        if trainable and logprobs is not None:
            if len(logprobs) != len(ids):
                raise ValueError(f"{len(ids)} tokens but {len(logprobs)} log-probs")
            self.logprobs.extend(float(x) for x in logprobs)
        else:
            self.logprobs.extend([0.0] * len(ids))

    def record_turn(self, start: int, observation_key: str) -> None:
        """Record that the tokens from `start` to the current end are turn k's action, taken in the
        observation keyed `observation_key` (call it right after appending the action's tokens)."""
        self.action_spans.append([start, len(self.token_ids)])
        self.observation_keys.append(observation_key)

    def shift_spans(self, delta: int) -> None:
        """Move every action span by `delta` positions (the prompt before them was replaced by one
        `delta` tokens longer)."""
        self.action_spans = [[start + delta, end + delta] for start, end in self.action_spans]

    @property
    def response_tokens(self) -> int:
        """Number of tokens the model generated."""
        return sum(self.loss_mask)

    def to_row(self) -> dict[str, Any]:
        """A flat dict for parquet."""
        row = asdict(self)
        row["extra"] = dict(self.extra)
        return row
