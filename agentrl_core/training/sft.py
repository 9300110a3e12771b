"""The SFT warm-start stage: expert demonstrations, loss on the model's own turns only; resumable."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Callable, Iterator, Sequence

import torch

from agentrl_core.config import RecipeConfig
from agentrl_core.env_service import EnvClient, RemoteEnv
from agentrl_core.errors import ConfigError
from agentrl_core.models import load_tokenizer
from agentrl_core.models.chat import ChatFormat
from agentrl_core.models.compute_settings import resolve_compute_settings
from agentrl_core.rollout import (
    Trajectory,
    collect_demos,
    read_trajectories,
    write_trajectories,
)
from agentrl_core.sft_data import load_sft_dataset
from agentrl_core.sft_data.packing import pack, packed_logprobs, plan_packs
from agentrl_core.tasksets import resolve_task_ids
from agentrl_core.training.batching import collate, plan_micro_batches
from agentrl_core.training.logprobs import token_logprobs
from agentrl_core.training.session import StageResult, TrainingSession, open_session
from agentrl_core.training.stage_lock import stage_writer
from agentrl_core.training.timing import timed

StepCallback = Callable[[int, int, dict[str, float]], None]


def _padded_logprobs(session: TrainingSession, demos: Sequence[Trajectory], micro_batch_tokens: int, pad_id: int,
                     autocast: str) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(log-probs, target mask) per padded micro-batch."""
    for idx in plan_micro_batches([len(d.token_ids) for d in demos], micro_batch_tokens):
        mb = collate(demos, idx, pad_id)
        yield token_logprobs(session.forward_model, mb.input_ids, mb.attention_mask, mb.target_mask,
                             autocast=autocast).logprobs, mb.target_mask


