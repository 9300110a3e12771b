"""The rollout phase of a GRPO step: its tasks, its rounds of episodes (with DAPO's refills), what trains, its metrics.

Executor-neutral: a round is played by `Executor.play(specs, seed)` wherever the executor plays it.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Sequence

import torch

from agentrl_core import algorithms as alg
from agentrl_core.config import RecipeConfig
from agentrl_core.experience.rollout_hooks import experience_specs
from agentrl_core.grpo.executor import Executor
from agentrl_core.rollout import EpisodeSpec, Trajectory
from agentrl_core.envs.episode_metrics import EPISODE_METRICS
from agentrl_core.rollout.episode import INVALID_ACTIONS
from agentrl_core.rollout.r3l import r3l_metrics
from agentrl_core.training.action_diversity import action_diversity


def step_tasks(train_ids: Sequence[int], step: int, cfg: RecipeConfig, round_: int = 0, k: int | None = None) -> list[int]:
    """The tasks of one step: a deterministic draw from (seed, step[, refill round]), so a resumed run sees the same."""
    rng = random.Random(cfg.trainer.seed * 1_000_003 + step + round_ * 7_777_777)
    return rng.sample(list(train_ids), min(k or cfg.rollout.tasks_per_step, len(train_ids)))


def round_specs(tasks: Sequence[int], step: int, round_: int, cfg: RecipeConfig) -> tuple[list[EpisodeSpec], int]:
    """(specs, sampling seed) of one rollout round: `group_size` samples of each task, group ids unique
    across refill rounds, the seed a function of (trainer seed, step, round) so a resumed run replays it."""
    base = round_ * 1_000_000
    specs = [EpisodeSpec(task_id=t, group=base + g, sample=s)
             for g, t in enumerate(tasks) for s in range(cfg.rollout.group_size)]
    return specs, cfg.trainer.seed * 7919 + step * 104_729 + round_ * 15_485_863


def _rollout_round(executor: Executor, env_factory: Callable[[], Any], tasks: Sequence[int], step: int, round_: int,
                   cfg: RecipeConfig) -> list[Trajectory]:
    """Roll out `group_size` samples of each task (plus their R3L retries when algorithm.r3l_retry: the executor
    plays them); group ids are unique across refill rounds."""
    specs, seed = round_specs(tasks, step, round_, cfg)
    if cfg.experience.enabled:  # mixed rollout: the chosen samples get retrieved experience in their first message
        specs = experience_specs(specs, env_factory, step, round_, cfg)
    return executor.play(specs, seed, step)


def usable_trajectories(trajs: Sequence[Trajectory]) -> list[Trajectory]:
    """Trajectories that can train: no env/engine error and at least one model token."""
    return [t for t in trajs if t.error is None and t.response_tokens > 0]


def with_spread(trajs: Sequence[Trajectory]) -> list[bool]:
    """Per trajectory: does its group's reward vary (`algorithms.group_has_spread` on the float32 rewards the
    update computes advantages from)? The one predicate of DAPO's filter and the groups_with_signal metric."""
    if not trajs:
        return []
    return alg.dynamic_sampling_keep(torch.tensor([t.reward for t in trajs], dtype=torch.float32),
                                     torch.tensor([t.group for t in trajs], dtype=torch.long)).tolist()


def _informative(trajs: Sequence[Trajectory]) -> list[Trajectory]:
    """DAPO's filter: the samples of groups whose rewards are not all equal (errored samples dropped)."""
    ok = usable_trajectories(trajs)
    return [t for t, k in zip(ok, with_spread(ok)) if k]


def rollout_batch(executor: Executor, env_factory: Callable[[], Any], train_ids: Sequence[int], step: int,
                  cfg: RecipeConfig) -> tuple[list[Trajectory], list[Trajectory], int]:
    """(every trajectory rolled out, the ones to train on, rounds used).

    Without dynamic sampling one round, training on every usable trajectory. With it (DAPO), groups
    whose rewards are all equal are dropped and more tasks are rolled out until tasks_per_step
    informative groups are kept or dynamic_sampling_max_rounds is reached; then whole groups are
    kept, at most tasks_per_step of them. Then, with algorithm.rollout_filter_ratio < 1 (RAGEN), only
    that share of the groups, those with the largest reward std, trains.
    """
    every, train, rounds = _rounds(executor, env_factory, train_ids, step, cfg)
    return every, top_variance_groups(train, cfg.algorithm.rollout_filter_ratio), rounds


