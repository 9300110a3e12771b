"""The in-process executor: the trainer's own model samples through its engine and trains, in this process.

The engine (native, HF or vLLM: rollout.engine) reads the session's model, so rollout and update take turns
(`overlaps` is False: distributed.max_policy_lag >= 1 is the Ray executor's). Before an update a colocated
engine frees its memory (rollout.engine.sleep_when_training); after it the native engine drops its KV caches
(computed with the old weights) and a vLLM engine gets the new weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ContextManager

from agentrl_core.config import RecipeConfig
from agentrl_core.env_service import EnvClient, RemoteEnv
from agentrl_core.errors import ConfigError
from agentrl_core.experience.rollout_hooks import experience_after_rollout
from agentrl_core.system.machine_info import peak_resident_bytes
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import EpisodeSpec, Trajectory
from agentrl_core.rollout.engine_factory import make_engine
from agentrl_core.rollout.training_round import play_round
from agentrl_core.training.memory_plan import MemoryPlan, check_peak
from agentrl_core.training.policy_update import policy_update
from agentrl_core.training.session import TrainingSession, open_session
from agentrl_core.training.step_context import reference_model, update_context
from agentrl_core.evaluation.validation import BestCheckpoint, validate

ENGINE_COUNTERS = ("prefilled_tokens", "reused_tokens", "evictions", "forward_s")
"""The native engine's running counts a step reports (as rollout/<name>, the step's share; the Ray rollout
worker keeps the same list)."""


class LocalExecutor:
    """Rollout and update in this process, on `device` ("cpu", "cuda")."""

    overlaps = False

    def __init__(self, cfg: RecipeConfig, init_model: Path, stage_dir: Path, env_url: str, client: EnvClient,
                 plan: MemoryPlan | None, device: str = "cpu") -> None:
        self.cfg, self.env_url, self.client, self.plan = cfg, env_url, client, plan
        self.session = open_session(stage_dir, init_model, cfg.trainer.optim, cfg.grpo_optimizer_steps,
                                    resume=cfg.trainer.resume, dtype=cfg.model.dtype,
                                    gradient_checkpointing=cfg.model.gradient_checkpointing, lora=cfg.model.lora,
                                    trainer=cfg.trainer, device=device)
        self.engine = rollout_engine(cfg, self.session, init_model)
        self.chat = ChatFormat(self.session.tokenizer)
        self.ref_model = reference_model(cfg, init_model, self.session)
        self.best = BestCheckpoint(stage_dir) if cfg.trainer.export_best else None
        self.start_step = self.session.start_step

    def play(self, specs: Sequence[EpisodeSpec], seed: int, step: int) -> list[Trajectory]:
        self.session.model.eval()
        factory = lambda: RemoteEnv(self.client, self.cfg.env.name)  # noqa: E731
        return play_round(self.engine, self.chat, factory, specs, seed, self.cfg)

    def after_rollout(self, trajs: list[Trajectory], step: int) -> dict[str, float]:
        return experience_after_rollout(trajs, self.engine, self.chat, step, self.cfg)

    def engine_counters(self) -> dict[str, float]:
        stats = getattr(self.engine, "stats", None)
        counts = {k: v for k, v in stats().items() if k in ENGINE_COUNTERS} if callable(stats) else {}
        return counts | {"retries": 0.0}  # one process: a failed rollout is the stage's error, never replayed

    def rollout_peak_gib(self) -> float:
        return peak_resident_bytes() / 2**30  # this process: the stage's peak so far, at the rollout's end

    def update(self, usable: list[Trajectory]) -> dict[str, float]:
        cfg = self.cfg
        pause_engine(self.engine, cfg)
        self.session.model.train()
        ctx = update_context(self.session, cfg, self.engine.pad_id, self.ref_model)
        return policy_update(ctx, usable, epochs=cfg.trainer.ppo_epochs, mini_batches=cfg.trainer.ppo_mini_batches)

    def publish(self, version: int, in_flight: bool) -> None:
        sync_engine(self.engine, self.session, self.cfg)

    def validate(self, ids: Sequence[int]) -> dict[str, float]:
        self.session.model.eval()
        return validate(self.engine, self.session.tokenizer, self.cfg, self.env_url, list(ids))

    def keep_best(self, step: int, metrics: dict[str, float]) -> None:
        if self.best is not None and self.best.improves(metrics):
            self.best.keep(self.session, step, metrics)

    def peaks(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        peak = check_peak(self.plan, step)  # one process: the trainer's peak is the run's
        return peak | ({"memory/run_peak_gib": peak["memory/peak_rss_gib"]} if peak else {})

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.session.writer.log(step, metrics)

    def save(self, step: int, extra: dict[str, Any]) -> str:
        return str(self.session.save(step, self.cfg.trainer.keep_last, extra))

    def last_checkpoint(self) -> str:
        return str(self.session.last_checkpoint())

    def resume_hint(self) -> ContextManager[None]:
        return self.session.resume_hint()

    def close(self) -> None:
        self.session.writer.close()


def rollout_engine(cfg: RecipeConfig, session: TrainingSession, init_model: Path) -> Any:
    """The engine of the rollouts: the trainer's own model (native, hf), or vLLM loading `init_model` and
    receiving the trainer's weights after every update. A served model (openai) is fixed, so it cannot be
    trained: it is for evaluation (batch-eval)."""
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
