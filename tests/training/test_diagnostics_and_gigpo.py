"""Update diagnostics are means over the rows that ran (skipping flat groups does not shrink them), per-turn
entropy, and a GiGPO update on scripted household episodes against hand-computed advantages."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from agentrl_core.config import AlgorithmConfig, OptimConfig
from agentrl_core.models import load_model, load_tokenizer
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout.trajectory import Trajectory
from agentrl_core.training.batching import collate
from agentrl_core.training.logprobs import token_logprobs
from agentrl_core.training.optim import build_optimizer
from agentrl_core.training.policy_update import UpdateContext, policy_update, token_advantages
from agentrl_core.training.session import open_session
from agentrl_core.training.sft import sft_update
from agentrl_core.training.update_diagnostics import Diagnostics
from tests.rollout.scripted import expert_plan, play_group
from tests.training.test_training_units import make_traj


def test_diagnostics_are_token_means_over_the_rows_given_by_hand():
    diag = Diagnostics()
    # micro-batch 1: row 0 has model tokens at columns 1, 2 (turn 0) and 4 (turn 1); row 1 at column 0 (turn 0)
    mask = torch.tensor([[0, 1, 1, 0, 1], [1, 0, 0, 0, 0]], dtype=torch.float32)
    turns = torch.tensor([[-1, 0, 0, -1, 1], [0, -1, -1, -1, -1]])
    entropy = torch.tensor([[9.0, 1.0, 2.0, 9.0, 4.0], [3.0, 9.0, 9.0, 9.0, 9.0]])
    clipped = torch.tensor([[1.0, 1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0]])
    gap = torch.tensor([[5.0, 0.5, 0.5, 5.0, 0.5], [0.1, 5.0, 5.0, 5.0, 5.0]])
    diag.add(mask, entropy, clipped, gap, turns)
    # micro-batch 2: one row, one token of turn 2; no clip statistic (a loss without clipping)
    diag.add(torch.tensor([[0.0, 1.0]]), torch.tensor([[9.0, 6.0]]), None, torch.tensor([[5.0, 0.3]]),
             torch.tensor([[-1, 2]]))
    got = diag.means()
    assert got["entropy"] == pytest.approx((1 + 2 + 4 + 3 + 6) / 5)
    assert got["clipfrac"] == pytest.approx(2 / 5)
    assert got["rollout_logp_diff"] == pytest.approx((0.5 * 3 + 0.1 + 0.3) / 5)
    assert {k: v for k, v in got.items() if k.startswith("entropy/")} == pytest.approx(
        {"entropy/turn_0": (1 + 2 + 3) / 3, "entropy/turn_1": 4.0, "entropy/turn_2": 6.0})
    assert Diagnostics().means() == {"entropy": 0.0, "clipfrac": 0.0, "rollout_logp_diff": 0.0}


def _traj(rng: random.Random, group: int, reward: float) -> Trajectory:
    t = Trajectory(task_id=group, env="scripted", group=group, sample=0)
    t.append([rng.randrange(500) for _ in range(6)], trainable=False)
    t.prompt_len = len(t.token_ids)
    for _ in range(2):
        start = len(t.token_ids)
        n = rng.randint(3, 6)
        t.append([rng.randrange(500) for _ in range(n)], trainable=True, logprobs=[-1.0] * n)
        t.record_turn(start, f"state-{group}")
        t.append([rng.randrange(500) for _ in range(3)], trainable=False)
    t.reward = reward
    return t


def _update(model_path: Path, trajs: list[Trajectory], cfg: AlgorithmConfig, lr: float = 1e-12):
    torch.manual_seed(0)
    model = load_model(model_path)
    model.train()
    opt, sched = build_optimizer(model, OptimConfig(lr=lr), total_steps=1)
    ref = load_model(model_path).eval() if cfg.kl_coef > 0 else None
    ctx = UpdateContext(model, opt, sched, cfg, grad_clip=1e9, micro_batch_tokens=4096, pad_id=0, ref_model=ref)
    return policy_update(ctx, trajs), model


def test_kl_on_signal_rows_skips_flat_groups_that_a_kl_on_every_row_trains(tiny_model_path):
    rng = random.Random(5)
    signal = [_traj(rng, 0, r) for r in (1.0, 0.0, 0.0)]
    flat = [_traj(rng, 1, 0.0) for _ in range(3)]
    every, _ = _update(tiny_model_path, signal + flat, AlgorithmConfig(kl_coef=0.1))
    on_signal, _ = _update(tiny_model_path, signal + flat, AlgorithmConfig(kl_coef=0.1, kl_rows="signal"))
    assert every["samples_backpropagated"] == 6 and on_signal["samples_backpropagated"] == 3
    assert on_signal["samples_trained"] == 6 and math.isfinite(on_signal["loss"])
    # a batch with no signal at all: nothing runs, the weights stay, the schedule still advances one step
    before = load_model(tiny_model_path).state_dict()
    none, model = _update(tiny_model_path, flat, AlgorithmConfig(kl_coef=0.1, kl_rows="signal"), lr=1e-2)
    assert none["samples_backpropagated"] == 0 and none["micro_batches"] == 0 and none["grad_norm"] == 0
    assert all(torch.equal(v, before[n]) for n, v in model.state_dict().items())
    moved, model = _update(tiny_model_path, flat, AlgorithmConfig(kl_coef=0.1), lr=1e-2)
    assert moved["samples_backpropagated"] == 3  # kl_rows: all trains the flat group's KL term


def test_entropy_does_not_shrink_when_flat_groups_are_skipped(tiny_model_path):
    rng = random.Random(4)
    signal = [_traj(rng, 0, r) for r in (1.0, 0.0, 0.0)]
    flat = [_traj(rng, 1, 1.0) for _ in range(3)]  # equal rewards: advantage 0, skipped with no KL/entropy term
    alone, _ = _update(tiny_model_path, signal, AlgorithmConfig())
    mixed, _ = _update(tiny_model_path, signal + flat, AlgorithmConfig())
    assert mixed["samples_backpropagated"] == 3 and mixed["samples_trained"] == 6
    assert alone["entropy"] > 0
    for key in ("entropy", "entropy/turn_0", "entropy/turn_1", "rollout_logp_diff"):
        assert mixed[key] == pytest.approx(alone[key], rel=1e-5), key
    # with an entropy term every row runs, and the metric is the token mean over all of them
    every, model = _update(tiny_model_path, signal + flat, AlgorithmConfig(entropy_coef=1e-3))
    assert every["samples_backpropagated"] == 6
    model = load_model(tiny_model_path)  # the weights before the (tiny) step
    mb = collate(signal + flat, list(range(6)), pad_id=0)
    with torch.no_grad():
        stats = token_logprobs(model, mb.input_ids, mb.attention_mask, mb.target_mask, with_entropy=True)
    assert every["entropy"] == pytest.approx(float((stats.entropy * mb.target_mask).sum() / mb.target_mask.sum()),
                                             rel=1e-4)


@pytest.fixture(scope="module")
def scripted_group(embedded_model_path: Path) -> list[Trajectory]:
    return play_group(ChatFormat(load_tokenizer(embedded_model_path)), expert_plan())


def test_gigpo_advantages_of_a_scripted_household_group_by_hand(scripted_group):
    # rewards [1, 0, 0] -> A^E = [2, -1, -1]/sqrt(3). Sample 0's step returns 0.95^(4-t) > 0, the others' 0.
    # Each shared state (start, countertop, and the plan's next two) holds one step of every sample, sample 0's
    # with the positive return: A^S = [2, -1, -1]/sqrt(3) there; states visited once ("Nothing happens",
    # sample 0's last) get A^S = 0.
    trajs = scripted_group
    assert [t.reward for t in trajs] == [1.0, 0.0, 0.0] and trajs[0].success
    unit = 1 / math.sqrt(3)
    want = [[4, 4, 4, 4, 2], [-2, -1, -2, -2, -2], [-2, -2, -1, -2, -2]]
    cfg = AlgorithmConfig(advantage="gigpo")
    adv = token_advantages(trajs, torch.tensor([t.reward for t in trajs]), cfg)
    expected = torch.zeros_like(adv)
    for row, (t, values) in enumerate(zip(trajs, want)):
        for (start, end), v in zip(t.action_spans, values):
            expected[row, start - 1:end - 1] = v * unit  # target column c scores token c + 1
    torch.testing.assert_close(adv, expected, atol=1e-5, rtol=0)


def test_a_gigpo_step_on_household_trains_every_parameter(scripted_group, tiny_model_path):
    cfg = AlgorithmConfig(advantage="gigpo")
    before = load_model(tiny_model_path).state_dict()
    metrics, model = _update(tiny_model_path, scripted_group, cfg, lr=1e-2)
    assert metrics["samples_backpropagated"] == 3 and math.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
    assert [k for k in metrics if k.startswith("entropy/")] == [f"entropy/turn_{k}" for k in range(5)]
    unchanged = [n for n, v in model.state_dict().items() if torch.equal(v, before[n])]
    assert not unchanged, unchanged


def test_raft_update_on_successes_is_the_sft_update_bit_for_bit(tmp_path, tiny_model_path):
    """The RL update path, given expert-like episodes that all succeed, takes exactly the SFT step: same loss,
    same gradient norm, same weights after three optimizer steps, up to float summation order (the check that
    ruled out a bug in the RL path when household RL made the agent worse)."""
    rng = random.Random(3)
    steps = [[make_traj(rng, group=i, reward=1.0) for i in range(4)] for _ in range(3)]
    algorithm = AlgorithmConfig(advantage="raft", policy_loss="raft")
    out = {}
    for arm in ("sft", "rl"):
        torch.manual_seed(0)
        s = open_session(tmp_path / arm, tiny_model_path, OptimConfig(lr=1e-3), total_steps=3, resume="auto")
        trace = []
        for demos in steps:
            if arm == "sft":
                m = sft_update(s, demos, grad_clip=1.0, micro_batch_tokens=64, pad_id=0)
            else:
                ctx = UpdateContext(model=s.model, optimizer=s.optimizer, scheduler=s.scheduler, algorithm=algorithm,
                                    grad_clip=1.0, micro_batch_tokens=64, pad_id=0)
                m = policy_update(ctx, demos)
            trace += [m["loss"], m["grad_norm"]]
        out[arm] = trace, {k: v.detach().clone() for k, v in s.model.state_dict().items()}
    assert out["sft"][0] == pytest.approx(out["rl"][0], rel=1e-6)
    start = load_model(tiny_model_path).state_dict()
    # the steps did change the weights
    assert max(float((v - start[k]).abs().max()) for k, v in out["sft"][1].items()) > 1e-4
    assert all(torch.allclose(v, out["rl"][1][k], rtol=0, atol=1e-6) for k, v in out["sft"][1].items())
