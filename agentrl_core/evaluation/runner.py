"""Batch evaluation of one model on held-out tasks: k seeded samples per task, summarised."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import torch

from agentrl_core.config import EvalConfig
from agentrl_core.envs import EnvClient, RemoteEnv
from agentrl_core.evaluation.metrics import EpisodeResult, EvalSummary, summarize
from agentrl_core.models import load_model, load_tokenizer, resolve_model
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import EpisodeSpec, HFEngine, LoopLimits, Trajectory, run_episodes, write_trajectories

ProgressCallback = Callable[[int, int], None]


def episode_results(trajs: Sequence[Trajectory]) -> list[EpisodeResult]:
    """The evaluation view of trajectories."""
    return [EpisodeResult(task_id=t.task_id, sample=t.sample, reward=t.reward, success=t.success,
                          steps=t.num_turns, error=t.error) for t in trajs]


def _turn_progress(on_progress: ProgressCallback | None, sample: int, k: int, max_turns: int):
    """Progress in turns played: (sample · max_turns + turn + 1) of (k · max_turns)."""
    if on_progress is None:
        return None
    return lambda turn, _live: on_progress(sample * max_turns + turn + 1, k * max_turns)


def evaluate_model(
    model: str | Path, *, env_name: str, env_url: str, cfg: EvalConfig, n_tasks: int, max_turns: int,
    max_context_tokens: int = 2048, dtype: str = "float32", autocast: str = "float32", out_dir: Path | None = None,
    on_progress: ProgressCallback | None = None,
) -> EvalSummary:
    """Play the first `n_tasks` test tasks k times each (sample j with seed cfg.seed + j).

    Trajectories go to `out_dir/trajectories.parquet` when `out_dir` is given.
    """
    path = resolve_model(str(model))
    policy, tokenizer = load_model(path, dtype=dtype), load_tokenizer(path)
    engine = HFEngine(policy, tokenizer, max_batch=cfg.batch_size, autocast=autocast)
    chat = ChatFormat(tokenizer)
    limits = LoopLimits(max_turns, max_context_tokens)
    trajs: list[Trajectory] = []
    with EnvClient(env_url) as client, torch.no_grad():
        task_ids = client.task_ids(env_name, "test")[:n_tasks]
        for j in range(cfg.k):
            specs = [EpisodeSpec(task_id=t, group=g, sample=j) for g, t in enumerate(task_ids)]
            turn_done = _turn_progress(on_progress, j, cfg.k, max_turns)
            trajs += run_episodes(engine, chat, lambda: RemoteEnv(client, env_name), specs, cfg.sampling, limits,
                                  seed=cfg.seed + j, on_turn=turn_done)
            if on_progress is not None:
                on_progress((j + 1) * max_turns, cfg.k * max_turns)
    if out_dir is not None:
        write_trajectories(Path(out_dir) / "trajectories.parquet", trajs, model=str(model))
    return summarize(episode_results(trajs))