def top_variance_groups(trajs: Sequence[Trajectory], ratio: float) -> list[Trajectory]:
    """RAGEN's filter (algorithms.variance_filter): the samples of the groups with the largest reward std."""
    if ratio >= 1.0 or not trajs:
        return list(trajs)
    keep = alg.top_variance_keep(torch.tensor([t.reward for t in trajs], dtype=torch.float32),
                                 torch.tensor([t.group for t in trajs], dtype=torch.long), ratio)
    return [t for t, k in zip(trajs, keep.tolist()) if k]


def _rounds(executor: Executor, env_factory: Callable[[], Any], train_ids: Sequence[int], step: int,
            cfg: RecipeConfig) -> tuple[list[Trajectory], list[Trajectory], int]:
    """(every trajectory, the usable ones DAPO's filter keeps, rounds): one round without dynamic sampling."""
    tasks = step_tasks(train_ids, step, cfg)
    every = _rollout_round(executor, env_factory, tasks, step, 0, cfg)
    if not cfg.algorithm.dynamic_sampling:
        return every, usable_trajectories(every), 1
    kept, rounds = _informative(every), 1
    while rounds < cfg.algorithm.dynamic_sampling_max_rounds:
        missing = alg.groups_still_needed(torch.tensor([t.group for t in kept], dtype=torch.long), len(tasks))
        if missing == 0:
            break
        extra = _rollout_round(executor, env_factory, step_tasks(train_ids, step, cfg, rounds, missing), step, rounds,
                               cfg)
        every, kept, rounds = every + extra, kept + _informative(extra), rounds + 1
    chosen = sorted({t.group for t in kept})[: len(tasks)]
    return every, [t for t in kept if t.group in set(chosen)], rounds


def rollout_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Reward, success, length and signal statistics of one batch (errors excluded, counted), how diversely
    groups act in shared states (training.action_diversity); r3l/* with R3L."""
    ok = [t for t in trajs if t.error is None]
    n = max(1, len(ok))
    spread = {t.group: k for t, k in zip(ok, with_spread(ok))}
    return {
        "reward_mean": sum(t.reward for t in ok) / n,
        "success_rate": sum(t.success for t in ok) / n,
        "response_length": sum(t.response_tokens for t in ok) / n,
        "episode_tokens": sum(len(t.token_ids) for t in ok) / n,
        "turns_mean": sum(t.num_turns for t in ok) / n,
        "truncated_rate": sum(t.truncated for t in ok) / n,
        "errors": float(len(trajs) - len(ok)),
        "groups_with_signal": sum(spread.values()) / max(1, len(spread)),
    } | action_diversity(ok) | invalid_action_rate(ok) | episode_metric_means(ok) | r3l_metrics(trajs)


def episode_metric_means(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """{"episode/<m>": the mean of episode metric m (envs.episode_metrics) over the episodes reporting it}."""
    values: dict[str, list[float]] = {}
    for t in trajs:
        for name, share in t.extra.get(EPISODE_METRICS, {}).items():
            values.setdefault(name, []).append(share)
    return {f"episode/{name}": sum(v) / len(v) for name, v in sorted(values.items())}


def invalid_action_rate(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """{"invalid_action_rate": commands the environment did not accept / turns}, over the episodes whose
    environment reports it (Trajectory.extra["invalid_actions"]); {} when none does."""
    counted = [t for t in trajs if INVALID_ACTIONS in t.extra]
    turns = sum(t.num_turns for t in counted)
    if not counted or not turns:
        return {}
    return {"invalid_action_rate": sum(t.extra[INVALID_ACTIONS] for t in counted) / turns}
