"""Validation during training (verl's test_freq): held-out success every N steps, and the best checkpoint kept.

The validation tasks come from the training range and are never trained on: the last
`trainer.val_tasks` ids of the env's train split that the run's training tasks (`env.train_tasks`,
`env.train_ids` or the task file) leave out. Settings and the best checkpoint are chosen on them,
never on the test split, which is scored once, by the final evaluation. The policy plays them
greedily (the evaluation's sampling) through the rollout engine itself; the result is logged as val/* metrics of the step. With
`trainer.export_best` the checkpoint with the highest validation success is kept in
`<stage>/best/` (our checkpoint layout, written atomically); `best.json` beside it says which
step it is, so a resumed run goes on comparing against it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrl_core.system.atomic_file import write_text_atomic
from agentrl_core.config import RecipeConfig
from agentrl_core.env_service import EnvClient
from agentrl_core.errors import ConfigError
from agentrl_core.evaluation.metrics import summarize
from agentrl_core.evaluation.runner import episode_results, play_eval_episodes
from agentrl_core.rollout import EpisodeSpec, LoopLimits, Trajectory
from agentrl_core.tasksets import resolve_task_ids

log = logging.getLogger(__name__)

BEST_DIR = "best"
"""Sub-folder of the stage holding the best validated checkpoint."""


def validation_ids(cfg: RecipeConfig, client: EnvClient) -> list[int]:
    """The last `trainer.val_tasks` train-split ids the run does not train on (in split order)."""
    return held_back_ids(client.task_ids(cfg.env.name, "train"), resolve_task_ids(cfg.env, client, "train"),
                         cfg.trainer.val_tasks, cfg.env.name)


def held_back_ids(train_split: list[int], trained: list[int], n: int, env: str) -> list[int]:
    """The last `n` ids of `train_split` not in `trained`: a validation split from the training range."""
    used = set(trained)
    rest = [t for t in train_split if t not in used]
    if not rest:
        raise ConfigError(f"trainer.val_every needs training-range tasks the run does not train on, but the run "
                          f"trains on all of {env!r}'s {len(train_split)} train ids; lower env.train_tasks "
                          "(or narrow env.train_ids) or set trainer.val_every=0")
    if len(rest) < n:
        log.warning("validation uses %d tasks (trainer.val_tasks=%d): the train split has no more the run "
                    "does not train on", len(rest), n)
    return rest[-n:]


def is_due(cfg: RecipeConfig, step: int) -> bool:
    """Whether to validate after `step` optimizer steps (0 = before training; the last step always)."""
    every = cfg.trainer.val_every
    return every > 0 and (step % every == 0 or step == cfg.trainer.steps)


def validate(engine: Any, tokenizer: Any, cfg: RecipeConfig, env_url: str, ids: list[int]) -> dict[str, float]:
    """val/success_rate, its 95% interval, val/reward_mean and val/n_tasks of the engine's current policy."""
    eval_cfg = cfg.eval.model_copy(update={"k": 1})
    trajs = play_eval_episodes(engine, tokenizer, env_name=cfg.env.name, env_url=env_url, cfg=eval_cfg,
                               n_tasks=len(ids), limits=LoopLimits(cfg.env.max_turns, cfg.rollout.max_context_tokens),
                               task_ids=ids)
    return validation_metrics(trajs)


def validation_specs(ids: Sequence[int]) -> list[EpisodeSpec]:
    """One greedy episode per validation task, as the evaluation plays them (play_eval_episodes with k = 1)."""
    return [EpisodeSpec(task_id=t, group=g, sample=0) for g, t in enumerate(ids)]


def validation_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """The val/* metrics of the validation episodes."""
    s = summarize(episode_results(trajs))
    out = {"val/success_rate": s.success_rate, "val/success_low": s.success_low, "val/success_high": s.success_high,
           "val/reward_mean": s.mean_reward, "val/n_tasks": float(s.n_scored_tasks), "val/errors": float(s.n_errors)}
    return {k: float(v) for k, v in out.items() if v is not None}


def best_checkpoint(stage_dir: Path) -> Path | None:
    """The best validated checkpoint of a stage (`trainer.export_best`), or None when none was kept."""
    from agentrl_core.checkpoints import latest_checkpoint

    root = Path(stage_dir) / BEST_DIR
    return latest_checkpoint(root) if root.is_dir() else None


class BestCheckpoint:
    """The best validation success so far, and where its checkpoint is (`<stage>/best/step_N`)."""

    def __init__(self, stage_dir: Path) -> None:
        self.root = Path(stage_dir) / BEST_DIR
        self.record = self.root.parent / "best.json"
        saved = json.loads(self.record.read_text()) if self.record.is_file() else {}
        self.step: int | None = saved.get("step")
        self.success: float = saved.get("val/success_rate", float("-inf"))

    def improves(self, metrics: dict[str, float]) -> bool:
        """Strictly better validation success than the best so far (ties keep the earlier checkpoint)."""
        return metrics.get("val/success_rate", float("-inf")) > self.success

    def keep(self, session: Any, step: int, metrics: dict[str, float], record: bool = True) -> Path:
        """Save the session's model as the best checkpoint (replacing the previous best) and record it in
        best.json (`record` False: a trainer rank other than 0, which only takes part in the save)."""
        path = session.save_best(self.root, step, {"validation": metrics})
        self.step, self.success = step, metrics["val/success_rate"]
        if record:
            write_text_atomic(self.record, json.dumps({"step": step, "checkpoint": str(path), **metrics}))
        log.info("best validation success %.3f at step %d: kept %s", self.success, step, path)
        return path
