"""The experience steps around a GRPO rollout: retrieve into some specs before, summarise and strip after."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from agentrl_core.config import ExperienceConfig, RecipeConfig
from agentrl_core.errors import ConfigError
from agentrl_core.experience.client import ExperienceClient
from agentrl_core.experience.mixing import (
    choose_samples,
    experience_metrics,
    first_observations,
    original_messages,
    render_block,
    strip_context,
    with_experience,
)
from agentrl_core.experience.summarise import ModelSummariser
from agentrl_core.rollout.agent_loop import EpisodeSpec
from agentrl_core.rollout.trajectory import Trajectory


def pool_client(cfg: ExperienceConfig) -> ExperienceClient:
    """A client of the configured pool; ConfigError when no URL is set."""
    if not cfg.url:
        raise ConfigError("experience.enabled is true but experience.url is not set: start a pool "
                          "(agentrl_core.experience.launcher.launch_experience_pool; the flows do it) and set its URL")
    from agentrl_core.secrets import reveal

    return ExperienceClient(reveal(cfg.url, "experience.url"), timeout=cfg.request_timeout_s)


def experience_specs(specs: Sequence[EpisodeSpec], env_factory: Callable[[], Any], step: int, round_: int,
                     cfg: RecipeConfig) -> list[EpisodeSpec]:
    """The specs with retrieved experience as `context` for the chosen samples (mode "mixed":
    rollout_ratio of each group; "all": every sample). The query of a task is its first observation."""
    ecfg = cfg.experience
    ratio = 1.0 if ecfg.mode == "all" else ecfg.rollout_ratio
    chosen = choose_samples(specs, ratio, seed=cfg.trainer.seed * 7_919 + step * 104_729 + round_)
    tasks = sorted({s.task_id for s, c in zip(specs, chosen) if c})
    if not tasks:
        return list(specs)
    queries = first_observations(env_factory, tasks)
    with pool_client(ecfg) as client:
        blocks = {t: render_block([e.content for e in client.retrieve(q, env=cfg.env.name, k=ecfg.top_k,
                                                                      min_score=ecfg.min_score)])
                  for t, q in queries.items()}
    return with_experience(specs, chosen, blocks)


def summary_payload(traj: Trajectory) -> dict[str, Any]:
    """What the pool's summariser reads: the chat without the experience block, env, task, outcome."""
    return {"env": traj.env, "task_id": traj.task_id, "messages": original_messages(traj),
            "reward": traj.reward, "success": traj.success}


def _summarise(client: ExperienceClient, trajs: Sequence[Trajectory], engine: Any, chat: Any,
               cfg: RecipeConfig, step: int) -> dict[str, float]:
    ecfg = cfg.experience
    payload = [summary_payload(t) for t in trajs if t.error is None and len(t.messages) >= 2]
    if ecfg.summariser == "rule":
        resp = client.summarise(payload, include_failures=ecfg.summarise_failures, min_score=ecfg.min_score)
        return {"exp/summarised": float(resp.added), "exp/duplicates": float(resp.duplicates)}
    summariser = ModelSummariser(engine, chat, include_failures=ecfg.summarise_failures, min_score=ecfg.min_score,
                                 seed=cfg.trainer.seed + step)
    added = client.add(summariser(payload))
    return {"exp/summarised": float(added.added), "exp/duplicates": float(added.duplicates),
            "exp/malformed": float(summariser.malformed)}


def experience_after_rollout(trajs: Sequence[Trajectory], engine: Any, chat: Any, step: int,
                             cfg: RecipeConfig) -> dict[str, float]:
    """Measure with vs without experience, summarise the step's trajectories into the pool, and (when
    keep_in_context is false) strip the block from the stored trajectories in place. Returns exp/* metrics."""
    metrics = experience_metrics(trajs)
    with pool_client(cfg.experience) as client:
        metrics.update(_summarise(client, trajs, engine, chat, cfg, step))
        metrics["exp/pool_size"] = float(client.health().experiences)
    if not cfg.experience.keep_in_context:
        metrics["exp/stripped"] = float(sum(strip_context(t, chat) for t in trajs))
    return metrics
