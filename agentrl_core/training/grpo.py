"""The GRPO stage: roll out groups per task, update the policy, log, checkpoint; resumable."""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from agentrl_core import algorithms as alg
from agentrl_core.config import RecipeConfig
from agentrl_core.errors import ConfigError
from agentrl_core.envs import EnvClient, RemoteEnv
from agentrl_core.experience.launcher import experience_for
from agentrl_core.experience.rollout_hooks import experience_after_rollout, experience_specs
from agentrl_core.models import load_model
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import EpisodeSpec, LoopLimits, Trajectory, run_episodes, write_trajectories
from agentrl_core.rollout.r3l import r3l_metrics, run_r3l_episodes, settings_from
from agentrl_core.rollout.engine import Engine
from agentrl_core.rollout.engines import make_engine
from agentrl_core.tasksets import resolve_task_ids
from agentrl_core.training.policy_update import UpdateContext, policy_update
from agentrl_core.training.session import StageResult, TrainingSession, open_session
from agentrl_core.training.timing import timed

log = logging.getLogger(__name__)
StepCallback = Callable[[int, int, dict[str, float]], None]


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


def _rollout_round(engine: Engine, chat: ChatFormat, env_factory: Callable[[], Any], tasks: Sequence[int],
                   step: int, round_: int, cfg: RecipeConfig) -> list[Trajectory]:
    """Roll out `group_size` samples of each task (plus their R3L retries when algorithm.r3l_retry);
    group ids are unique across refill rounds."""
    specs, seed = round_specs(tasks, step, round_, cfg)
    if cfg.experience.enabled:  # mixed rollout: the chosen samples get retrieved experience in their first message
        specs = experience_specs(specs, env_factory, step, round_, cfg)
    limits = LoopLimits(cfg.env.max_turns, cfg.rollout.max_context_tokens)
    if cfg.algorithm.r3l_retry:  # reflect-then-retry: failed attempts add retries to their groups
        return run_r3l_episodes(engine, chat, env_factory, specs, cfg.rollout.sampling, limits,
                                settings_from(cfg.algorithm), seed=seed)
    return run_episodes(engine, chat, env_factory, specs, cfg.rollout.sampling, limits, seed=seed)


def usable_trajectories(trajs: Sequence[Trajectory]) -> list[Trajectory]:
    """Trajectories that can train: no env/engine error and at least one model token."""
    return [t for t in trajs if t.error is None and t.response_tokens > 0]


def _informative(trajs: Sequence[Trajectory]) -> list[Trajectory]:
    """DAPO's filter: the samples of groups whose rewards are not all equal (errored samples dropped)."""
    ok = usable_trajectories(trajs)
    if not ok:
        return []
    keep = alg.dynamic_sampling_keep(torch.tensor([t.reward for t in ok], dtype=torch.float32),
                                     torch.tensor([t.group for t in ok], dtype=torch.long))
    return [t for t, k in zip(ok, keep.tolist()) if k]


def rollout_batch(engine: Engine, chat: ChatFormat, env_factory: Callable[[], Any], train_ids: Sequence[int],
                  step: int, cfg: RecipeConfig) -> tuple[list[Trajectory], list[Trajectory], int]:
    """(every trajectory rolled out, the ones to train on, rounds used).

    Without dynamic sampling one round, training on every usable trajectory. With it (DAPO), groups
    whose rewards are all equal are dropped and more tasks are rolled out until tasks_per_step
    informative groups are kept or dynamic_sampling_max_rounds is reached; then whole groups are
    kept, at most tasks_per_step of them.
    """
    tasks = step_tasks(train_ids, step, cfg)
    every = _rollout_round(engine, chat, env_factory, tasks, step, 0, cfg)
    if not cfg.algorithm.dynamic_sampling:
        return every, usable_trajectories(every), 1
    kept, rounds = _informative(every), 1
    while rounds < cfg.algorithm.dynamic_sampling_max_rounds:
        missing = alg.groups_still_needed(torch.tensor([t.group for t in kept], dtype=torch.long), len(tasks))
        if missing == 0:
            break
        extra = _rollout_round(engine, chat, env_factory, step_tasks(train_ids, step, cfg, rounds, missing), step,
                               rounds, cfg)
        every, kept, rounds = every + extra, kept + _informative(extra), rounds + 1
    chosen = sorted({t.group for t in kept})[: len(tasks)]
    return every, [t for t in kept if t.group in set(chosen)], rounds


