"""The GRPO stage: roll out groups per task, update the policy, log, checkpoint; resumable."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from agentrl_core.atomic_file import write_text_atomic
from agentrl_core.config import RecipeConfig
from agentrl_core.errors import ConfigError
from agentrl_core.env_service import EnvClient, RemoteEnv
from agentrl_core.experience.launcher import experience_for
from agentrl_core.experience.rollout_hooks import experience_after_rollout
from agentrl_core.machine_info import reset_peak_resident
from agentrl_core.models.chat import ChatFormat
from agentrl_core.models.compute_settings import resolve_compute_settings
from agentrl_core.rollout import write_trajectories
from agentrl_core.rollout.generation import Engine
from agentrl_core.rollout.engine_factory import make_engine
from agentrl_core.tasksets import resolve_task_ids
from agentrl_core.training.memory_plan import apply_plan, check_peak, memory_plan_for, peak_resident_bytes
from agentrl_core.training.policy_update import policy_update
from agentrl_core.rollout.grpo_rollout import rollout_batch, rollout_metrics
from agentrl_core.training.session import StageResult, StepCallback, TrainingSession, open_session
from agentrl_core.training.stage_lock import stage_writer
from agentrl_core.training.step_context import reference_model, update_context
from agentrl_core.training.timing import timed
from agentrl_core.training.validation import BestCheckpoint, is_due, validate, validation_ids

log = logging.getLogger(__name__)


def grpo_step(session: TrainingSession, engine: Engine, chat: ChatFormat, env_factory: Callable[[], Any],
              train_ids: Sequence[int], step: int, cfg: RecipeConfig, ref_model: Any | None) -> dict[str, float]:
    """One step: rollout → (log) → policy update. Returns the step's metrics."""
    timings: dict[str, float] = {}
    before = engine_counters(engine)
    with timed("rollout", timings):
        session.model.eval()
        trajs, usable, rounds = rollout_batch(engine, chat, env_factory, train_ids, step, cfg)
    engine_metrics = {f"rollout/{k}": v - before.get(k, 0.0) for k, v in engine_counters(engine).items()}
    engine_metrics["memory/peak_after_rollout_gib"] = peak_resident_bytes() / 2**30  # the stage's peak so far
    # summarise into the pool, measure with vs without experience, strip the block if asked (in place)
    exp_metrics = experience_after_rollout(trajs, engine, chat, step, cfg) if cfg.experience.enabled else {}
    write_trajectories(session.stage_dir / "rollout_log" / f"step_{step + 1:06d}.parquet", trajs, step=step + 1)
    metrics = rollout_metrics(trajs) | exp_metrics | engine_metrics
    metrics["rollout_rounds"] = float(rounds)
    metrics["samples_trained"] = 0.0  # replaced by policy_update's count when something trains
    with timed("train", timings):
        pause_engine(engine, cfg)
        session.model.train()
        if usable:
            metrics.update(policy_update(update_context(session, cfg, engine.pad_id, ref_model), usable,
                                         epochs=cfg.trainer.ppo_epochs,
                                         mini_batches=cfg.trainer.ppo_mini_batches))
        sync_engine(engine, session, cfg)
    metrics.update(timings)
    gen_tokens = sum(t.response_tokens for t in trajs)
    all_tokens = sum(len(t.token_ids) for t in usable)
    metrics["rollout_tokens_per_s"] = gen_tokens / max(1e-9, timings["time/rollout_s"])
    metrics["train_tokens_per_s"] = all_tokens / max(1e-9, timings["time/train_s"])
    metrics["time/step_s"] = timings["time/rollout_s"] + timings["time/train_s"]
    return metrics


def engine_counters(engine: Any) -> dict[str, float]:
    """The native engine's running counts (prefilled and reused prompt tokens, evictions: a KV cache too
    small for the batch shows as evictions and tokens prefilled again; seconds in forwards); {} for other
    engines."""
    stats = getattr(engine, "stats", None)
    if not callable(stats):
        return {}
    return {k: v for k, v in stats().items() if k in ("prefilled_tokens", "reused_tokens", "evictions", "forward_s")}


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
                       autocast=cfg.model.compute_dtype, dtype=cfg.model.dtype, seed=cfg.trainer.seed,
                       allow_native=not session.uses_deepspeed)


def pause_engine(engine: Any, cfg: RecipeConfig) -> None:
    """Before an update: a colocated engine frees its memory (rollout.engine.sleep_when_training): vLLM its
    GPU memory, the native engine its KV caches and weight snapshot (stale after the update anyway)."""
    if cfg.rollout.engine.sleep_when_training and hasattr(engine, "sleep"):
        engine.sleep()


def sync_engine(engine: Any, session: TrainingSession, cfg: RecipeConfig) -> None:
    """After an update: a vLLM engine gets the new weights; the native engine drops its KV caches (computed
    with the old weights); an HF engine samples the trained model itself."""
    if cfg.rollout.engine.kind == "vllm":
        engine.update_weights(session.backend.named_weights())
    elif hasattr(engine, "invalidate"):
        engine.invalidate()


