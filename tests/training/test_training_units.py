"""Batching, the lr schedule, and the policy update's invariance to micro-batching."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from agentrl_core.config import AlgorithmConfig, OptimConfig
from agentrl_core.models import load_model
from agentrl_core.rollout.trajectory import Trajectory
from agentrl_core.training.batching import collate, plan_micro_batches
from agentrl_core.training.logprobs import token_logprobs
from agentrl_core.training.optim import build_optimizer, lr_factor
from agentrl_core.training.policy_update import UpdateContext, policy_update, sequence_advantages


def make_traj(rng: random.Random, group: int, reward: float, vocab: int = 500) -> Trajectory:
    t = Trajectory(task_id=group, env="scripted", group=group, sample=0)
    t.append([rng.randrange(vocab) for _ in range(rng.randint(5, 12))], trainable=False)
    t.prompt_len = len(t.token_ids)
    for _ in range(rng.randint(1, 3)):
        n = rng.randint(2, 6)
        t.append([rng.randrange(vocab) for _ in range(n)], trainable=True, logprobs=[-1.0] * n)
        t.append([rng.randrange(vocab) for _ in range(rng.randint(2, 5))], trainable=False)
    t.reward = reward
    return t


def batch(seed: int = 0) -> list[Trajectory]:
    rng = random.Random(seed)
    rewards = [1.0, 0.0, 0.0, 1.0, 0.1, 0.0]
    return [make_traj(rng, group=i // 3, reward=r) for i, r in enumerate(rewards)]


def test_plan_micro_batches_respects_budget_and_covers_all():
    lengths = [10, 50, 20, 200, 5, 40]
    plan = plan_micro_batches(lengths, token_budget=100)
    assert sorted(i for g in plan for i in g) == list(range(6))
    for g in plan:
        assert len(g) == 1 or max(lengths[i] for i in g) * len(g) <= 100


def test_collate_shifts_targets_and_broadcasts_advantages():
    trajs = batch()
    adv = torch.arange(len(trajs), dtype=torch.float32)
    mb = collate(trajs, [0, 2], pad_id=0, seq_adv=adv)
    t0 = trajs[0]
    assert mb.input_ids.shape[1] == max(len(trajs[0].token_ids), len(trajs[2].token_ids))
    assert mb.target_mask[0, : len(t0.token_ids) - 1].tolist() == [float(x) for x in t0.loss_mask[1:]]
    assert torch.all(mb.advantages[1][mb.target_mask[1] > 0] == 2.0)
    assert torch.all(mb.advantages[mb.target_mask == 0] == 0)


@pytest.mark.parametrize("schedule, step, expected", [
    ("constant", 5, 1.0), ("linear", 2, 1.0), ("linear", 12, 0.0), ("cosine", 7, 0.5), ("cosine", 0, 0.5),
])
def test_lr_factor(schedule, step, expected):
    cfg = OptimConfig(lr=1.0, warmup_steps=2, schedule=schedule)
    # warm-up: step 0 -> 1/2; after warm-up, progress p = (step-2)/10
    want = 0.5 if step == 0 else expected
    assert lr_factor(step, 12, cfg) == pytest.approx(want)


def test_grpo_advantages_from_groups():
    adv = sequence_advantages(batch(), AlgorithmConfig(norm_adv_by_std=False))
    # group 0 rewards [1, 0, 0] mean 1/3; group 1 rewards [1, .1, 0] mean 1.1/3
    assert adv.tolist() == pytest.approx([2 / 3, -1 / 3, -1 / 3, 1 - 1.1 / 3, 0.1 - 1.1 / 3, -1.1 / 3], abs=1e-6)


def _grads_after_update(model_path, trajs, budget: int, cfg: AlgorithmConfig):
    torch.manual_seed(0)
    model = load_model(model_path)
    model.train()
    opt, sched = build_optimizer(model, OptimConfig(lr=0.0 + 1e-12), total_steps=1)
    captured = {}

    def capture(*_):
        captured.update({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})

    opt.register_step_pre_hook(capture)
    ctx = UpdateContext(model, opt, sched, cfg, grad_clip=1e9, micro_batch_tokens=budget, pad_id=0)
    metrics = policy_update(ctx, trajs)
    return metrics, captured


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_loss_and_grads_do_not_depend_on_micro_batch_size(tiny_model_path, mode):
    cfg = AlgorithmConfig(loss_agg_mode=mode, entropy_coef=0.01)
    trajs = batch()
    m_all, g_all = _grads_after_update(tiny_model_path, trajs, budget=100_000, cfg=cfg)
    m_one, g_one = _grads_after_update(tiny_model_path, trajs, budget=64, cfg=cfg)
    assert m_one["micro_batches"] > m_all["micro_batches"] == 1
    assert m_one["loss"] == pytest.approx(m_all["loss"], rel=1e-4, abs=1e-6)
    assert g_all.keys() == g_one.keys() and g_all
    for name in g_all:
        torch.testing.assert_close(g_one[name], g_all[name], rtol=1e-4, atol=1e-6)


def test_token_logprobs_match_full_log_softmax(tiny_model_path):
    model = load_model(tiny_model_path)
    trajs = batch()
    mb = collate(trajs, [0, 1, 2], pad_id=0)
    stats = token_logprobs(model, mb.input_ids, mb.attention_mask, mb.target_mask, temperature=0.7, with_entropy=True)
    with torch.no_grad():
        logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits[:, :-1].float() / 0.7
    ref = torch.log_softmax(logits, -1).gather(-1, mb.input_ids[:, 1:, None]).squeeze(-1) * mb.target_mask
    torch.testing.assert_close(stats.logprobs.detach(), ref, rtol=1e-4, atol=1e-5)
    p = torch.softmax(logits, -1)
    ent = -(p * torch.log_softmax(logits, -1)).sum(-1) * mb.target_mask
    torch.testing.assert_close(stats.entropy.detach(), ent, rtol=1e-4, atol=1e-5)


def test_update_with_ppo_epochs_reports_clipping(tiny_model_path):
    model = load_model(tiny_model_path)
    model.train()
    opt, sched = build_optimizer(model, OptimConfig(lr=5e-2), total_steps=3)
    cfg = AlgorithmConfig(clip_ratio_low=0.01, clip_ratio_high=0.01)
    before = copy.deepcopy(model.state_dict())
    ctx = UpdateContext(model, opt, sched, cfg, grad_clip=1.0, micro_batch_tokens=4096, pad_id=0)
    metrics = policy_update(ctx, batch(), epochs=3)
    assert metrics["clipfrac"] > 0  # after the first step the ratio leaves [0.99, 1.01]
    changed = [n for n, v in model.state_dict().items() if not torch.equal(v, before[n])]
    assert changed


def _with_engine_logprobs(model_path, trajs, shift: float = 0.0) -> list[Trajectory]:
    """The batch with its engine log-probs set to the model's own (plus `shift`): an on-policy engine."""
    model = load_model(model_path)
    mb = collate(trajs, list(range(len(trajs))), pad_id=0)
    with torch.no_grad():
        lp = token_logprobs(model, mb.input_ids, mb.attention_mask, mb.target_mask).logprobs
    for i, t in enumerate(trajs):
        row = [0.0] + lp[i, : len(t.token_ids) - 1].tolist()  # logprobs[j] is that of token j
        t.logprobs = [v + shift if m else 0.0 for v, m in zip(row, t.loss_mask)]
    return trajs


