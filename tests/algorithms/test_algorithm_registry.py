"""Registries: unknown names fail with the valid ones, decorators register, every member obeys its family signature."""

from __future__ import annotations

import pytest
import torch

import agentrl_core.algorithms as algorithms
from agentrl_core.algorithms import (
    ADVANTAGE_ESTIMATORS,
    AGGREGATIONS,
    KL_ESTIMATORS,
    POLICY_LOSSES,
    REGISTRIES,
    LossNorm,
    get,
    get_advantage_estimator,
    get_aggregation,
    get_kl_estimator,
    get_policy_loss,
    register_policy_loss,
)
from agentrl_core.config import AlgorithmConfig
from agentrl_core.errors import ConfigError

CFG = AlgorithmConfig()


def test_builtin_members_are_registered():
    assert {"grpo", "rloo"} <= set(ADVANTAGE_ESTIMATORS)
    assert {"ppo_clip", "vanilla_pg"} <= set(POLICY_LOSSES)
    assert {"k1", "k2", "k3"} <= set(KL_ESTIMATORS)
    assert {"token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"} <= set(AGGREGATIONS)


def test_config_defaults_resolve():
    assert get_advantage_estimator(CFG.advantage) is ADVANTAGE_ESTIMATORS["grpo"]
    assert get_policy_loss(CFG.policy_loss) is POLICY_LOSSES["ppo_clip"]
    assert get_kl_estimator(CFG.kl_estimator) is KL_ESTIMATORS["k3"]
    assert get_aggregation(CFG.loss_agg_mode) is AGGREGATIONS["token-mean"]


@pytest.mark.parametrize(
    "getter, kind, registry",
    [
        (get_advantage_estimator, "advantage", ADVANTAGE_ESTIMATORS),
        (get_policy_loss, "policy_loss", POLICY_LOSSES),
        (get_kl_estimator, "kl_estimator", KL_ESTIMATORS),
        (get_aggregation, "loss_agg_mode", AGGREGATIONS),
    ],
)
def test_unknown_name_lists_valid_names(getter, kind, registry):
    expected = f"unknown {kind} 'nope'; valid: {', '.join(sorted(registry))}"
    for call in (lambda: getter("nope"), lambda: get(kind, "nope")):
        with pytest.raises(ConfigError) as info:
            call()
        assert str(info.value) == expected


def test_unknown_policy_loss_message_example():
    with pytest.raises(ConfigError, match=r"unknown policy_loss 'ppo'; valid: .*ppo_clip, .*vanilla_pg"):
        get_policy_loss("ppo")


def test_unknown_kind():
    with pytest.raises(ConfigError, match="unknown algorithm registry 'optimizer'; valid: advantage, kl_estimator"):
        get("optimizer", "adam")


def test_register_decorator_adds_and_refuses_duplicates():
    try:

        @register_policy_loss("test_only_loss")
        def my_loss(logp, old_logp, advantages, mask, cfg):
            return -advantages * logp, {}

        assert get_policy_loss("test_only_loss") is my_loss
        with pytest.raises(ValueError, match="already registered"):
            register_policy_loss("test_only_loss")(my_loss)
    finally:
        POLICY_LOSSES.pop("test_only_loss", None)


def test_public_names_importable_from_package():
    for name in algorithms.__all__:
        assert hasattr(algorithms, name), name
    assert set(REGISTRIES) == {"advantage", "policy_loss", "kl_estimator", "loss_agg_mode"}


# ---- conformance: every registered member (built-in or added later) follows its family's contract

MASK = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 1, 0]])
LOGP = -torch.rand(3, 4, generator=torch.Generator().manual_seed(1)) - 0.1


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_advantage_contract(name):
    adv = ADVANTAGE_ESTIMATORS[name](torch.tensor([1.0, 0.0, 0.5]), torch.tensor([4, 4, 1]), MASK, CFG)
    assert adv.shape == MASK.shape and adv.dtype.is_floating_point
    assert (adv[MASK == 0] == 0).all() and torch.isfinite(adv).all()


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_policy_loss_contract(name):
    logp = LOGP.clone().requires_grad_(True)
    loss, stats = POLICY_LOSSES[name](logp, LOGP - 0.05, torch.randn(3, 4), MASK, CFG)
    assert loss.shape == MASK.shape and (loss[MASK == 0] == 0).all()
    assert {"ratio", "ppo_kl"} <= set(stats)
    for key, stat in stats.items():
        assert stat.shape == MASK.shape and not stat.requires_grad and (stat[MASK == 0] == 0).all(), key
    loss.sum().backward()
    assert logp.grad is not None


@pytest.mark.parametrize("name", sorted(KL_ESTIMATORS))
def test_kl_contract(name):
    assert KL_ESTIMATORS[name](LOGP, LOGP - 0.3).shape == LOGP.shape


@pytest.mark.parametrize("name", sorted(AGGREGATIONS))
def test_aggregation_contract(name):
    out = AGGREGATIONS[name](LOGP, MASK, LossNorm.for_batch(MASK, 4))
    assert out.shape == () and torch.isfinite(out)


def test_algorithm_config_provides_every_setting_the_functions_read():
    """algorithms/ types its cfg as the AlgorithmParams protocol (it never imports the config); the real
    AlgorithmConfig must keep every one of those fields, with a compatible type."""
    from typing import get_type_hints

    params = get_type_hints(algorithms.AlgorithmParams)
    fields = AlgorithmConfig.model_fields
    missing = sorted(set(params) - set(fields))
    assert not missing, f"AlgorithmConfig lacks {missing}, which the algorithm functions read"
    for name, kind in params.items():
        value = getattr(CFG, name)
        assert isinstance(value, kind), f"AlgorithmConfig.{name} is {type(value).__name__}, the protocol says {kind}"


def test_every_estimator_declares_what_its_baseline_needs():
    builtin = {"grpo", "drgrpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "opmd", "r3l", "raft"}
    assert builtin <= set(algorithms.ADVANTAGE_BASELINES)
    assert {n for n, b in algorithms.ADVANTAGE_BASELINES.items() if b == "group"} == {
        "grpo", "drgrpo", "rloo", "reinforce_pp_baseline", "opmd", "gigpo"}
    assert algorithms.advantage_baseline("reinforce_pp") == "batch"
    with pytest.raises(ConfigError, match="valid: drgrpo, gigpo, grpo"):
        algorithms.advantage_baseline("nope")


def test_a_step_estimator_asked_for_as_a_sequence_one_says_how_to_call_it():
    with pytest.raises(ConfigError, match="'gigpo' is a step estimator.*batch_advantage"):
        get_advantage_estimator("gigpo")
