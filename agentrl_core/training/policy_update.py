"""One RL optimizer step: advantages, then the policy loss accumulated over micro-batches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from agentrl_core import algorithms as alg
from agentrl_core.config import AlgorithmConfig
from agentrl_core.rollout.trajectory import Trajectory
from agentrl_core.training.backends import TorchBackend, TrainBackend
from agentrl_core.training.batching import (
    MicroBatch,
    collate,
    plan_micro_batches,
    target_mask,
)
from agentrl_core.training.data_parallel import gather_objects, my_share, sum_over_ranks
from agentrl_core.training.logprobs import is_wrapper, token_logprobs
from agentrl_core.training.shared_prefix import plan_group_batches, plan_prefixes
from agentrl_core.training.update_diagnostics import Diagnostics, merge, turn_index


@dataclass
class UpdateContext:
    """What the update needs besides the data.

    `model` is what the log-prob forward runs on: the Hugging Face model, or the DeepSpeed engine
    under ZeRO-3 (`TrainBackend.forward_module`). `backend` runs backward and the optimizer step;
    left None it is a TorchBackend over `model`, `optimizer` and `scheduler` (clip_grad_norm_,
    AdamW step, schedule step, zero_grad), so callers that pass only those behave as before.
    """

    model: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    algorithm: AlgorithmConfig
    grad_clip: float
    micro_batch_tokens: int
    pad_id: int
    temperature: float = 1.0
    ref_model: Any | None = None
    autocast: str = "float32"
    max_response_tokens: int = 0
    """L_max of DAPO's overlong shaping (the sampling's max_new_tokens); 0 when shaping is off."""
    backend: TrainBackend | None = None
    """Who applies the gradients; None: a TorchBackend over model, optimizer, scheduler and grad_clip."""
    shared_prefix: bool = False
    """Keep each group in one micro-batch and run its shared prompt once (training.shared_prefix)."""
    old_logprobs: str = "recompute"
    """"recompute" (the policy before the update) or "engine" (the rollout engine's log-probs): see
    TrainerConfig.old_logprobs."""
    dp_rank: int = 0
    dp_world: int = 1
    """This trainer's rank among `dp_world` data-parallel ranks (training.data_parallel); 0 of 1 alone."""

    def __post_init__(self) -> None:
        if self.backend is None:
            self.backend = TorchBackend(self.model, self.optimizer, self.scheduler, self.grad_clip)


def sequence_advantages(trajs: Sequence[Trajectory], cfg: AlgorithmConfig) -> torch.Tensor:
    """One advantage per trajectory from the configured estimator (outcome reward, group = task)."""
    rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
    groups = torch.tensor([t.group for t in trajs], dtype=torch.long)
    ones = torch.ones((len(trajs), 1))
    return alg.get_advantage_estimator(cfg.advantage)(rewards, groups, ones, cfg)[:, 0]


def select_samples(trajs: Sequence[Trajectory], cfg: AlgorithmConfig) -> list[Trajectory]:
    """The trajectories that train: all, or (sample_filter "success", RAFT) those with reward >= threshold."""
    if cfg.sample_filter == "none":
        return list(trajs)
    keep = alg.raft_select(torch.tensor([t.reward for t in trajs], dtype=torch.float32), cfg.success_threshold)
    return [t for t, k in zip(trajs, keep.tolist()) if k]


def shaped_rewards(ctx: UpdateContext, trajs: Sequence[Trajectory], batches: list[MicroBatch]) -> torch.Tensor:
    """[B] rewards after DAPO's overlong penalty and the KL-in-reward term, when they are on.

    r_i' = r_i + min(-(len_i - (L_max - L_buf))/L_buf * factor, 0) - beta_r * sum_t kl_t.
    """
    cfg = ctx.algorithm
    rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
    if cfg.overlong_buffer_len > 0:
        lengths = torch.tensor([t.response_tokens for t in trajs], dtype=torch.float32)
        rewards = rewards + alg.overlong_penalty(lengths, ctx.max_response_tokens, cfg.overlong_buffer_len,
                                                 cfg.overlong_penalty_factor)
    if cfg.kl_reward_coef > 0 and ctx.ref_model is not None:
        for mb in batches:
            with torch.no_grad():
                logp = _logprobs(ctx, ctx.model, mb)
                ref = _logprobs(ctx, ctx.ref_model, mb)
            rows = torch.tensor(mb.index)
            rewards[rows] = alg.kl_penalized_rewards(rewards[rows], logp, ref, mb.target_mask, cfg.kl_reward_coef,
                                                     cfg.kl_estimator)
    return rewards


def token_advantages(trajs: Sequence[Trajectory], rewards: torch.Tensor, cfg: AlgorithmConfig) -> torch.Tensor:
    """[B, W-1] advantages from the configured estimator over the whole batch's model tokens (so
    token-level estimators such as REINFORCE++ whiten over the batch, not per micro-batch); step
    estimators (GiGPO) also get every episode's turns."""
    return alg.batch_advantage(cfg.advantage)(step_batch(trajs, rewards), cfg)


def step_batch(trajs: Sequence[Trajectory], rewards: torch.Tensor) -> alg.StepBatch:
    """The estimators' view of the batch: rewards, group ids, the [B, W-1] target mask, and per episode its
    turns (action span moved to target columns, position p is column p - 1; step reward; observed state)."""
    groups = torch.tensor([t.group for t in trajs], dtype=torch.long)
    return alg.StepBatch(rewards, groups, target_mask(trajs), [_turns(t) for t in trajs])


def _turns(traj: Trajectory) -> list[alg.StepTurn]:
    rewards = traj.turn_rewards
    return [alg.StepTurn(start - 1, end - 1, rewards[k] if k < len(rewards) else 0.0, state)
            for k, ((start, end), state) in enumerate(zip(traj.action_spans, traj.observation_keys))]


def policy_update(ctx: UpdateContext, trajs: Sequence[Trajectory], epochs: int = 1,
                  mini_batches: int = 1) -> dict[str, float]:
    """`epochs` passes over the batch, each taking one optimizer step per mini-batch (`epochs * m` steps).

    loss_j = agg_j(w_tis * pg_loss) + β·agg_j(KL(π‖π_ref)) − c_H·agg_j(H) for mini-batch j, every term
    normalised by mini-batch j's tokens (or samples) so micro-batching does not change it. Rewards are
    shaped first (overlong, KL in the reward) and advantages computed over the whole batch, before any
    step; the batch is then cut into m = min(mini_batches, groups) mini-batches of whole groups (verl's
    ppo_mini_batch_size: more updates from one rollout). The old log-probs are the policy's before the
    first step: with one step they equal the current ones (detached, ratio = 1, no extra forward); with
    more they come from one no-grad pass and the PPO clip becomes active. With ctx.old_logprobs =
    "engine" the engine's log-probs are used instead, and no pass is needed. entropy, clipfrac,
    rollout_logp_diff and entropy/turn_k are token means over the rows that ran
    (training.update_diagnostics), not shrunk by the zero-advantage rows `rows_with_gradient` skips;
    the loss terms and grad_norm are means over the optimizer steps.
    """
    cfg = ctx.algorithm
    trajs = select_samples(trajs, cfg)
    if not trajs:
        return {"samples_trained": 0.0}
    rewards = shaped_rewards(ctx, trajs, plan_batches(ctx, trajs) if cfg.kl_reward_coef > 0 else [])
    adv = token_advantages(trajs, rewards, cfg)
    mask = target_mask(trajs)
    turns = turn_index(trajs)
    parts = [_plan_part(ctx, trajs, idx, adv, mask, turns) for idx in split_groups(trajs, mini_batches)]
    for part in parts:  # this rank's micro-batches of each part (all of them with one rank)
        part.batches = my_share(part.batches, ctx.dp_rank, ctx.dp_world)
    steps = epochs * len(parts)
    olds = [_old_logprobs(ctx, part.batches, steps) for part in parts]
    totals: dict[str, float] = {}
    diag = Diagnostics()
    for _ in range(epochs):
        for part, old in zip(parts, olds):
            for mb, mb_old in zip(part.batches, old):
                out = _micro_step(ctx, mb, part.norm, mb_old, diag, part.turns[mb.index, : mb.target_mask.shape[1]])
                for k, v in out.items():
                    totals[k] = totals.get(k, 0.0) + v / steps
            totals["grad_norm"] = totals.get("grad_norm", 0.0) + _optimizer_step(ctx) / steps
    seq_adv = (adv * mask).sum(1) / mask.sum(1).clamp(min=1)
    totals["micro_batches"] = float(sum(mb.weight > 0 for p in parts for mb in p.batches))
    totals = sum_over_ranks(totals, ("loss", "pg_loss", "kl", "micro_batches"), ctx.dp_world)
    totals.update(merge(gather_objects(diag, ctx.dp_world)).means())
    totals.update(adv_abs_mean=float(seq_adv.abs().mean()), lr=ctx.backend.lr, mini_batches=float(len(parts)),
                  samples_trained=float(len(trajs)), samples_backpropagated=float(sum(len(p.rows) for p in parts)),
                  shaped_reward_mean=float(rewards.mean()))
    return totals


def split_groups(trajs: Sequence[Trajectory], mini_batches: int) -> list[list[int]]:
    """The batch's indices cut into min(mini_batches, groups) parts of whole groups, in the order groups first
    appear, part sizes (in groups) differing by at most one; one part, in batch order, when m = 1."""
    if mini_batches <= 1:
        return [list(range(len(trajs)))]
    order: dict[int, list[int]] = {}
    for i, t in enumerate(trajs):
        order.setdefault(t.group, []).append(i)
    groups = list(order.values())
    m = min(mini_batches, len(groups))
    bounds = [round(k * len(groups) / m) for k in range(m + 1)]
    return [[i for g in groups[bounds[k]:bounds[k + 1]] for i in g] for k in range(m)]


@dataclass
class _Part:
    """One mini-batch: the batch rows it back-propagates, their micro-batches and turn indices, its loss
    normalisation."""

    rows: list[int]
    batches: list[MicroBatch]
    turns: torch.Tensor
    norm: alg.LossNorm


def _plan_part(ctx: UpdateContext, trajs: Sequence[Trajectory], idx: list[int], adv: torch.Tensor,
               mask: torch.Tensor, turns: torch.Tensor) -> _Part:
    """Mini-batch `idx` (batch rows): normalised by all its rows' tokens and samples, back-propagating those
    `rows_with_gradient` keeps, each micro-batch carrying its rows' advantages."""
    norm = alg.LossNorm(global_tokens=float(mask[idx].sum().clamp(min=1)), global_seqs=float(len(idx)),
                        scale_tokens=float(ctx.algorithm.loss_scale_tokens))
    keep = rows_with_gradient(adv[idx], mask[idx], ctx.algorithm)
    if not keep and not getattr(ctx.backend, "steps_without_backward", False):
        keep = list(range(len(idx)))  # this backend's step needs a backward first (DeepSpeed)
    rows = [idx[k] for k in keep]
    batches = plan_batches(ctx, [trajs[i] for i in rows])
    for mb in batches:
        mb.advantages = adv[rows][mb.index, : mb.target_mask.shape[1]] * mb.target_mask
    return _Part(rows, batches, turns[rows], norm)


def rows_with_gradient(adv: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmConfig) -> list[int]:
    """The samples whose loss has a gradient: with no KL and no entropy term in the loss, every policy loss is
    A·f(ratio, log π) per token, so a sample whose advantages are all 0 (a GRPO group with equal rewards)
    adds exactly nothing and its forward and backward are skipped; the loss keeps the whole batch's
    normalisation, so it and its gradient are unchanged. With `kl_rows: signal` the KL term is put on the
    samples with signal only, so the same samples are skipped with kl_coef > 0 too (the objective then
    differs from `all` by the KL of the skipped samples). All samples when nothing would be skipped
    (a batch with no signal at all still takes its optimizer step, as before); under `kl_rows: signal` such
    a batch back-propagates nothing (the step only advances the optimizer's schedule)."""
    every = list(range(adv.shape[0]))
    kl_everywhere = cfg.kl_coef > 0 and cfg.kl_rows == "all"
    if kl_everywhere or cfg.entropy_coef > 0:
        return every
    rows = [i for i, moved in enumerate(((adv * mask).abs().sum(1) > 0).tolist()) if moved]
    return rows if rows or cfg.kl_coef > 0 else every


def plan_batches(ctx: UpdateContext, trajs: Sequence[Trajectory]) -> list[MicroBatch]:
    """Micro-batches under the token budget: by length, or (shared_prefix) whole groups with their prompts."""
    if ctx.shared_prefix and not is_wrapper(ctx.model):
        batches = []
        for idx in plan_group_batches(trajs, ctx.micro_batch_tokens):
            mb = collate(trajs, idx, ctx.pad_id)
            mb.prefixes = plan_prefixes(trajs, idx)
            batches.append(mb)
        return batches
    plan = plan_micro_batches([len(t.token_ids) for t in trajs], ctx.micro_batch_tokens)
    return [collate(trajs, idx, ctx.pad_id) for idx in plan]


def _optimizer_step(ctx: UpdateContext) -> float:
    """Clip to grad_clip, update, advance the schedule, clear the gradients; the norm before clipping."""
    return ctx.backend.step()


def _logprobs(ctx: UpdateContext, model: Any, mb: MicroBatch) -> torch.Tensor:
    return token_logprobs(model, mb.input_ids, mb.attention_mask, mb.target_mask, temperature=ctx.temperature,
                          autocast=ctx.autocast, prefixes=mb.prefixes).logprobs


@torch.no_grad()
def _old_logprobs(ctx: UpdateContext, batches: list[MicroBatch], steps: int) -> list[torch.Tensor | None]:
    """log π_old per micro-batch: the engine's, a no-grad forward (more than one optimizer step), or None
    (one step: the current log-probs, detached, stand in)."""
    if ctx.old_logprobs == "engine":
        return [mb.engine_logprobs for mb in batches]
    if steps > 1:
        return [_logprobs(ctx, ctx.model, mb) for mb in batches]
    return [None] * len(batches)


def _micro_step(ctx: UpdateContext, mb: MicroBatch, norm: Any, old_logprobs: torch.Tensor | None,
                diag: Diagnostics, turns: torch.Tensor) -> dict[str, float]:
    """Forward, loss and backward of one micro-batch; returns its share of the loss terms (normalised by the
    global batch) and adds its entropy, clipping and engine gap to `diag` (turns: its rows' turn_index)."""
    cfg = ctx.algorithm
    device = next(ctx.model.parameters()).device  # batches are built on the CPU; the loss runs beside the model
    mb, turns = mb.to(device), turns.to(device)
    old_logprobs = old_logprobs.to(device) if old_logprobs is not None else None
    # entropy is logged every step; it costs one softmax over the model's own tokens only
    stats = token_logprobs(ctx.model, mb.input_ids, mb.attention_mask, mb.target_mask,
                           temperature=ctx.temperature, with_entropy=True, autocast=ctx.autocast, prefixes=mb.prefixes)
    mask = mb.target_mask
    old = stats.logprobs.detach() if old_logprobs is None else old_logprobs
    pg, pg_stats = alg.get_policy_loss(cfg.policy_loss)(stats.logprobs, old, mb.advantages, mask, cfg)
    if cfg.tis_cap > 0:  # truncated importance sampling: correct for the engine/trainer log-prob gap
        pg = alg.apply_tis(pg, alg.tis_weights(old, mb.engine_logprobs, mask, cfg.tis_cap))
    agg = alg.get_aggregation(cfg.loss_agg_mode)
    loss = agg(pg, mask, norm)
    out = {"pg_loss": float(loss.detach())}
    if cfg.kl_coef > 0 and ctx.ref_model is not None:
        with torch.no_grad():
            ref = token_logprobs(ctx.ref_model, mb.input_ids, mb.attention_mask, mask, temperature=ctx.temperature,
                                 autocast=ctx.autocast, prefixes=mb.prefixes)
        kl = agg(alg.get_kl_estimator(cfg.kl_estimator)(stats.logprobs, ref.logprobs), mask, norm)
        loss = loss + cfg.kl_coef * kl
        out["kl"] = float(kl.detach())
    if cfg.entropy_coef > 0:
        loss = loss - cfg.entropy_coef * agg(stats.entropy, mask, norm)
    # an averaging backend divides the ranks' summed gradients by N: give it N x this rank's share
    scale = ctx.dp_world if getattr(ctx.backend, "averages_ranks", False) else 1
    ctx.backend.backward(loss * (mb.weight * scale) if mb.weight != 1.0 or scale != 1 else loss)
    out["loss"] = float(loss.detach())
    if mb.weight == 0.0:  # a pass that only keeps the ranks in step: it adds nothing to the step's figures
        return {k: 0.0 for k in out}
    diag.add(mask, stats.entropy, pg_stats.get("clipfrac"), (old - mb.engine_logprobs).abs(), turns)
    return out
