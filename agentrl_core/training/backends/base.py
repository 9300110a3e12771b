"""The TrainBackend protocol: what the GRPO and SFT loops call to apply gradients."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agentrl_core.errors import AgentRLError


@runtime_checkable
class TrainBackend(Protocol):
    """Backward, clipped optimizer step, learning rate and checkpoint state of one model.

    One optimizer step is: `zero_grad()` (once, or after the previous `step()`), then
    `backward(loss)` once per micro-batch (gradients accumulate; each loss is already normalised
    by the global batch, the backend never rescales it), then `step()`, which clips the global
    gradient norm, updates the weights, advances the schedule, clears the gradients and returns
    the norm before clipping, ||g||_2 = sqrt(sum_p ||g_p||^2).

    `module` is what the loop calls forward on: the model itself for plain torch, the DeepSpeed
    engine (which wraps the model and casts inputs) for DeepSpeed; `model` is always the bare
    Hugging Face model (its config, `generate`, parameters). `forward_module` is what the
    log-prob forward of a training step must use: `model` where that gives correct gradients
    (plain torch, ZeRO-2: it keeps `token_logprobs`' head-on-targets-only path), the engine where
    only its own forward does (ZeRO-3). `named_weights()` yields the full
    (unsharded) tensors by Hugging Face name, one at a time, for weight sync to a rollout engine.
    """

    @property
    def module(self) -> Any: ...

    @property
    def model(self) -> Any: ...

    @property
    def forward_module(self) -> Any: ...

    def backward(self, loss: Any) -> None: ...

    def step(self) -> float: ...

    def zero_grad(self) -> None: ...

    @property
    def lr(self) -> float: ...

    @property
    def steps_done(self) -> int: ...

    def save(self, folder: Path, step: int, client_state: dict[str, Any] | None = None) -> Path: ...

    def load(self, folder: Path) -> dict[str, Any]: ...

    def named_weights(self) -> Iterator[tuple[str, Any]]: ...


class BackendUnavailableError(AgentRLError, RuntimeError):
    """The configured training backend cannot run here (library missing, no GPU): the message says what to do."""
