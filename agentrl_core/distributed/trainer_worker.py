"""The trainer worker: the training session (model, optimizer, checkpoints, metrics) and π_ref, as one actor."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from agentrl_core.system import malloc_tuning
from agentrl_core.config import RecipeConfig
from agentrl_core.distributed.rollout_worker import actor_device
from agentrl_core.distributed.weight_sync import cpu_state_dict
from agentrl_core.rollout import HFEngine, Trajectory
from agentrl_core.secrets import adopt_worker_environment
from agentrl_core.training.memory_plan import check_peak
from agentrl_core.training.step_context import reference_model, update_context
from agentrl_core.training.policy_update import policy_update
from agentrl_core.training.session import open_session
from agentrl_core.evaluation.validation import BestCheckpoint


class TrainerWorker:
    """Opens (or resumes) the stage exactly as train_grpo does; `ray.remote(TrainerWorker)` makes it an actor.

    Checkpoints and metrics are written by this actor under `stage_dir`, so on a multi-node
    cluster the stage folder must be on storage the driver can read too (shared or S3-synced).
    """

    def __init__(self, cfg: RecipeConfig, init_model: str, stage_dir: str, device: str | None = None,
                 environment: Mapping[str, str] | None = None) -> None:
        adopt_worker_environment(environment)  # the run's secret variables, through the object store
        malloc_tuning.adopt()  # started with the tuned malloc (actor_options): keep it from any child process
        torch.manual_seed(cfg.trainer.seed)
        self.cfg = cfg
        self.session = open_session(Path(stage_dir), Path(init_model), cfg.trainer.optim, cfg.grpo_optimizer_steps,
                                    resume=cfg.trainer.resume, dtype=cfg.model.dtype,
                                    gradient_checkpointing=cfg.model.gradient_checkpointing, lora=cfg.model.lora)
        self.ref_model = reference_model(cfg, Path(init_model), self.session)
        self.pad_id = HFEngine(self.session.model, self.session.tokenizer).pad_id
        self.best = BestCheckpoint(Path(stage_dir))
        device = device or actor_device()
        if device != "cpu":
            _move(self.session, self.ref_model, device)

    def start_step(self) -> int:
        """The step this session starts from: 0, or the step of the checkpoint it resumed."""
        return self.session.start_step

    def update(self, usable: Sequence[Trajectory]) -> dict[str, float]:
        """One policy update on the usable trajectories (as the in-process executor's); its metrics."""
        cfg, session = self.cfg, self.session
        session.model.train()
        ctx = update_context(session, cfg, self.pad_id, self.ref_model)
        metrics = policy_update(ctx, list(usable), epochs=cfg.trainer.ppo_epochs,
                                mini_batches=cfg.trainer.ppo_mini_batches) if usable else {}
        session.model.eval()
        return metrics | check_peak(None, session.start_step)  # this trainer process's peak so far

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The policy's weights (CPU, the model's dtype); the driver passes the returned ref on, never the data."""
        return cpu_state_dict(self.session.model)

    def keep_best(self, step: int, metrics: dict[str, float]) -> None:
        """The current weights as the stage's best checkpoint when `metrics` beat it (trainer.export_best)."""
        if self.best.improves(metrics):
            self.best.keep(self.session, step, metrics)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.session.writer.log(step, metrics)

    def save(self, step: int, extra: dict[str, Any] | None = None) -> str:
        """A complete, atomic checkpoint of `step` (keeping trainer.keep_last); its path."""
        return str(self.session.save(step, self.cfg.trainer.keep_last, extra))

    def last_checkpoint(self) -> str:
        return str(self.session.last_checkpoint())

    def close(self) -> None:
        self.session.writer.close()


def _move(session: Any, ref_model: Any | None, device: str) -> None:
    """Model, π_ref and any optimizer state (present after a resume) onto `device`."""
    session.model.to(device)
    if ref_model is not None:
        ref_model.to(device)
    for state in session.optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and key != "step":
                state[key] = value.to(device)


def remote_trainer_worker(options: dict[str, Any]) -> Any:
    """The actor class with Ray options (resources, scheduling strategy) applied, and the tuned malloc of a
    training process in its runtime env (agentrl_core.system.malloc_tuning; rollout workers keep glibc's default)."""
    import ray

    return ray.remote(TrainerWorker).options(**malloc_tuning.actor_options(options))