def train_grpo(cfg: RecipeConfig, *, init_model: Path, env_url: str, stage_dir: Path | None = None,
               on_step: StepCallback | None = None, device: str = "cpu") -> StageResult:
    """Run (or resume) the GRPO stage to `trainer.steps`; returns its last checkpoint. `device` ("cpu",
    "cuda") is where the in-process loop keeps the policy, its engine and π_ref (Ray places its own workers)."""
    cfg = resolve_compute_settings(cfg, init_model)  # model.compute_dtype/cpu_threads auto -> this machine's
    stage_dir = stage_dir or cfg.run_dir / "grpo"
    with stage_writer(stage_dir):  # one writer per stage directory (StageBusyError for a second)
        record_algorithm(stage_dir, cfg)
        if cfg.distributed.backend == "ray":  # rollout and trainer as Ray actors; the same files and metrics
            from agentrl_core.distributed.driver import train_grpo_ray

            return train_grpo_ray(cfg, init_model=init_model, env_url=env_url, stage_dir=stage_dir, on_step=on_step)
        with experience_for(cfg, stage_dir.parent) as cfg:  # the pool, when on and not already running
            return _train_local(cfg, init_model, env_url, stage_dir, on_step, device)


ALGORITHM_FILE = "algorithm.json"
"""The stage's algorithm section as it trains (estimator, loss, KL, ...), written at every start: what a
run's numbers came from, readable without the command line that set it."""


def record_algorithm(stage_dir: Path, cfg: RecipeConfig) -> Path:
    """Write the recipe's algorithm section to `stage_dir/algorithm.json` (atomically; no secrets live there)."""
    stage_dir.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(stage_dir / ALGORITHM_FILE, cfg.algorithm.model_dump_json(indent=2) + "\n")


def _train_local(cfg: RecipeConfig, init_model: Path, env_url: str, stage_dir: Path,
                 on_step: StepCallback | None, device: str = "cpu") -> StageResult:
    """The GRPO loop in this process: rollout, update, log, checkpoint, from the session's start step."""
    torch.manual_seed(cfg.trainer.seed)
    plan = memory_plan_for(cfg, init_model, native_engine=cfg.rollout.engine.kind in ("auto", "native"))
    if plan is not None:  # KV cache, micro-batches and checkpointing sized from the memory budget
        cfg = apply_plan(cfg, plan)
        log.info("%s", plan.describe())
    if not reset_peak_resident():  # the memory/peak_* metrics are this stage's, not an earlier stage's
        log.info("peak memory counts from the process's start: /proc/self/clear_refs cannot be written here")
    session = open_session(stage_dir, init_model, cfg.trainer.optim, cfg.grpo_optimizer_steps,
                           resume=cfg.trainer.resume, dtype=cfg.model.dtype,
                           gradient_checkpointing=cfg.model.gradient_checkpointing, lora=cfg.model.lora,
                           trainer=cfg.trainer, device=device)
    engine = rollout_engine(cfg, session, init_model)
    chat = ChatFormat(session.tokenizer)
    ref_model = reference_model(cfg, init_model, session)
    last: dict[str, float] = {}
    with EnvClient(env_url, timeout=cfg.env.request_timeout_s) as client, session.writer, session.resume_hint():
        train_ids = resolve_task_ids(cfg.env, client, "train")
        factory = lambda: RemoteEnv(client, cfg.env.name)  # noqa: E731
        validator = _Validator(cfg, session, engine, env_url, client) if cfg.trainer.val_every > 0 else None
        if validator is not None and session.start_step == 0:
            session.writer.log(0, validator.after(0))  # the starting policy, the curve's first point
        started, done = time.monotonic(), session.start_step
        for step in range(session.start_step, cfg.trainer.steps):
            last = grpo_step(session, engine, chat, factory, train_ids, step, cfg, ref_model)
            last.update(check_peak(plan, step + 1))
            done = step + 1
            out_of_time = _out_of_time(cfg, started)
            if validator is not None:
                last.update(validator.after(step + 1, force=out_of_time))
            session.writer.log(step + 1, last)
            if (step + 1) % cfg.trainer.save_every == 0 or step + 1 == cfg.trainer.steps or out_of_time:
                session.save(step + 1, cfg.trainer.keep_last, {"metrics": last})
            if on_step is not None:
                on_step(step + 1, cfg.trainer.steps, last)
            if out_of_time:
                log.info("trainer.max_minutes=%g reached after step %d of %d: stopping", cfg.trainer.max_minutes,
                         step + 1, cfg.trainer.steps)
                break
        if cfg.trainer.steps == 0 and session.start_step == 0:
            session.save(0, cfg.trainer.keep_last)
    return StageResult("grpo", str(session.last_checkpoint()), max(done, session.start_step), session.start_step, last)


def _out_of_time(cfg: RecipeConfig, started: float) -> bool:
    """Whether the stage has used up trainer.max_minutes of wall time."""
    limit = cfg.trainer.max_minutes
    return limit is not None and time.monotonic() - started >= 60 * limit


class _Validator:
    """Validation between steps (trainer.val_every) and, with trainer.export_best, the best checkpoint."""

    def __init__(self, cfg: RecipeConfig, session: TrainingSession, engine: Engine, env_url: str,
                 client: EnvClient) -> None:
        self.cfg, self.session, self.engine, self.env_url = cfg, session, engine, env_url
        self.ids = validation_ids(cfg, client)
        self.best = BestCheckpoint(session.stage_dir) if cfg.trainer.export_best else None

    def after(self, step: int, force: bool = False) -> dict[str, float]:
        """The val/* metrics when validation is due after `step` steps or `force` (else none); keeps a new best."""
        if not (force or is_due(self.cfg, step)):
            return {}
        self.session.model.eval()
        metrics = validate(self.engine, self.session.tokenizer, self.cfg, self.env_url, self.ids)
        if self.best is not None and self.best.improves(metrics):
            self.best.keep(self.session, step, metrics)
        return metrics