def test_engine_logprobs_stand_in_for_the_old_policy_forward(tiny_model_path, monkeypatch):
    from agentrl_core.training import policy_update as pu

    cfg = AlgorithmConfig(clip_ratio_low=0.01, clip_ratio_high=0.01)
    calls = []
    real = pu._logprobs
    monkeypatch.setattr(pu, "_logprobs", lambda *a: calls.append(1) or real(*a))
    recompute = policy_update(_ctx(tiny_model_path, cfg), _with_engine_logprobs(tiny_model_path, batch()), epochs=2)
    forwards_recompute, calls[:] = len(calls), []
    engine = policy_update(_ctx(tiny_model_path, cfg, old_logprobs="engine"),
                           _with_engine_logprobs(tiny_model_path, batch()), epochs=2)
    assert forwards_recompute == 1 and calls == []  # the old-policy pass is gone
    assert engine["pg_loss"] == pytest.approx(recompute["pg_loss"], abs=1e-5)  # on-policy: the same loss
    off = policy_update(_ctx(tiny_model_path, cfg, old_logprobs="engine"),
                        _with_engine_logprobs(tiny_model_path, batch(), shift=-0.5), epochs=1)
    on = policy_update(_ctx(tiny_model_path, cfg, old_logprobs="engine"),
                       _with_engine_logprobs(tiny_model_path, batch()), epochs=1)
    assert on["clipfrac"] == 0.0  # ratio 1 up to numerics
    assert off["clipfrac"] > 0.3  # ratio exp(0.5) against the engine: clipped even in the first epoch


def test_engine_logprobs_refuse_rollouts_the_engine_did_not_see():
    from agentrl_core.config import RecipeConfig

    with pytest.raises(ValueError, match="old_logprobs=engine"):
        RecipeConfig.model_validate({"trainer": {"old_logprobs": "engine"},
                                     "algorithm": {"r3l_retry": True, "advantage": "r3l", "policy_loss": "opmd"}})
    with pytest.raises(ValueError, match="keep_in_context"):
        RecipeConfig.model_validate({"trainer": {"old_logprobs": "engine"},
                                     "experience": {"enabled": True, "keep_in_context": False}})