def rollout_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Reward, success, length and signal statistics of one batch (errors excluded, counted); r3l/* with R3L."""
    ok = [t for t in trajs if t.error is None]
    n = max(1, len(ok))
    groups: dict[int, set[float]] = {}
    for t in ok:
        groups.setdefault(t.group, set()).add(t.reward)
    return {
        "reward_mean": sum(t.reward for t in ok) / n,
        "success_rate": sum(t.success for t in ok) / n,
        "response_length": sum(t.response_tokens for t in ok) / n,
        "turns_mean": sum(t.num_turns for t in ok) / n,
        "truncated_rate": sum(t.truncated for t in ok) / n,
        "errors": float(len(trajs) - len(ok)),
        "groups_with_signal": sum(len(r) > 1 for r in groups.values()) / max(1, len(groups)),
    } | r3l_metrics(trajs)


def grpo_step(session: TrainingSession, engine: Engine, chat: ChatFormat, env_factory: Callable[[], Any],
              train_ids: Sequence[int], step: int, cfg: RecipeConfig, ref_model: Any | None) -> dict[str, float]:
    """One step: rollout → (log) → policy update. Returns the step's metrics."""
    timings: dict[str, float] = {}
    with timed("rollout", timings):
        session.model.eval()
        trajs, usable, rounds = rollout_batch(engine, chat, env_factory, train_ids, step, cfg)
    # summarise into the pool, measure with vs without experience, strip the block if asked (in place)
    exp_metrics = experience_after_rollout(trajs, engine, chat, step, cfg) if cfg.experience.enabled else {}
    write_trajectories(session.stage_dir / "rollout_log" / f"step_{step + 1:06d}.parquet", trajs, step=step + 1)
    metrics = rollout_metrics(trajs) | exp_metrics
    metrics["rollout_rounds"] = float(rounds)
    metrics["samples_trained"] = 0.0  # replaced by policy_update's count when something trains
    with timed("train", timings):
        pause_engine(engine, cfg)
        session.model.train()
        if usable:
            metrics.update(policy_update(update_context(session, cfg, engine.pad_id, ref_model), usable,
                                         epochs=cfg.trainer.ppo_epochs))
        sync_engine(engine, session, cfg)
    metrics.update(timings)
    gen_tokens = sum(t.response_tokens for t in trajs)
    all_tokens = sum(len(t.token_ids) for t in usable)
    metrics["rollout_tokens_per_s"] = gen_tokens / max(1e-9, timings["time/rollout_s"])
    metrics["train_tokens_per_s"] = all_tokens / max(1e-9, timings["time/train_s"])
    metrics["time/step_s"] = timings["time/rollout_s"] + timings["time/train_s"]
    return metrics


def update_context(session: TrainingSession, cfg: RecipeConfig, pad_id: int, ref_model: Any | None) -> UpdateContext:
    """The policy update's context for a session (its forward model and backend) and the recipe."""
    return UpdateContext(session.forward_model, session.optimizer, session.scheduler, cfg.algorithm,
                         cfg.trainer.optim.grad_clip, cfg.trainer.micro_batch_tokens, pad_id, train_temperature(cfg),
                         ref_model, cfg.model.compute_dtype, cfg.rollout.sampling.max_new_tokens,
                         backend=session.backend)


def rollout_engine(cfg: RecipeConfig, session: TrainingSession, init_model: Path) -> Any:
    """The engine of the rollouts: the trainer's own model (hf), or vLLM loading `init_model` and
    receiving the trainer's weights after every update. A served model (openai) is fixed, so it
    cannot be trained: it is for evaluation (batch-eval)."""
    kind = cfg.rollout.engine.kind
    if kind == "openai":
        raise ConfigError("rollout.engine.kind=openai samples from a fixed served model, which training cannot "
                          "update; train with hf or vllm, and use openai for evaluation (batch-eval)")
    path = session.last_checkpoint() / "model" if session.start_step > 0 and kind == "vllm" else init_model
    return make_engine(cfg.rollout.engine, session.model, session.tokenizer, model_path=path,
                       autocast=cfg.model.compute_dtype, dtype=cfg.model.dtype, seed=cfg.trainer.seed)


def pause_engine(engine: Any, cfg: RecipeConfig) -> None:
    """Before an update: a colocated vLLM engine frees its GPU memory (rollout.engine.sleep_when_training)."""
    if cfg.rollout.engine.kind == "vllm" and cfg.rollout.engine.sleep_when_training:
        engine.sleep()


def sync_engine(engine: Any, session: TrainingSession, cfg: RecipeConfig) -> None:
    """After an update: a vLLM engine gets the new weights (an HF engine samples the trained model itself)."""
    if cfg.rollout.engine.kind == "vllm":
        engine.update_weights(session.backend.named_weights())


def train_temperature(cfg: RecipeConfig) -> float:
    t = cfg.rollout.sampling.temperature
    return t if t > 0 else 1.0


def reference_model(cfg: RecipeConfig, init_model: Path, session: TrainingSession | None = None) -> Any | None:
    """π_ref of the KL terms: the stage's starting model, or None when no KL term is on.

    A LoRA session's base is `init_model` itself, so its reference is the same model with the
    adapters switched off (peft's `disable_adapter()`), which costs no second copy; otherwise
    (or when no session is given) a frozen copy of `init_model` is loaded.
    """
    if cfg.algorithm.kl_coef <= 0 and cfg.algorithm.kl_reward_coef <= 0:
        return None
    if session is not None and session.adapter is not None:
        from agentrl_core.models.lora import adapters_off

        return adapters_off(session.adapter)
    ref = load_model(init_model, dtype=cfg.model.dtype)
    ref.requires_grad_(False)
    return ref.eval()


def train_grpo(cfg: RecipeConfig, *, init_model: Path, env_url: str, stage_dir: Path | None = None,
               on_step: StepCallback | None = None) -> StageResult:
    """Run (or resume) the GRPO stage to `trainer.steps`; returns its last checkpoint."""
    if cfg.distributed.backend == "ray":  # rollout and trainer as Ray actors; the same files and metrics
        from agentrl_core.distributed.driver import train_grpo_ray

        return train_grpo_ray(cfg, init_model=init_model, env_url=env_url, stage_dir=stage_dir, on_step=on_step)
    stage_dir = stage_dir or cfg.run_dir / "grpo"
    with experience_for(cfg, stage_dir.parent) as cfg:  # the pool, when on and not already running
        return _train_local(cfg, init_model, env_url, stage_dir, on_step)


def _train_local(cfg: RecipeConfig, init_model: Path, env_url: str, stage_dir: Path,
                 on_step: StepCallback | None) -> StageResult:
    """The GRPO loop in this process: rollout, update, log, checkpoint, from the session's start step."""
    torch.manual_seed(cfg.trainer.seed)
    session = open_session(stage_dir, init_model, cfg.trainer.optim, cfg.trainer.steps, resume=cfg.trainer.resume,
                           dtype=cfg.model.dtype, gradient_checkpointing=cfg.model.gradient_checkpointing,
                           lora=cfg.model.lora, trainer=cfg.trainer)
    engine = rollout_engine(cfg, session, init_model)
    chat = ChatFormat(session.tokenizer)
    ref_model = reference_model(cfg, init_model, session)
    last: dict[str, float] = {}
    with EnvClient(env_url, timeout=cfg.env.request_timeout_s) as client, session.writer:
        train_ids = resolve_task_ids(cfg.env, client, "train")
        factory = lambda: RemoteEnv(client, cfg.env.name)  # noqa: E731
        for step in range(session.start_step, cfg.trainer.steps):
            last = grpo_step(session, engine, chat, factory, train_ids, step, cfg, ref_model)
            session.writer.log(step + 1, last)
            if (step + 1) % cfg.trainer.save_every == 0 or step + 1 == cfg.trainer.steps:
                session.save(step + 1, cfg.trainer.keep_last, {"metrics": last})
            if on_step is not None:
                on_step(step + 1, cfg.trainer.steps, last)
        if cfg.trainer.steps == 0 and session.start_step == 0:
            session.save(0, cfg.trainer.keep_last)
    return StageResult("grpo", str(session.last_checkpoint()), cfg.trainer.steps, session.start_step, last)
