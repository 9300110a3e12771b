"""The trainer worker: the training session (model, optimizer, checkpoints, metrics) and π_ref, as one actor."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from agentrl_core.system import malloc_tuning
from agentrl_core.config import RecipeConfig
from agentrl_core.distributed.rollout_worker import actor_device
from agentrl_core.models.lora import merged_state_dict
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
    With several trainer workers (distributed.trainer_workers = N) each is rank `rank` of N in one torch process
    group, met at `master` = (address, port) of rank 0's node; each trains its share of every update
    (training.data_parallel), rank 0 logs and writes the checkpoints, every rank its DeepSpeed shard.
    """

    def __init__(self, cfg: RecipeConfig, init_model: str, stage_dir: str, device: str | None = None,
                 environment: Mapping[str, str] | None = None, rank: int = 0, world: int = 1,
                 master: tuple[str, int] | None = None) -> None:
        adopt_worker_environment(environment)  # the run's secret variables, through the object store
        malloc_tuning.adopt()  # started with the tuned malloc (actor_options): keep it from any child process
        if world > 1:
            join_process_group(rank, world, master)
        torch.manual_seed(cfg.trainer.seed)
        self.cfg, self.rank = cfg, rank
        self.session = open_session(Path(stage_dir), Path(init_model), cfg.trainer.optim, cfg.grpo_optimizer_steps,
                                    resume=cfg.trainer.resume, dtype=cfg.model.dtype,
                                    gradient_checkpointing=cfg.model.gradient_checkpointing, lora=cfg.model.lora,
                                    trainer=cfg.trainer, write_metrics=rank == 0)
        self.ref_model = reference_model(cfg, Path(init_model), self.session)
        self.pad_id = HFEngine(self.session.model, self.session.tokenizer).pad_id
        self.best = BestCheckpoint(Path(stage_dir))
        device = device or actor_device()
        if device != "cpu" and not self.session.uses_deepspeed:  # a DeepSpeed engine placed itself
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
        """The policy's weights as the rollout workers' plain model holds them (CPU): the backend's full weights
        (gathered under DeepSpeed ZeRO-3), or with LoRA the adapters merged into the base, W + (α/r)·B A — merged
        rather than the adapter alone so that every engine (the native one included) samples a plain model, at
        the cost of sending the full weights each sync. The driver passes the returned ref on, never the data."""
        if self.session.adapter is not None:
            return merged_state_dict(self.session.adapter)
        weights = {k: v.detach().to("cpu") for k, v in self.session.backend.named_weights()}  # every rank gathers
        return with_tied_names(self.session.model, weights) if self.rank == 0 else {}  # (ZeRO-3's gathers are
        # collective); rank 0's travels

    def keep_best(self, step: int, metrics: dict[str, float]) -> None:
        """The current weights as the stage's best checkpoint when `metrics` beat it (trainer.export_best)."""
        if self.best.improves(metrics):  # every rank (ZeRO-3 gathers are collective); rank 0 records it
            self.best.keep(self.session, step, metrics, record=self.rank == 0)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.session.writer.log(step, metrics)

    def save(self, step: int, extra: dict[str, Any] | None = None) -> str:
        """A complete, atomic checkpoint of `step` (keeping trainer.keep_last); its path."""
        return str(self.session.save(step, self.cfg.trainer.keep_last, extra))

    def last_checkpoint(self) -> str:
        return str(self.session.last_checkpoint())

    def close(self) -> None:
        self.session.writer.close()


def with_tied_names(model: Any, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`weights` under every name of a tied parameter too (DeepSpeed names each parameter once: a tied
    lm_head.weight comes only as the embedding), so a plain model loads them strictly."""
    first: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        first.setdefault(id(param), name)
        if name not in weights and first[id(param)] in weights:
            weights[name] = weights[first[id(param)]]
    return weights


def join_process_group(rank: int, world: int, master: tuple[str, int] | None) -> None:
    """This process as rank `rank` of `world`, meeting at `master` (rank 0's node address and a free port there):
    the environment torch's env:// rendezvous reads (DeepSpeed's init_distributed then joins the group).
    LOCAL_RANK is 0: Ray gives each trainer actor its own GPUs (CUDA_VISIBLE_DEVICES)."""
    if master is None:
        raise ValueError(f"rank {rank} of {world} needs the rendezvous address of rank 0 (master)")
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0", MASTER_ADDR=master[0],
                      MASTER_PORT=str(master[1]))


def rendezvous() -> tuple[str, int]:
    """(this node's address, a free TCP port on it): where the trainer ranks meet (run on rank 0's bundle)."""
    import ray

    from agentrl_core.web.ports import free_port

    address = ray.util.get_node_ip_address()
    return address, free_port(address)


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
