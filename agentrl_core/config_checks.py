"""Cross-field checks of a recipe: registered names, settings that cannot run or cannot learn, and odd ones."""

from __future__ import annotations

import inspect
import logging
import math
from typing import Any

from agentrl_core.errors import ConfigError

log = logging.getLogger(__name__)

Recipe = Any
"""A `RecipeConfig`. config.py runs these checks while it builds one, so this module reads it by
attribute and never imports config.py: that import would close an import cycle."""


def _check_in(kind: str, name: str, valid: list[str]) -> None:
    if name not in valid:
        raise ConfigError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(valid))}")


def _check_env_kwargs(cls: type, kwargs: dict) -> None:
    signature = inspect.signature(cls)
    try:
        signature.bind(**kwargs)
    except TypeError as err:
        valid = [p for p in signature.parameters if p not in ("self", "args", "kwargs")]
        raise ConfigError(f"env.kwargs {sorted(kwargs)} do not fit {cls.__name__}: {err}; valid: {', '.join(valid)}") from None


def _check_extra(env_cls: type) -> None:
    """An env whose optional engine is missing fails at construction, naming the install command."""
    missing = env_cls.missing_extra()
    if missing:
        raise ConfigError(f"env.name: {missing}")


def check_registered_names(cfg: Recipe) -> None:
    """Fail at construction when an environment or algorithm name is not registered."""
    from agentrl_core import algorithms, envs
    from agentrl_core.envs.registry import versioned_ids

    _check_in("env.name", cfg.env.name, envs.names() + versioned_ids())
    env_cls = envs.env_class(cfg.env.name)
    _check_env_kwargs(env_cls, cfg.env.kwargs)
    _check_extra(env_cls)
    _check_in("algorithm.advantage", cfg.algorithm.advantage, algorithms.advantage_names())
    _check_in("algorithm.policy_loss", cfg.algorithm.policy_loss, list(algorithms.POLICY_LOSSES))
    _check_in("algorithm.loss_agg_mode", cfg.algorithm.loss_agg_mode, list(algorithms.AGGREGATIONS))
    _check_in("algorithm.kl_estimator", cfg.algorithm.kl_estimator, list(algorithms.KL_ESTIMATORS))
    from agentrl_core.engine_registry import engine_kinds

    _check_in("rollout.engine.kind", cfg.rollout.engine.kind, engine_kinds())  # plugins loaded by the imports above


def check_combinations(cfg: Recipe) -> None:
    """Fail at construction on settings that cannot run together (instead of mid-run)."""
    _check_engine_logprobs(cfg)
    if cfg.trainer.export_best and cfg.trainer.val_every == 0:
        raise ConfigError("trainer.export_best needs validation to pick the best checkpoint: set trainer.val_every "
                          "(e.g. 2) or trainer.export_best=false")
    if cfg.algorithm.r3l_retry and cfg.experience.enabled:
        raise ConfigError("experience.enabled cannot be combined with algorithm.r3l_retry yet: R3L replays an attempt "
                          "by comparing its first message (which would hold the experience block) with a fresh "
                          "reset; set one of them to false")
    if cfg.distributed.trainer_workers > 1:
        if cfg.distributed.backend != "ray":
            raise ConfigError(f"distributed.trainer_workers={cfg.distributed.trainer_workers} trains over several Ray "
                              "actors: set distributed.backend=ray (in-process there is one trainer)")
        if cfg.trainer.backend != "deepspeed":
            raise ConfigError(f"distributed.trainer_workers={cfg.distributed.trainer_workers} shards the trainer with "
                              "DeepSpeed's ZeRO: set trainer.backend=deepspeed (trainer.deepspeed.zero_stage 2 or 3), "
                              "or keep one trainer worker")
    if cfg.distributed.backend == "ray" and cfg.rollout.engine.kind == "openai":
        raise ConfigError("rollout.engine.kind=openai samples from a fixed served model, which training cannot update; "
                          "train with native, hf or vllm rollout workers, and use openai for evaluation")
    _check_async(cfg)


