"""Derived per-step metrics of the GRPO loop: token rates of each phase and the samples' policy lag."""

from __future__ import annotations

from collections.abc import Sequence

from agentrl_core.rollout import Trajectory
from agentrl_core.rollout.episode import WEIGHT_VERSIONS


def rollout_rates(trajs: Sequence[Trajectory], seconds: float) -> dict[str, float]:
    """rollout_tokens_per_s = tokens the model generated / seconds of the rollout phase."""
    return {"rollout_tokens_per_s": sum(t.response_tokens for t in trajs) / max(1e-9, seconds)}


def train_rates(usable: Sequence[Trajectory], seconds: float) -> dict[str, float]:
    """train_tokens_per_s = tokens trained on (prompts, observations and replies) / seconds of the update."""
    return {"train_tokens_per_s": sum(len(t.token_ids) for t in usable) / max(1e-9, seconds)}


def sample_lags(weight_versions: Sequence[Sequence[int]], trained_version: int) -> tuple[int, int] | None:
    """(largest, smallest) lag over a sample's tokens: trained_version − (first turn's first version, last
    turn's last version), from the (first, last) stamps of its turns; None for a sample without stamps."""
    if not weight_versions:
        return None
    return trained_version - int(weight_versions[0][0]), trained_version - int(weight_versions[-1][1])


def lag_metrics(trajs: Sequence[Trajectory], trained_version: int, launched_version: int) -> dict[str, float]:
    """lag/max and lag/mean over the samples' first tokens, lag/last_mean over their last tokens, for a batch the
    trainer trains at `trained_version`. From each sample's weight-version stamps where the engine keeps them
    (weights taken in flight); else every token has the version the rollout began with, `launched_version`."""
    lags = [lag for t in trajs if (lag := sample_lags(t.extra.get(WEIGHT_VERSIONS, []), trained_version))]
    if not lags:
        lag = float(trained_version - launched_version)
        return {"lag/max": lag, "lag/mean": lag, "lag/last_mean": lag} if trajs else {}
    first, last = [a for a, _ in lags], [b for _, b in lags]
    return {"lag/max": float(max(first)), "lag/mean": sum(first) / len(first), "lag/last_mean": sum(last) / len(last)}
