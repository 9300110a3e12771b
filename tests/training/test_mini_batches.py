"""PPO mini-batches: one rollout batch cut into whole-group mini-batches, one optimizer step each."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from agentrl_core.config import AlgorithmConfig, OptimConfig
from agentrl_core.models import load_model
from agentrl_core.recipes import load_recipe
from agentrl_core.training.optim import build_optimizer
from agentrl_core.training.policy_update import UpdateContext, policy_update, split_groups
from tests.training.test_training_units import make_traj


def _batch(groups: list[int], seed: int = 0) -> list:
    rng = random.Random(seed)
    return [make_traj(rng, group=g, reward=float(rng.random() < 0.5) + 0.1 * i) for i, g in enumerate(groups)]


def test_split_groups_keeps_each_group_whole_and_balances_parts():
    trajs = _batch([0, 0, 1, 1, 1, 2, 3, 3, 4, 4])
    parts = split_groups(trajs, 2)
    assert sorted(i for p in parts for i in p) == list(range(10))
    assert [{trajs[i].group for i in p} for p in parts] == [{0, 1}, {2, 3, 4}]  # 5 groups: 2 and 3
    assert len(split_groups(trajs, 99)) == 5  # never more parts than groups
    assert split_groups(trajs, 1) == [list(range(10))]


def test_groups_need_not_be_contiguous():
    trajs = _batch([1, 0, 1, 0, 2, 2])
    parts = split_groups(trajs, 3)
    assert parts == [[0, 2], [1, 3], [4, 5]]


def _model_and_ctx(model_path, cfg: AlgorithmConfig, lr: float = 1e-3):
    torch.manual_seed(0)
    model = load_model(model_path)
    model.train()
    opt, sched = build_optimizer(model, OptimConfig(lr=lr), total_steps=10)
    steps = []
    opt.register_step_post_hook(lambda *_: steps.append(1))
    return model, UpdateContext(model, opt, sched, cfg, grad_clip=1e9, micro_batch_tokens=4096, pad_id=0), steps


def test_two_mini_batches_equal_two_updates_one_per_half(tiny_model_path):
    """Under REINFORCE (no ratio) with group-local advantages, mini-batching is two updates in a row."""
    cfg = AlgorithmConfig(policy_loss="vanilla_pg")
    trajs = _batch([0, 0, 0, 1, 1, 1])
    model_a, ctx_a, steps_a = _model_and_ctx(tiny_model_path, cfg)
    metrics = policy_update(ctx_a, trajs, mini_batches=2)
    model_b, ctx_b, steps_b = _model_and_ctx(tiny_model_path, cfg)
    policy_update(ctx_b, trajs[:3])
    policy_update(ctx_b, trajs[3:])
    assert len(steps_a) == len(steps_b) == 2 and metrics["mini_batches"] == 2
    b = dict(model_b.named_parameters())
    moved = 0
    for name, p in model_a.named_parameters():
        torch.testing.assert_close(p, b[name], rtol=1e-4, atol=1e-6)
    model_c, _, _ = _model_and_ctx(tiny_model_path, cfg)
    for name, p in model_c.named_parameters():
        moved += int(not torch.allclose(p, b[name]))
    assert moved > 0  # the updates did change the model


def test_later_mini_batches_see_the_policy_before_the_first_step(tiny_model_path, monkeypatch):
    """The old log-probs come from one no-grad pass before any step, so the second mini-batch's ratio has
    moved away from 1 and the PPO clip acts; with one mini-batch no such pass runs."""
    from agentrl_core.training import policy_update as pu

    calls = []
    real = pu._logprobs
    monkeypatch.setattr(pu, "_logprobs", lambda *a: calls.append(1) or real(*a))
    cfg = AlgorithmConfig(clip_ratio_low=0.01, clip_ratio_high=0.01)
    trajs = _batch([0, 0, 0, 1, 1, 1])
    _, ctx, steps = _model_and_ctx(tiny_model_path, cfg, lr=5e-2)
    one = policy_update(ctx, trajs, mini_batches=1)
    assert calls == [] and one["clipfrac"] == 0.0 and len(steps) == 1
    _, ctx, steps = _model_and_ctx(tiny_model_path, cfg, lr=5e-2)
    two = policy_update(ctx, trajs, mini_batches=2)
    assert len(calls) == 2 and len(steps) == 2  # one old-policy forward per mini-batch, before any step
    assert two["clipfrac"] > 0


def test_the_schedule_counts_optimizer_steps():
    cfg = load_recipe("household_grpo", ["trainer.steps=5", "trainer.ppo_epochs=2", "trainer.ppo_mini_batches=3"])
    assert cfg.grpo_optimizer_steps == 5 * 2 * 3
    capped = load_recipe("household_grpo", ["trainer.steps=5", f"rollout.tasks_per_step={2}",
                                            "trainer.ppo_mini_batches=8"])
    assert capped.grpo_optimizer_steps == 5 * 2  # at most one mini-batch per task


@pytest.mark.parametrize("m", [0, -1])
def test_mini_batches_below_one_are_refused(m):
    with pytest.raises(Exception, match="ppo_mini_batches"):
        load_recipe("household_grpo", [f"trainer.ppo_mini_batches={m}"])


def test_a_grpo_stage_takes_a_step_per_mini_batch_and_schedules_them(tiny_model_path, env_server_url, tmp_path):
    """The real stage (tiny model, env server): each step logs its mini-batches, and the checkpoint's schedule
    has advanced one step per optimizer step (2 steps x 2 mini-batches), over a stage counted in them."""
    import json

    from agentrl_core.checkpoints.layout import SCHEDULER_FILE, STATE_FILE
    from agentrl_core.grpo import train_grpo
    from tests.training.test_recipes_train import tiny

    cfg = load_recipe("countdown_grpo", tiny(tiny_model_path, tmp_path) + [
        "trainer.ppo_mini_batches=2", "algorithm.kl_coef=0.001"])  # every sample trains: a step per mini-batch
    result = train_grpo(cfg, init_model=tiny_model_path, env_url=env_server_url, stage_dir=tmp_path / "grpo")
    rows = [json.loads(x) for x in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert [r["mini_batches"] for r in rows] == [2.0, 2.0]
    ckpt = Path(result.checkpoint)
    assert json.loads((ckpt / STATE_FILE).read_text())["total_steps"] == 4
    assert torch.load(ckpt / SCHEDULER_FILE)["last_epoch"] == 4
