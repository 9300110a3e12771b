"""Batch evaluation of one model on held-out tasks: k seeded samples per task, summarised."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from agentrl_core.config import EngineConfig, EvalConfig
from agentrl_core.env_service import EnvClient, RemoteEnv
from agentrl_core.envs.episode_metrics import EPISODE_METRICS
from agentrl_core.evaluation.metrics import EpisodeResult, EvalSummary, summarize
from agentrl_core.models import load_model, load_tokenizer, resolve_model
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import Engine, EpisodeSpec, LoopLimits, Trajectory, run_episodes, write_trajectories
from agentrl_core.rollout.engine_factory import make_engine
from agentrl_core.rollout.episode import INVALID_ACTIONS

ProgressCallback = Callable[[int, int], None]


INVALID_ACTION_RATE = "invalid_action_rate"
"""Episode metric the evaluation adds where the environment counts the commands it did not accept: the
episode's invalid commands / its turns (its mean over episodes weighs every episode alike, where training's
`invalid_action_rate` pools the turns of a step)."""


def episode_metrics(t: Trajectory) -> dict[str, float]:
    """The environment's episode metrics of `t`, plus its INVALID_ACTION_RATE where the environment counts
    invalid commands (Trajectory.extra["invalid_actions"]) and the episode took a turn."""
    metrics = dict(t.extra.get(EPISODE_METRICS, {}))
    if INVALID_ACTIONS in t.extra and t.num_turns and INVALID_ACTION_RATE not in metrics:
        metrics[INVALID_ACTION_RATE] = min(1.0, t.extra[INVALID_ACTIONS] / t.num_turns)
    return metrics


def episode_results(trajs: Sequence[Trajectory]) -> list[EpisodeResult]:
    """The evaluation view of trajectories."""
    return [EpisodeResult(task_id=t.task_id, sample=t.sample, reward=t.reward, success=t.success,
                          steps=t.num_turns, error=t.error, metrics=episode_metrics(t)) for t in trajs]


def _turn_progress(on_progress: ProgressCallback | None, sample: int, k: int, max_turns: int):
    """Progress in turns played: (sample · max_turns + turn + 1) of (k · max_turns)."""
    if on_progress is None:
        return None
    return lambda turn, _live: on_progress(sample * max_turns + turn + 1, k * max_turns)


def evaluate_model(
    model: str | Path, *, env_name: str, env_url: str, cfg: EvalConfig, n_tasks: int, max_turns: int,
    max_context_tokens: int = 2048, dtype: str = "float32", autocast: str = "float32", out_dir: Path | None = None,
    on_progress: ProgressCallback | None = None, task_ids: Sequence[int] | None = None,
    engine: EngineConfig | None = None, device: str = "cpu",
) -> EvalSummary:
    """Play the first `n_tasks` test tasks (or exactly `task_ids`) k times each (sample j with seed
    cfg.seed + j) with the engine `engine` describes (default: auto, the native engine where it runs the
    model; hf then plays cfg.batch_size episodes per batch). Trajectories go to
    `out_dir/trajectories.parquet` when `out_dir` is given. The model plays on `device` ("cpu", "cuda").
    """
    path = resolve_model(str(model))
    policy, tokenizer = load_model(path, dtype=dtype, device=device), load_tokenizer(path)
    engine_cfg = (engine or EngineConfig()).model_copy(update={"max_batch": cfg.batch_size})
    if engine_cfg.kind not in ("auto", "native", "hf"):
        engine_cfg = engine_cfg.model_copy(update={"kind": "auto"})  # the model is loaded here, in this process
    engine = make_engine(engine_cfg, policy, tokenizer, autocast=autocast)
    trajs = play_eval_episodes(engine, tokenizer, env_name=env_name, env_url=env_url, cfg=cfg, n_tasks=n_tasks,
                               limits=LoopLimits(max_turns, max_context_tokens), on_progress=on_progress,
                               task_ids=task_ids)
    if out_dir is not None:
        write_trajectories(Path(out_dir) / "trajectories.parquet", trajs, model=str(model))
    return summarize(episode_results(trajs))


def play_eval_episodes(
    engine: Engine, tokenizer: Any, *, env_name: str, env_url: str, cfg: EvalConfig, n_tasks: int,
    limits: LoopLimits, split: str = "test", env_seed: int | None = None,
    on_progress: ProgressCallback | None = None, task_ids: Sequence[int] | None = None,
) -> list[Trajectory]:
    """Play the first `n_tasks` tasks of `split` (or exactly `task_ids`) k = cfg.k times each through any engine.

    Sample j samples with seed cfg.seed + j; every sample of a task resets the environment with
    the same `env_seed`, so the k samples are k attempts at one task (what pass@k assumes). At most
    cfg.batch_size episodes, and env sessions, are open at once.
    """
    chat = ChatFormat(tokenizer)
    trajs: list[Trajectory] = []
    with EnvClient(env_url) as client, torch.no_grad():
        task_ids = list(task_ids) if task_ids is not None else client.task_ids(env_name, split)[:n_tasks]
        if not task_ids:
            raise ValueError(f"environment {env_name!r} has no tasks in split {split!r} at {env_url}")
        for j in range(cfg.k):
            specs = [EpisodeSpec(task_id=t, group=g, sample=j, seed=env_seed) for g, t in enumerate(task_ids)]
            turn_done = _turn_progress(on_progress, j, cfg.k, limits.max_turns)
            trajs += run_episodes(engine, chat, lambda: RemoteEnv(client, env_name), specs, cfg.sampling, limits,
                                  seed=cfg.seed + j, on_turn=turn_done, max_live=cfg.batch_size)
            if on_progress is not None:
                on_progress((j + 1) * limits.max_turns, cfg.k * limits.max_turns)
    return trajs