# -- the algorithm family's data-side pieces, wired into the update ----------------------------------
def _ctx(model_path, cfg: AlgorithmConfig, **kw):
    torch.manual_seed(0)
    model = load_model(model_path)
    model.train()
    opt, sched = build_optimizer(model, OptimConfig(lr=1e-12), total_steps=1)
    return UpdateContext(model, opt, sched, cfg, grad_clip=1e9, micro_batch_tokens=4096, pad_id=0, **kw)


def test_overlong_shaping_lowers_long_responses_rewards(tiny_model_path):
    from agentrl_core.training.policy_update import shaped_rewards

    trajs = batch()
    lengths = [t.response_tokens for t in trajs]
    cfg = AlgorithmConfig(overlong_buffer_len=4, overlong_penalty_factor=1.0)
    ctx = _ctx(tiny_model_path, cfg, max_response_tokens=10)
    got = shaped_rewards(ctx, trajs, [])
    # penalty_i = min(-(len_i - (10 - 4)) / 4, 0)
    expected = [t.reward + min(-(n - 6) / 4, 0.0) for t, n in zip(trajs, lengths)]
    assert got.tolist() == pytest.approx(expected, abs=1e-6)
    assert any(n > 6 for n in lengths)  # the case is exercised


def test_kl_in_the_reward_is_zero_against_an_identical_reference(tiny_model_path):
    from agentrl_core.training.policy_update import shaped_rewards

    trajs = batch()
    cfg = AlgorithmConfig(kl_reward_coef=0.5, kl_estimator="k1")
    ref = load_model(tiny_model_path)
    ctx = _ctx(tiny_model_path, cfg, ref_model=ref)
    mb = collate(trajs, list(range(len(trajs))), pad_id=0)
    assert shaped_rewards(ctx, trajs, [mb]).tolist() == pytest.approx([t.reward for t in trajs], abs=1e-5)
    with torch.no_grad():  # a different reference: r - 0.5 * sum_t (logp - ref_logp)
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    shaped = shaped_rewards(ctx, trajs, [mb])
    lp = token_logprobs(ctx.model, mb.input_ids, mb.attention_mask, mb.target_mask).logprobs.detach()
    rp = token_logprobs(ref, mb.input_ids, mb.attention_mask, mb.target_mask).logprobs.detach()
    expected = torch.tensor([t.reward for t in trajs]) - 0.5 * ((lp - rp) * mb.target_mask).sum(1)
    torch.testing.assert_close(shaped, expected, rtol=1e-4, atol=1e-5)


def test_success_filter_trains_only_successful_samples(tiny_model_path):
    cfg = AlgorithmConfig(advantage="raft", policy_loss="raft", sample_filter="success", success_threshold=1.0)
    metrics = policy_update(_ctx(tiny_model_path, cfg), batch())
    assert metrics["samples_trained"] == 2  # rewards [1, 0, 0, 1, .1, 0]
    nothing = policy_update(_ctx(tiny_model_path, cfg), [t for t in batch() if t.reward < 1])
    assert nothing == {"samples_trained": 0.0}


def test_tis_weights_the_loss_by_the_engine_gap(tiny_model_path):
    trajs = batch()
    base = AlgorithmConfig(norm_adv_by_std=False)
    m_plain, _ = _grads_after_update(tiny_model_path, trajs, 4096, base)
    # engine log-probs of -1 vs trainer log-probs around -log(vocab): w = min(exp(old - engine), cap) < 1
    m_tis, _ = _grads_after_update(tiny_model_path, trajs, 4096, AlgorithmConfig(norm_adv_by_std=False, tis_cap=2.0))
    assert m_tis["pg_loss"] != pytest.approx(m_plain["pg_loss"], abs=1e-9)
    assert abs(m_tis["pg_loss"]) < abs(m_plain["pg_loss"])


def test_token_level_advantages_whiten_over_the_whole_batch():
    from agentrl_core.training.policy_update import target_mask, token_advantages

    trajs = batch()
    rewards = torch.tensor([t.reward for t in trajs])
    adv = token_advantages(trajs, rewards, AlgorithmConfig(advantage="reinforce_pp"))
    mask = target_mask(trajs)
    vals = adv[mask > 0]
    assert vals.mean().item() == pytest.approx(0.0, abs=1e-5) and vals.std().item() == pytest.approx(1.0, abs=1e-3)
    assert torch.all(adv[mask == 0] == 0)