def _packed_logprobs(session: TrainingSession, demos: Sequence[Trajectory], micro_batch_tokens: int, pad_id: int,
                     autocast: str) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(log-probs, target mask) per packed row: samples share a row, never attention (sft.packing)."""
    if session.forward_model is not session.model:
        raise ConfigError("sft.packing runs the bare model's decoder, which gives wrong gradients under "
                          "DeepSpeed ZeRO-3 (its engine's forward must run); set sft.packing=false or "
                          "trainer.deepspeed.zero_stage=2")
    for group in plan_packs([len(d.token_ids) for d in demos], micro_batch_tokens):
        batch = pack(demos, [group], pad_id)
        yield packed_logprobs(session.model, batch, autocast=autocast), batch.target_mask


def sft_update(session: TrainingSession, demos: Sequence[Trajectory], grad_clip: float, micro_batch_tokens: int,
               pad_id: int, autocast: str = "float32", packing: bool = False) -> dict[str, float]:
    """One optimizer step of NLL = −Σ_t m_t log π(y_t) / Σ_t m_t over the whole batch (m = assistant tokens),
    over padded micro-batches or (packing) packed rows; the loss is the same either way."""
    n_tokens = float(sum(sum(d.loss_mask[1:]) for d in demos))
    rows = _packed_logprobs if packing else _padded_logprobs
    total = 0.0
    for logprobs, mask in rows(session, demos, micro_batch_tokens, pad_id, autocast):
        loss = -(logprobs * mask.to(logprobs.device)).sum() / n_tokens
        if session.uses_deepspeed:
            session.backend.backward(loss)
        else:
            loss.backward()
        total += float(loss.detach())
    grad_norm, lr = _optimizer_step(session, grad_clip)
    return {"loss": total, "grad_norm": grad_norm, "lr": lr, "tokens": n_tokens}


def _optimizer_step(session: TrainingSession, grad_clip: float) -> tuple[float, float]:
    """Clip the global norm to grad_clip, step, advance the schedule, clear; (norm before clipping, next lr).

    DeepSpeed clips inside its step, to the stage optimizer's grad_clip (its config).
    """
    if session.uses_deepspeed:
        return session.backend.step(), session.backend.lr
    grad_norm = torch.nn.utils.clip_grad_norm_(session.model.parameters(), grad_clip)
    session.optimizer.step()
    session.scheduler.step()
    session.optimizer.zero_grad(set_to_none=True)
    return float(grad_norm), float(session.scheduler.get_last_lr()[0])


def sft_schedule(n_demos: int, cfg: RecipeConfig) -> list[list[int]]:
    """Demo indices of every optimizer step: each epoch a fresh deterministic shuffle, cut in batches."""
    steps: list[list[int]] = []
    for epoch in range(cfg.sft.epochs):
        order = list(range(n_demos))
        random.Random(cfg.trainer.seed + 31 * epoch).shuffle(order)
        steps.extend(order[i:i + cfg.sft.batch_size] for i in range(0, n_demos, cfg.sft.batch_size))
    return steps


def load_or_collect_demos(cfg: RecipeConfig, stage_dir: Path, init_model: Path, env_url: str) -> list[Trajectory]:
    """Expert demos for the first `sft.demos` shuffled train tasks (or every conversation of `sft.dataset`),
    cached as parquet in the stage folder."""
    path = stage_dir / "demos.parquet"
    if path.exists():
        return read_trajectories(path)
    if cfg.sft.dataset is not None:
        demos = load_sft_dataset(cfg.sft.dataset, ChatFormat(load_tokenizer(init_model)),
                                 max_tokens=cfg.rollout.max_context_tokens)
        write_trajectories(path, demos)
        return demos
    chat = ChatFormat(load_tokenizer(init_model))
    with EnvClient(env_url, timeout=cfg.env.request_timeout_s) as client:
        ids = resolve_task_ids(cfg.env, client, "train")
        pick = random.Random(cfg.trainer.seed).sample(list(ids), min(cfg.sft.demos, len(ids)))
        demos = collect_demos(lambda: RemoteEnv(client, cfg.env.name), chat, pick, cfg.env.max_turns)
    write_trajectories(path, demos)
    return demos


def train_sft(cfg: RecipeConfig, *, init_model: Path, env_url: str, stage_dir: Path | None = None,
              on_step: StepCallback | None = None, device: str = "cpu") -> StageResult:
    """Run (or resume) supervised fine-tuning on expert demonstrations, the model on `device` ("cpu", "cuda");
    returns its last checkpoint."""
    cfg = resolve_compute_settings(cfg, init_model)  # model.compute_dtype/cpu_threads auto -> this machine's
    stage_dir = stage_dir or cfg.run_dir / "sft"
    with stage_writer(stage_dir):  # one writer per stage directory (StageBusyError for a second)
        return _train_sft(cfg, init_model, env_url, stage_dir, on_step, device)


def _train_sft(cfg: RecipeConfig, init_model: Path, env_url: str, stage_dir: Path,
               on_step: StepCallback | None, device: str = "cpu") -> StageResult:
    demos = load_or_collect_demos(cfg, stage_dir, init_model, env_url)
    schedule = sft_schedule(len(demos), cfg)
    torch.manual_seed(cfg.trainer.seed)
    session = open_session(stage_dir, init_model, cfg.sft.optim, len(schedule), resume=cfg.trainer.resume,
                           dtype=cfg.model.dtype, gradient_checkpointing=cfg.model.gradient_checkpointing,
                           lora=cfg.model.lora, trainer=cfg.trainer, device=device)
    pad_id = session.tokenizer.pad_token_id
    last: dict[str, float] = {}
    with session.writer, session.resume_hint():
        for step in range(session.start_step, len(schedule)):
            timings: dict[str, float] = {}
            with timed("train", timings):
                last = sft_update(session, [demos[i] for i in schedule[step]], cfg.sft.optim.grad_clip,
                                  cfg.trainer.micro_batch_tokens, pad_id, cfg.model.compute_dtype, cfg.sft.packing)
            last.update(timings, train_tokens_per_s=_tokens(demos, schedule[step]) / timings["time/train_s"])
            session.writer.log(step + 1, last)
            if (step + 1) % cfg.sft.save_every == 0 or step + 1 == len(schedule):
                session.save(step + 1, cfg.trainer.keep_last, {"metrics": last})
            if on_step is not None:
                on_step(step + 1, len(schedule), last)
    return StageResult("sft", str(session.last_checkpoint()), len(schedule), session.start_step, last)


def _tokens(demos: Sequence[Trajectory], idx: Sequence[int]) -> float:
    return float(sum(len(demos[i].token_ids) for i in idx))

