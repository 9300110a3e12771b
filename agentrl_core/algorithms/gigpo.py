"""GiGPO (Group-in-Group Policy Optimization, verl-agent, arXiv 2505.10978): step-level credit from shared states.

For the N episodes of one task (one group g, same initial state), with no critic and no extra rollouts:

    episode level   A^E_i   = (R_i - mean_g R) / (std_g R + eps)          (GRPO's advantage)
    step level      G_i,t   = sum_{k>=0} gamma^k r_i,t+k                   (discounted return within episode i)
                    A^S_i,t = (G_i,t - mean_S G) / (std_S G + eps)         S = the steps of group g taken in
                                                                            the same state as step (i,t)
    combined        A_i,t   = A^E_i + omega * A^S_i,t                       on the action tokens of turn t

"The same state" is an exact match of the observation the action was taken in (its key,
`rollout.trajectory.observation_key`): every episode of a group shares turn 0's state, and later
states recur when episodes pass through the same observation. A step group of one step, or whose
returns are all equal, gets A^S = 0, so a step that shares no state keeps A^E alone. std is the
unbiased one (as GRPO's); with `norm_adv_by_std: false` both levels only subtract the mean
(Dr.GRPO style). gamma = `cfg.gigpo_gamma` (0.95), omega = `cfg.gigpo_step_weight` (1.0).

Step rewards r_i,t are the environment's per-turn rewards, and the last turn also receives
R_i - sum_t r_i,t, so that they always sum to the episode return R_i: an environment that pays
only at the end has its reward counted at the last step, and reward shaping (overlong penalty,
KL in the reward) lands there too. Tokens of environment turns (mask 0) get exactly 0; model
tokens of an episode recorded without turns get A^E alone.
"""

from __future__ import annotations

from typing import Sequence

import torch

from agentrl_core.algorithms.advantages import group_has_spread, group_stats, grpo_advantage
from agentrl_core.algorithms.registry import AlgorithmParams, register_step_advantage_estimator
from agentrl_core.algorithms.step_batch import StepBatch, StepTurn


def step_rewards(turns: Sequence[StepTurn], episode_return: float) -> list[float]:
    """r_t of each turn, the last one also taking R - sum_t r_t, so that sum_t r_t = R (the episode return)."""
    rewards = [float(t.reward) for t in turns]
    if rewards:
        rewards[-1] += float(episode_return) - sum(rewards)
    return rewards


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """G_t = sum_{k>=0} gamma^k r_{t+k} for every t, by G_t = r_t + gamma * G_{t+1} from the end."""
    returns, running = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        returns[t] = running
    return returns


def normalise_within(values: torch.Tensor, ids: torch.Tensor, eps: float, by_std: bool) -> torch.Tensor:
    """(x - mean_S) / (std_S + eps) within each set S of equal `ids` (x - mean_S without by_std); exactly 0
    in a set of one or whose values are all equal (so rounding in the mean cannot fake a signal).
    Shapes: values [N] float, ids [N] long -> [N]."""
    stats = group_stats(values, ids)
    centred = values - stats.mean
    adv = centred / (stats.std + eps) if by_std else centred
    return torch.where(group_has_spread(values, ids), adv, values.new_zeros(()))


def step_advantages(batch: StepBatch, cfg: AlgorithmParams) -> list[list[float]]:
    """A^S_i,t for every turn of every episode (the module docstring's step level), as lists per episode."""
    returns: list[float] = []
    anchors: list[int] = []
    anchor_ids: dict[tuple[int, str], int] = {}
    for group, turns, ret in zip(batch.groups.tolist(), batch.turns, batch.rewards.tolist()):
        returns += discounted_returns(step_rewards(turns, ret), float(cfg.gigpo_gamma))
        anchors += [anchor_ids.setdefault((group, t.state), len(anchor_ids)) for t in turns]
    if not returns:
        return [[] for _ in batch.turns]
    flat = normalise_within(torch.tensor(returns, dtype=torch.float64), torch.tensor(anchors), cfg.epsilon,
                            cfg.norm_adv_by_std).tolist()
    out, at = [], 0
    for turns in batch.turns:
        out.append(flat[at:at + len(turns)])
        at += len(turns)
    return out


@register_step_advantage_estimator("gigpo", baseline="group")
def gigpo_advantage(batch: StepBatch, cfg: AlgorithmParams) -> torch.Tensor:
    """GiGPO: A_i,t = A^E_i + omega * A^S_i,t on turn t's action tokens (formulas in the module docstring).

    A^E is exactly `grpo_advantage` (same epsilon and norm_adv_by_std; 0 exactly for a group whose returns
    are all equal, like A^S for a step group). Shapes: batch.rewards [B],
    batch.groups [B], batch.mask [B,T] -> [B,T], 0 where mask == 0.
    """
    out = grpo_advantage(batch.rewards, batch.groups, batch.mask, cfg).clone()
    weight = float(cfg.gigpo_step_weight)
    for row, (turns, adv) in enumerate(zip(batch.turns, step_advantages(batch, cfg))):
        for turn, a_s in zip(turns, adv):
            out[row, turn.start:turn.end] += weight * a_s
    return torch.where(batch.mask != 0, out, out.new_zeros(()))
