"""Recipes that cannot learn are refused when built, saying why and what to set; odd ones are logged once."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl_core import config_checks
from agentrl_core.algorithms import ADVANTAGE_BASELINES
from agentrl_core.config_checks import check_rl_stage, odd_settings
from agentrl_core.errors import ConfigError
from agentrl_core.recipes import load_recipe

ROOT = Path(__file__).resolve().parent.parent
GROUP_ESTIMATORS = sorted(n for n, b in ADVANTAGE_BASELINES.items() if b == "group")


@pytest.mark.parametrize("advantage", GROUP_ESTIMATORS)
def test_a_group_estimator_needs_two_samples_per_group(advantage: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_recipe("household_grpo", [f"algorithm.advantage={advantage}", "rollout.group_size=1"])
    message = str(err.value)
    assert f"algorithm.advantage={advantage}" in message and "every advantage is 0" in message
    assert "set rollout.group_size to 2 or more" in message
    assert load_recipe("household_grpo", [f"algorithm.advantage={advantage}", "rollout.group_size=2"])


def test_estimators_without_a_group_train_with_one_sample() -> None:
    for advantage in ("raft", "r3l", "reinforce_pp"):
        assert load_recipe(None, [f"algorithm.advantage={advantage}", "rollout.group_size=1"])


def test_a_batch_whitened_estimator_needs_two_sequences() -> None:
    with pytest.raises(ConfigError, match="whitens over the batch.*= 1 sequence"):
        load_recipe(None, ["algorithm.advantage=reinforce_pp", "rollout.group_size=1", "rollout.tasks_per_step=1"])


def test_dynamic_sampling_with_groups_of_one_would_drop_every_group() -> None:
    with pytest.raises(ConfigError, match="dynamic_sampling.*always is"):
        load_recipe(None, ["algorithm.advantage=raft", "algorithm.dynamic_sampling=true", "rollout.group_size=1"])


def test_the_python_api_refuses_at_construction_too() -> None:
    from agentrl_core.config import RecipeConfig

    with pytest.raises(ValueError, match="rollout.group_size=1 gives it none"):
        RecipeConfig(rollout={"group_size": 1})


def test_zero_rl_steps_are_refused_where_a_grpo_stage_is_requested(tmp_path: Path) -> None:
    cfg = load_recipe("household_grpo", ["trainer.steps=0"])  # fine for the SFT pipeline, which ignores it
    with pytest.raises(ConfigError, match="trainer.steps=0, but this pipeline trains a GRPO stage.*sft"):
        check_rl_stage(cfg)
    from flows.train import train

    with pytest.raises(ConfigError, match="trainer.steps=0"):
        train.fn(recipe_file="household_grpo", overrides=[f"run.root={tmp_path}", "trainer.steps=0"])
    assert list(tmp_path.iterdir()) == []


def test_a_curriculum_stage_with_zero_steps_is_refused() -> None:
    from agentrl_core.curriculum import load_curriculum, stage_recipe

    with pytest.raises(ConfigError, match="trainer.steps=0"):
        stage_recipe(load_curriculum("bfcl"), 0, ["trainer.steps=0"])


@pytest.mark.parametrize("override, words", [
    ("rollout.group_size=1", ["rollout.group_size=1 gives it none", "2 or more"]),
    ("trainer.steps=0", ["trainer.steps=0", "set trainer.steps to 1 or more"]),
])
@pytest.mark.slow
def test_the_cli_refuses_them_fast_and_writes_nothing(tmp_path: Path, override: str, words: list[str]) -> None:
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "agentrl.cli", "run", "household_grpo", f"run.root={tmp_path}/runs",
                          override], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "AGENTRL_HOME": str(tmp_path / "home"), "COLUMNS": "400"})
    assert out.returncode == 2, out.stderr
    for word in words:
        assert word in out.stderr, (word, out.stderr)
    assert time.monotonic() - start < 30
    assert list(tmp_path.iterdir()) == []


ODD = [
    (["rollout.sampling.temperature=0"], "greedy) makes a task's group_size samples identical"),
    (["eval.k=4"], "pass@k equals pass@1"),
    (["algorithm.kl_coef=0.1", "algorithm.kl_reward_coef=0.1"], "penalised twice"),
    (["algorithm.sample_filter=success"], "advantages of what is kept are all 0"),
    (["algorithm.kl_rows=signal", "algorithm.kl_coef=0"], "there is no KL term"),
    (["rollout.tasks_per_step=100"], "each step trains on 64 tasks"),
    (["sft.demos=100"], "SFT gets 64 demonstrations"),
    (["trainer.optim.warmup_steps=4"], "never reaches trainer.optim.lr"),
    (["experience.enabled=true", "experience.rollout_ratio=0.1"], "gives 0 of 4 samples"),
    (["distributed.backend=ray", "distributed.ray_token_file=/tmp/t"], "ignores the file"),
    (["distributed.trainer_resource=agentrl_trainer"], "set distributed.backend=ray to use them"),
]


@pytest.mark.parametrize("overrides, words", ODD, ids=[o[0] for o, _ in ODD])
def test_odd_settings_are_said_once_before_the_work(overrides: list[str], words: str, caplog, monkeypatch) -> None:
    monkeypatch.setattr(config_checks, "_SAID", set())
    with caplog.at_level(logging.WARNING, logger="agentrl_core.config_checks"):
        cfg = load_recipe(None, overrides)
        load_recipe(None, overrides)  # a recipe is validated again by the flow: not said twice
    said = [r.getMessage() for r in caplog.records if words in r.getMessage()]
    assert len(said) == 1, caplog.text
    assert any(words in note for note in odd_settings(cfg))


def test_the_defaults_are_not_odd() -> None:
    assert odd_settings(load_recipe(None)) == []
