"""The echo-word environment, a centred-reward estimator, a REINFORCE loss and an HF-backed engine, registered
with agentrl's own decorators when agentrl loads this plugin (entry point `agentrl.plugins: echo`)."""

from __future__ import annotations

import os
from typing import Any

import torch

from agentrl_core.algorithms import register_advantage_estimator, register_policy_loss, vanilla_pg_loss
from agentrl_core.engine_registry import register_engine
from agentrl_core.envs import Env, StepResult, register

WORDS = ("apple", "river", "stone", "cloud", "maple", "tiger", "piano", "lemon")
CALLS_FILE = "ECHO_PLUGIN_CALLS"
"""An environment variable naming a file each plugin function appends `<what> <pid>` to (tests read it)."""


def _note(what: str) -> None:
    path = os.environ.get(CALLS_FILE)
    if path:
        with open(path, "a") as f:
            f.write(f"{what} {os.getpid()}\n")


@register
class EchoWord(Env):
    """One turn: say the word of the task. Reward 1 when the reply contains it, else 0."""

    name = "echo-word"
    action_format = "the word, e.g. apple"
    system_prompt = "Reply with the word you are asked to say, and nothing else."
    splits = {"train": range(0, 800), "test": range(800, 880)}
    max_steps = 1

    def _reset(self, *, task_id: int, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        _note("env")
        self.word = WORDS[task_id % len(WORDS)]
        return f"Say the word: {self.word}", {}

    def _step(self, action: str) -> StepResult:
        success = self.word in action.lower()
        return StepResult("Correct." if success else "Wrong.", float(success), True, False, {"success": success})

    def expert_action(self) -> str:
        return self.word


@register_advantage_estimator("echo_centered", baseline="group")
def centered(rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor, cfg: Any) -> torch.Tensor:
    """A_i = r_i − mean of its group, on every response token."""
    _note("estimator")
    out = torch.zeros_like(rewards)
    for g in groups.unique():
        rows = groups == g
        out[rows] = rewards[rows] - rewards[rows].mean()
    return out[:, None] * mask


@register_policy_loss("echo_pg")
def echo_pg(logp, old_logp, advantages, mask, cfg):
    """REINFORCE, as agentrl's vanilla_pg."""
    _note("loss")
    return vanilla_pg_loss(logp, old_logp, advantages, mask, cfg)


@register_engine("echo-hf")
def build_engine(cfg: Any, model: Any, tokenizer: Any, **context: Any) -> Any:
    """agentrl's HF engine on the model it is given."""
    _note("engine")
    from agentrl_core.rollout import HFEngine

    return HFEngine(model, tokenizer, stop_token_ids=context.get("stop_token_ids", ()),
                    autocast=context.get("autocast", "float32"))
