"""Validation during training (verl's test_freq): held-out success every N steps, and the best checkpoint kept.

The validation tasks are the test split's tasks right after the final evaluation's
(`env.test_tasks` or `env.test_ids`), so picking the best checkpoint never peeks at the tasks
it is finally scored on. The policy plays them greedily (the evaluation's sampling) through the
rollout engine itself; the result is logged as val/* metrics of the step. With
`trainer.export_best` the checkpoint with the highest validation success is kept in
`<stage>/best/` (our checkpoint layout, written atomically); `best.json` beside it says which
step it is, so a resumed run goes on comparing against it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from agentrl_core.atomic_file import write_text_atomic
from agentrl_core.config import RecipeConfig
from agentrl_core.envs import EnvClient
from agentrl_core.errors import ConfigError
from agentrl_core.evaluation.metrics import summarize
from agentrl_core.evaluation.runner import episode_results, play_eval_episodes
from agentrl_core.rollout import LoopLimits
from agentrl_core.tasksets import resolve_task_ids

log = logging.getLogger(__name__)

BEST_DIR = "best"
"""Sub-folder of the stage holding the best validated checkpoint."""


def validation_ids(cfg: RecipeConfig, client: EnvClient) -> list[int]:
    """`trainer.val_tasks` test-split tasks that the final evaluation does not use (first ones first)."""
    scored = set(resolve_task_ids(cfg.env, client, "test"))
    rest = [t for t in client.task_ids(cfg.env.name, "test") if t not in scored]
    if not rest:
        raise ConfigError(f"trainer.val_every needs test tasks the final evaluation does not use, but "
                          f"{cfg.env.name!r}'s test split has none left; lower env.test_tasks or set trainer.val_every=0")
    if len(rest) < cfg.trainer.val_tasks:
        log.warning("validation uses %d tasks (trainer.val_tasks=%d): the test split has no more beside the "
                    "evaluation's", len(rest), cfg.trainer.val_tasks)
    return rest[:cfg.trainer.val_tasks]


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

    def keep(self, session: Any, step: int, metrics: dict[str, float]) -> Path:
        """Save the session's model as the best checkpoint (replacing the previous best) and record it."""
        path = session.save_best(self.root, step, {"validation": metrics})
        self.step, self.success = step, metrics["val/success_rate"]
        write_text_atomic(self.record, json.dumps({"step": step, "checkpoint": str(path), **metrics}))
        log.info("best validation success %.3f at step %d: kept %s", self.success, step, path)
        return path
