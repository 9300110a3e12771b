"""RAGEN's variance filter: which groups train, and how the rollout phase applies it."""

from __future__ import annotations

import pytest
import torch

from agentrl_core.algorithms import groups_to_keep, top_variance_keep
from agentrl_core.errors import ConfigError
from agentrl_core.recipes import load_recipe


def test_the_groups_of_largest_reward_std_are_kept_whole():
    # stds: group 7 {0, 1} 0.707, group 3 {0, 0, 1} 0.577, group 5 all 1 -> 0, group 9 {0, 0.5} 0.354
    r = torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.5])
    g = torch.tensor([7, 7, 3, 3, 3, 5, 5, 9, 9])
    assert top_variance_keep(r, g, 0.5).tolist() == [True, True, True, True, True, False, False, False, False]
    assert top_variance_keep(r, g, 0.25).tolist() == [True, True] + [False] * 7
    assert top_variance_keep(r, g, 0.75).tolist() == [True] * 5 + [False, False, True, True]
    assert top_variance_keep(r, g, 1.0).all()


def test_equal_spreads_keep_the_lower_group_id_and_singletons_count_as_flat():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 4.0, 0.0, 0.0])
    g = torch.tensor([8, 8, 2, 2, 6, 4, 4])  # 8 and 2 equal spread; 6 a singleton; 4 flat
    assert top_variance_keep(r, g, 0.25).tolist() == [False, False, True, True, False, False, False]
    assert top_variance_keep(r, g, 0.75).tolist() == [True, True, True, True, False, True, True]  # then id 4 < 6


def test_how_many_groups_a_ratio_keeps():
    assert [groups_to_keep(g, 0.25) for g in (0, 1, 2, 3, 4, 8, 10)] == [0, 1, 1, 1, 1, 2, 3]  # 2.5 rounds up
    assert groups_to_keep(8, 1.0) == 8 and groups_to_keep(3, 0.01) == 1
    with pytest.raises(ValueError, match=r"ratio must be in \(0, 1\]"):
        groups_to_keep(4, 0.0)
    with pytest.raises(ValueError, match="both be"):
        top_variance_keep(torch.ones(3), torch.zeros(2, dtype=torch.long), 0.5)
    assert top_variance_keep(torch.tensor([]), torch.tensor([], dtype=torch.long), 0.5).tolist() == []


def test_the_rollout_phase_trains_only_the_filtered_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrl_core.grpo import rollout as grpo
    from agentrl_core.rollout import Trajectory

    rewards = {0: [1.0, 1.0], 1: [0.0, 1.0], 2: [0.0, 0.2], 3: [0.0, 0.0]}

    def fake_round(executor, factory, tasks, step, round_, cfg):  # noqa: ANN001
        return [Trajectory(task_id=g, env="countdown", group=g, sample=s, token_ids=[1, 2, 3], loss_mask=[0, 1, 1],
                           logprobs=[0.0, -1.0, -1.0], reward=r) for g, rs in rewards.items() for s, r in enumerate(rs)]

    monkeypatch.setattr(grpo, "_rollout_round", fake_round)
    cfg = load_recipe("countdown_grpo", ["rollout.tasks_per_step=4", "rollout.group_size=2",
                                         "algorithm.rollout_filter_ratio=0.5"])
    every, train, rounds = grpo.rollout_batch(None, None, list(range(100)), 0, cfg)
    assert len(every) == 8 and rounds == 1  # every episode is still logged and measured
    assert [(t.group, t.sample) for t in train] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    off = load_recipe("countdown_grpo", ["rollout.tasks_per_step=4", "rollout.group_size=2"])
    assert len(grpo.rollout_batch(None, None, list(range(100)), 0, off)[1]) == 8


def test_the_filter_needs_groups_to_compare():
    with pytest.raises(ConfigError, match="rollout_filter_ratio=0.5 keeps the groups.*group_size=1 never varies"):
        load_recipe(None, ["algorithm.advantage=raft", "algorithm.rollout_filter_ratio=0.5", "rollout.group_size=1"])
    with pytest.raises(ValueError, match="rollout_filter_ratio"):
        load_recipe(None, ["algorithm.rollout_filter_ratio=0"])
