"""GiGPO against hand-computed values: episode and step advantages, discounted returns, anchors, token placement."""

from __future__ import annotations

from statistics import mean, stdev

import pytest
import torch

from agentrl_core.algorithms import (
    ADVANTAGE_ESTIMATORS,
    STEP_ADVANTAGE_ESTIMATORS,
    StepBatch,
    StepTurn,
    advantage_baseline,
    advantage_names,
    batch_advantage,
    discounted_returns,
    gigpo_advantage,
    grpo_advantage,
    register_advantage_estimator,
    register_step_advantage_estimator,
    step_advantages,
)
from agentrl_core.config import AlgorithmConfig
from agentrl_core.errors import ConfigError

EPS = 1e-12  # small enough that hand values need no eps term


def cfg(**kw) -> AlgorithmConfig:
    return AlgorithmConfig(advantage="gigpo", epsilon=EPS, **{"gigpo_gamma": 0.5, **kw})


def z(xs: list[float]) -> list[float]:
    """(x - mean) / unbiased std: the normalisation both GiGPO levels use."""
    m, s = mean(xs), stdev(xs)
    return [(x - m) / s for x in xs]


# Token columns of every row (T = 10): 0-1 prompt, then turns of 2 action tokens each separated by 2 env
# tokens: turn 0 = [2, 4), env [4, 6), turn 1 = [6, 8), env [8, 10) ... Rows with 3 turns are wider.
def turns(states: list[str], rewards: list[float]) -> list[StepTurn]:
    return [StepTurn(2 + 4 * k, 4 + 4 * k, r, s) for k, (s, r) in enumerate(zip(states, rewards))]


def mask_row(n_turns: int, width: int) -> list[float]:
    row = [0.0] * width
    for k in range(n_turns):
        row[2 + 4 * k] = row[3 + 4 * k] = 1.0
    return row


def group_of_three() -> StepBatch:
    """Group 0: three episodes of one task that pass through shared states.

    ep0: states [A, B],    turn rewards [0, 1]     R = 1
    ep1: states [A, C, B], turn rewards [0, 0, 0]  R = 0
    ep2: states [A, B],    turn rewards [0.25, 0]  R = 0.5  (R exceeds the turn rewards, as after reward
                                                             shaping: the other 0.25 counts at its last step)
    Group 7 (another task, also starting in a state keyed "A"): two episodes with equal returns.
    """
    rows = [(["A", "B"], [0.0, 1.0]), (["A", "C", "B"], [0.0, 0.0, 0.0]), (["A", "B"], [0.25, 0.0]),
            (["A", "D"], [0.0, 1.0]), (["A", "D"], [0.0, 1.0])]
    mask = torch.tensor([mask_row(len(states), 14) for states, _ in rows])
    return StepBatch(torch.tensor([1.0, 0.0, 0.5, 1.0, 1.0]), torch.tensor([0, 0, 0, 7, 7]), mask,
                     [turns(states, rewards) for states, rewards in rows])


def test_discounted_returns_by_hand():
    assert discounted_returns([0.0, 0.0, 1.0], 0.5) == [0.25, 0.5, 1.0]
    assert discounted_returns([1.0, 2.0], 1.0) == [3.0, 2.0]
    assert discounted_returns([], 0.9) == []


def test_step_advantages_by_hand():
    # gamma 0.5; step rewards (last step topped up to R): ep0 [0, 1], ep1 [0, 0, 0], ep2 [0.25, 0.25]
    # returns: ep0 [0.5, 1], ep1 [0, 0, 0], ep2 [0.25 + 0.5 * 0.25, 0.25] = [0.375, 0.25]
    # anchors of group 0: A = {ep0 t0: 0.5, ep1 t0: 0, ep2 t0: 0.375}; B = {ep0 t1: 1, ep1 t2: 0, ep2 t1: 0.25};
    # C = {ep1 t1} alone -> 0. Group 7: A and D each hold two equal returns -> 0 (and never mix with group 0's A).
    a, b = z([0.5, 0.0, 0.375]), z([1.0, 0.0, 0.25])
    got = step_advantages(group_of_three(), cfg())
    want = [[a[0], b[0]], [a[1], 0.0, b[1]], [a[2], b[2]], [0.0, 0.0], [0.0, 0.0]]
    for g, w in zip(got, want):
        assert g == pytest.approx(w, abs=1e-9)