def _check_async(cfg: Recipe) -> None:
    """The asynchronous schedule (distributed.max_policy_lag >= 1) runs on Ray and needs its off-policy
    correction; unset and 0 are the synchronous schedule, on every executor."""
    lag = cfg.distributed.max_policy_lag
    if not lag:
        return
    if cfg.distributed.backend != "ray":
        raise ConfigError(f"distributed.max_policy_lag={lag} runs rollout and update at once, which needs rollout "
                          "workers holding their own weights apart from the trainer's (in-process, the engine samples "
                          "the trainer's own model): set distributed.backend=ray, or set max_policy_lag to 0 (or "
                          "leave it unset) for the synchronous loop")
    if cfg.algorithm.tis_cap <= 0:
        raise ConfigError(f"distributed.max_policy_lag={lag}: samples begun by older weights must be reweighted by "
                          "pi_old/pi_behaviour (truncated importance sampling), which algorithm.tis_cap=0 turns off; "
                          "set algorithm.tis_cap (e.g. 2.0)")


# -- settings that cannot learn (refused when the recipe is built) --------------------------------
def check_learnable(cfg: Recipe) -> None:
    """Fail at construction on RL settings under which no sample can get a non-zero advantage."""
    from agentrl_core import algorithms

    group, tasks = cfg.rollout.group_size, cfg.rollout.tasks_per_step
    baseline = algorithms.advantage_baseline(cfg.algorithm.advantage)
    if baseline == "group" and group < 2:
        raise ConfigError(
            f"algorithm.advantage={cfg.algorithm.advantage} compares each sample with the other samples of its "
            f"task, but rollout.group_size={group} gives it none, so every advantage is 0 and nothing is learned; "
            "set rollout.group_size to 2 or more (4-8 is usual), or use an estimator without groups "
            "(reinforce_pp, raft)")
    if baseline == "batch" and group * tasks < 2:
        raise ConfigError(
            f"algorithm.advantage={cfg.algorithm.advantage} whitens over the batch, but rollout.tasks_per_step x "
            f"group_size = {tasks * group} sequence, so every advantage is 0; set rollout.tasks_per_step or "
            "rollout.group_size so that the batch holds 2 or more")
    if cfg.algorithm.dynamic_sampling and group < 2:
        raise ConfigError(
            f"algorithm.dynamic_sampling drops groups whose rewards are all equal, and a group of "
            f"rollout.group_size={group} always is, so every step would end empty; set rollout.group_size "
            "to 2 or more, or dynamic_sampling: false")
    if cfg.algorithm.rollout_filter_ratio < 1.0 and group < 2:
        raise ConfigError(
            f"algorithm.rollout_filter_ratio={cfg.algorithm.rollout_filter_ratio} keeps the groups whose rewards "
            f"vary most, and a group of rollout.group_size={group} never varies, so the filter would drop tasks "
            "at random; set rollout.group_size to 2 or more, or rollout_filter_ratio: 1")


def check_rl_stage(cfg: Recipe) -> None:
    """Fail before a pipeline with an RL (GRPO) stage starts, when that stage could make no update.

    Not part of construction: the SFT pipeline uses the same recipe and ignores `trainer.steps`.
    """
    if cfg.trainer.steps == 0:
        raise ConfigError(
            "trainer.steps=0, but this pipeline trains a GRPO stage: it would make no update and only re-export "
            "its starting model, after the SFT and evaluation work; set trainer.steps to 1 or more, or run "
            "the SFT pipeline alone (flows/sft.py: prefect deployment run sft/sft)")


# -- settings that are legal but odd (said once in the log, before any work starts) ---------------
def odd_settings(cfg: Recipe) -> list[str]:
    """One sentence per setting that will run but probably not as meant: what happens and what to set."""
    from agentrl_core import algorithms

    notes = []
    alg, roll = cfg.algorithm, cfg.rollout
    relative = algorithms.advantage_baseline(alg.advantage) != "none"
    if relative and roll.group_size > 1 and roll.sampling.temperature == 0:
        notes.append("rollout.sampling.temperature=0 (greedy) makes a task's group_size samples identical unless "
                     "the environment is random, and identical samples get advantage 0; sample at about 1.0")
    if cfg.eval.k > 1 and cfg.eval.sampling.temperature == 0:
        notes.append(f"eval.k={cfg.eval.k} with greedy evaluation (eval.sampling.temperature=0): the k samples are "
                     "identical, so pass@k equals pass@1; set eval.k=1 or a temperature above 0")
    if alg.kl_coef > 0 and alg.kl_reward_coef > 0:
        notes.append("algorithm.kl_coef and algorithm.kl_reward_coef are both on: the KL to the reference is "
                     "penalised twice (in the loss and in the reward); keep one of them")
    if alg.kl_rows == "signal" and alg.kl_coef == 0:
        notes.append("algorithm.kl_rows=signal places the loss's KL term, but algorithm.kl_coef is 0: there is no "
                     "KL term (samples without signal are skipped anyway); set kl_coef above 0 or drop kl_rows")
    if relative and alg.sample_filter == "success":
        notes.append(f"algorithm.sample_filter=success keeps only samples with reward >= {alg.success_threshold}, "
                     f"so with 0/1 rewards the {alg.advantage} advantages of what is kept are all 0; RAFT pairs "
                     "the filter with advantage: raft")
    notes += _odd_sizes(cfg) + _odd_cluster(cfg)
    return notes


