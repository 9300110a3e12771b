"""Do a recipe's opening prompts fit its context? The token length of every task's first prompt.

An episode opens with the chat template rendered over [system prompt, first observation] and is cut
off when its context would reach `rollout.max_context_tokens` (the longest row the memory plan sizes
training for). The model only replies to a context below that limit, so an opening prompt at or over
it leaves no room for a reply and the rollout refuses it (errors.PromptTooLongError); this check
finds such prompts before a run starts, with the rollout's rule:

    fits  <=>  max_t len(prompt_t) < max_context_tokens,  t over the split's tasks

and the room the longest leaves for the episode's replies and observations (max_context_tokens - max_t
len(prompt_t); a multi-turn task wants several turns of it). The prompts are rendered with the
recipe's model's chat template from local environments built with the recipe's env.kwargs (no env
server):

    .venv/bin/python -m agentrl_core.rollout.prompt_fit --recipe bfcl_grpo [overrides ...]

Experience context (experience.*) is appended at run time and not counted here.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Sequence

from agentrl_core.envs.base import Env
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout.episode import opening_messages
from agentrl_core.tasksets.resolve import resolve_task_ids


@dataclass(frozen=True)
class PromptFit:
    """The opening prompts of one split: how long, and how many leave no room for a reply."""

    split: str
    n: int
    longest: int
    longest_task: int
    median: int
    limit: int
    over: int
    """Tasks whose opening prompt is `limit` tokens or longer (the rollout refuses them)."""

    @property
    def fits(self) -> bool:
        return self.over == 0

    def line(self) -> str:
        verdict = (f"fit, {self.limit - self.longest} tokens left for replies and observations" if self.fits
                   else f"{self.over} do not fit")
        return (f"{self.split:5s} {self.n:5d} tasks: opening prompt median {self.median}, longest {self.longest} "
                f"tokens (task {self.longest_task}); against max_context_tokens={self.limit}: {verdict}")


def opening_prompt_len(env: Env, chat: ChatFormat, task_id: int) -> int:
    """Tokens of task `task_id`'s opening prompt: [system, first observation] and the generation prompt."""
    obs, _ = env.reset(task_id=task_id)
    return len(chat.prompt_ids(opening_messages(env, obs)))


def measure(env: Env, chat: ChatFormat, split: str, ids: Sequence[int], limit: int) -> PromptFit:
    """The fit of the opening prompts of `ids` (PromptFit; the module docstring's rule)."""
    if not ids:
        raise ValueError(f"the {split} split has no tasks to measure")
    lengths = {task_id: opening_prompt_len(env, chat, task_id) for task_id in ids}
    longest_task = max(lengths, key=lengths.__getitem__)
    ordered = sorted(lengths.values())
    return PromptFit(split, len(ids), lengths[longest_task], longest_task, ordered[len(ordered) // 2], limit,
                     sum(n >= limit for n in ordered))


class _Listing:
    """A local env's task listing in the shape tasksets.resolve reads from an env server's client."""

    def __init__(self, env: Env) -> None:
        self.env = env

    def task_ids(self, name: str, split: str) -> list[int]:
        return list(self.env.task_ids(split))


def recipe_fit(recipe: str, overrides: Sequence[str] = (), splits: Sequence[str] = ("train", "test"),
               limit_tasks: int | None = None) -> list[PromptFit]:
    """The fit of a recipe's opening prompts on each split (the ids a run would use, tasksets.resolve; the first
    `limit_tasks` of them, all by default)."""
    from agentrl_core.envs.registry import make
    from agentrl_core.models.loading import load_tokenizer, resolve_model
    from agentrl_core.recipes import load_recipe

    cfg = load_recipe(recipe, overrides)
    chat = ChatFormat(load_tokenizer(resolve_model(cfg.model.name)))
    env = make(cfg.env.name, **cfg.env.kwargs)
    try:
        return [measure(env, chat, split, resolve_task_ids(cfg.env, _Listing(env), split)[:limit_tasks],
                        cfg.rollout.max_context_tokens) for split in splits]
    finally:
        env.close()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", required=True)
    p.add_argument("--tasks", type=int, default=None, help="measure the first N ids of each split (default: all)")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    rows = recipe_fit(args.recipe, args.overrides, limit_tasks=args.tasks)
    for row in rows:
        print(row.line())
    return 0 if all(r.fits for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