def test_combined_advantage_per_action_token_and_zero_on_env_tokens():
    batch = group_of_three()
    a_e = z([1.0, 0.0, 0.5])  # R = [1, 0, 0.5]: mean 0.5, std 0.5 -> [1, -1, 0]
    assert a_e == pytest.approx([1.0, -1.0, 0.0])
    a, b = z([0.5, 0.0, 0.375]), z([1.0, 0.0, 0.25])
    adv = gigpo_advantage(batch, cfg(gigpo_step_weight=0.5))
    expected = torch.zeros(5, 14)
    per_turn = [[1 + 0.5 * a[0], 1 + 0.5 * b[0]], [-1 + 0.5 * a[1], -1.0, -1 + 0.5 * b[1]],
                [0.5 * a[2], 0.5 * b[2]], [0.0, 0.0], [0.0, 0.0]]
    for row, values in enumerate(per_turn):
        for k, v in enumerate(values):
            expected[row, 2 + 4 * k: 4 + 4 * k] = v
    torch.testing.assert_close(adv, expected, atol=1e-6, rtol=0)
    assert (adv[batch.mask == 0] == 0).all()


def test_without_step_weight_or_turns_it_is_grpo():
    batch = group_of_three()
    grpo = grpo_advantage(batch.rewards, batch.groups, batch.mask, cfg())
    torch.testing.assert_close(gigpo_advantage(batch, cfg(gigpo_step_weight=0.0)), grpo)
    no_turns = StepBatch(batch.rewards, batch.groups, batch.mask, [[] for _ in batch.turns])
    torch.testing.assert_close(gigpo_advantage(no_turns, cfg()), grpo)


def test_without_std_normalisation_both_levels_only_centre():
    adv = gigpo_advantage(group_of_three(), cfg(norm_adv_by_std=False))
    # ep0 turn 0: (1 - 0.5) + (0.5 - mean(0.5, 0, 0.375)); turn 1: 0.5 + (1 - mean(1, 0, 0.25))
    assert float(adv[0, 2]) == pytest.approx(0.5 + 0.5 - 0.875 / 3)
    assert float(adv[0, 6]) == pytest.approx(0.5 + 1 - 1.25 / 3)


def test_equal_returns_give_exactly_zero_despite_rounding():
    # 0.1 * 3 / 3 != 0.1 in floating point; a shared state whose returns are equal must still give 0
    turns_ = [[StepTurn(1, 2, 0.1, "s")] for _ in range(3)]
    batch = StepBatch(torch.tensor([0.1, 0.1, 0.1]), torch.zeros(3, dtype=torch.long), torch.ones(3, 2), turns_)
    assert step_advantages(batch, AlgorithmConfig()) == [[0.0], [0.0], [0.0]]
    assert (gigpo_advantage(batch, AlgorithmConfig()) == 0).all()


def test_every_estimator_runs_through_the_batch_interface_unchanged():
    batch = group_of_three()
    for name in ADVANTAGE_ESTIMATORS:
        direct = ADVANTAGE_ESTIMATORS[name](batch.rewards, batch.groups, batch.mask, cfg())
        torch.testing.assert_close(batch_advantage(name)(batch, cfg()), direct, rtol=0, atol=0)
    assert batch_advantage("gigpo") is gigpo_advantage


def test_gigpo_is_a_group_estimator_and_names_are_one_space():
    assert "gigpo" in STEP_ADVANTAGE_ESTIMATORS and "gigpo" not in ADVANTAGE_ESTIMATORS
    assert "gigpo" in advantage_names() and "grpo" in advantage_names()
    assert advantage_baseline("gigpo") == "group"
    with pytest.raises(ConfigError, match="unknown advantage 'nope'; valid: drgrpo, gigpo, grpo"):
        batch_advantage("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_step_advantage_estimator("grpo")(gigpo_advantage)
    with pytest.raises(ValueError, match="already registered"):
        register_advantage_estimator("gigpo")(grpo_advantage)


def test_step_batch_refuses_a_turn_list_per_episode_mismatch():
    with pytest.raises(ValueError, match="one list of turns per episode"):
        StepBatch(torch.zeros(2), torch.zeros(2, dtype=torch.long), torch.ones(2, 3), [[]])


def test_config_defaults_and_bounds():
    c = AlgorithmConfig(advantage="gigpo")
    assert (c.gigpo_gamma, c.gigpo_step_weight) == (0.95, 1.0)
    for bad in ({"gigpo_gamma": 1.5}, {"gigpo_step_weight": -1.0}):
        with pytest.raises(ValueError):
            AlgorithmConfig(**bad)