def _odd_cluster(cfg: Recipe) -> list[str]:
    """Cluster settings that do nothing where they are."""
    dist = cfg.distributed
    notes = []
    if dist.ray_token_file is not None and dist.ray_address is None:
        notes.append("distributed.ray_token_file is set but distributed.ray_address is not: a run's own local Ray "
                     "makes a fresh token and ignores the file; set ray_address to join the cluster it belongs to")
    if dist.backend == "local" and (dist.trainer_resource or dist.rollout_resource or dist.ray_address):
        notes.append("distributed.backend=local runs rollout and training in this process, so ray_address, "
                     "trainer_resource and rollout_resource are ignored; set distributed.backend=ray to use them")
    return notes


def _odd_sizes(cfg: Recipe) -> list[str]:
    """Odd counts: more tasks per step or demos than tasks, a warm-up longer than the run, a split nobody gets."""
    notes = []
    own_ids = cfg.env.train_ids is None and cfg.env.task_file is None
    if own_ids and cfg.rollout.tasks_per_step > cfg.env.train_tasks:
        notes.append(f"rollout.tasks_per_step={cfg.rollout.tasks_per_step} exceeds env.train_tasks="
                     f"{cfg.env.train_tasks}: each step trains on {cfg.env.train_tasks} tasks")
    if own_ids and cfg.sft.enabled and cfg.sft.dataset is None and cfg.sft.demos > cfg.env.train_tasks:
        notes.append(f"sft.demos={cfg.sft.demos} exceeds env.train_tasks={cfg.env.train_tasks}: SFT gets "
                     f"{cfg.env.train_tasks} demonstrations")
    warmup = cfg.trainer.optim.warmup_steps
    if 0 < cfg.grpo_optimizer_steps <= warmup:
        notes.append(f"trainer.optim.warmup_steps={warmup} >= the stage's {cfg.grpo_optimizer_steps} optimizer steps "
                     "(trainer.steps x ppo_epochs x ppo_mini_batches): the GRPO learning rate never reaches "
                     "trainer.optim.lr")
    if cfg.trainer.ppo_mini_batches > cfg.rollout.tasks_per_step:
        notes.append(f"trainer.ppo_mini_batches={cfg.trainer.ppo_mini_batches} exceeds rollout.tasks_per_step="
                     f"{cfg.rollout.tasks_per_step}: a mini-batch holds whole groups, so each pass takes "
                     f"{cfg.rollout.tasks_per_step} optimizer steps")
    if cfg.experience.enabled and cfg.experience.mode == "mixed":
        n = cfg.rollout.group_size
        m = min(n, math.floor(cfg.experience.rollout_ratio * n + 0.5))
        if m in (0, n):
            notes.append(f"experience.mode=mixed with rollout_ratio={cfg.experience.rollout_ratio} gives {m} of "
                         f"{n} samples per group the experience, so there is nothing to compare; set rollout_ratio "
                         "near 0.5 or mode=all")
    return notes


_SAID: set[str] = set()


def log_odd_settings(cfg: Recipe) -> list[str]:
    """Log each odd setting as a warning, once per process (a recipe is validated several times)."""
    notes = [n for n in odd_settings(cfg) if n not in _SAID]
    for note in notes:
        _SAID.add(note)
        log.warning("recipe: %s", note)
    return notes


def _check_engine_logprobs(cfg: Recipe) -> None:
    """trainer.old_logprobs=engine needs engine log-probs of the stored context: refuse the rollouts whose
    stored context differs from what the engine saw (R3L retries, stripped experience)."""
    if cfg.trainer.old_logprobs != "engine":
        return
    if cfg.algorithm.r3l_retry:
        raise ConfigError("trainer.old_logprobs=engine cannot be combined with algorithm.r3l_retry: a retry's engine "
                          "log-probs were computed with the guidance in context; set trainer.old_logprobs=recompute")
    if cfg.experience.enabled and not cfg.experience.keep_in_context:
        raise ConfigError("trainer.old_logprobs=engine cannot be combined with experience.keep_in_context=false: the "
                          "engine saw the experience block that training strips; set trainer.old_logprobs=recompute")
