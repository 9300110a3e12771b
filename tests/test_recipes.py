"""Recipes: YAML + dotted overrides, validated with errors that name the key and the valid choices."""

import time
from pathlib import Path

import pytest

from agentrl_core.config import RecipeConfig
from agentrl_core.errors import ConfigError
from agentrl_core.recipes import RECIPES_DIR, load_recipe, parse_override


def test_every_shipped_recipe_validates():
    recipes = sorted(RECIPES_DIR.glob("*.yaml"))
    assert recipes, "recipes/ is empty"
    for path in recipes:
        assert isinstance(load_recipe(path), RecipeConfig)


def test_every_shipped_recipe_and_curriculum_stage_can_train_and_is_not_odd():
    """Each passes the cross-field checks of a pipeline with a GRPO stage, with no odd-setting note."""
    from agentrl_core.config_checks import check_rl_stage, odd_settings
    from agentrl_core.curriculum import CURRICULA_DIR, load_curriculum, stage_recipe

    built = {path.name: load_recipe(path) for path in sorted(RECIPES_DIR.glob("*.yaml"))}
    for path in sorted(CURRICULA_DIR.glob("*.yaml")):
        cur = load_curriculum(path)
        built.update({f"{path.name}:{s.name}": stage_recipe(cur, i) for i, s in enumerate(cur.stages)})
    assert any(":" in name for name in built), "recipes/curricula/ is empty"
    for name, cfg in built.items():
        check_rl_stage(cfg)
        assert odd_settings(cfg) == [], name


def test_overrides_apply_with_types():
    cfg = load_recipe(None, ["trainer.optim.lr=1e-6", "rollout.group_size=8", "env.name=countdown", "sft.enabled=false"])
    assert cfg.trainer.optim.lr == pytest.approx(1e-6)
    assert cfg.rollout.group_size == 8 and cfg.env.name == "countdown" and cfg.sft.enabled is False


def test_parse_override_needs_equals():
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_override("trainer.lr")


@pytest.mark.parametrize("override, words", [
    ("trainer.lrr=1", ["trainer.lrr", "optim", "steps"]),
    ("nope.x=1", ["nope", "trainer", "rollout"]),
    ("trainer.steps=many", ["trainer.steps", "integer"]),
    ("env.name=minecraft", ["minecraft", "countdown", "household"]),
    ("algorithm.policy_loss=ppo", ["ppo", "ppo_clip"]),
    ("rollout.group_size=0", ["rollout.group_size", "greater than or equal to 1"]),
])
def test_bad_overrides_name_the_key_and_choices(override, words):
    start = time.monotonic()
    with pytest.raises(ConfigError) as err:
        load_recipe(None, [override])
    assert time.monotonic() - start < 10
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_unknown_key_in_yaml(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("trainer:\n  stepz: 3\n")
    with pytest.raises(ConfigError, match="trainer.stepz"):
        load_recipe(path)


def test_missing_recipe_lists_known_ones():
    with pytest.raises(ConfigError, match="household_grpo"):
        load_recipe("no_such_recipe")


def test_config_rejects_bad_assignment():
    cfg = RecipeConfig()
    with pytest.raises(ValueError):
        cfg.trainer.steps = -1


def test_env_may_be_named_by_its_versioned_id():
    from agentrl_core.recipes import load_recipe

    assert load_recipe("countdown_grpo", ["env.name=countdown-v1"]).env.name == "countdown-v1"


def test_env_without_its_extra_fails_at_construction(monkeypatch):
    from agentrl_core.envs import registry
    from agentrl_core.envs.countdown import Countdown
    from agentrl_core.errors import ConfigError
    from agentrl_core.recipes import load_recipe

    class Fancy(Countdown):
        name = "fancy"
        extra = "fancy"
        requires = ("agentrl_no_such_module_xyz",)

    monkeypatch.setitem(registry._REGISTRY, "fancy", Fancy)
    with pytest.raises(ConfigError, match=r"pip install 'agentrl\[fancy\]'"):
        load_recipe("countdown_grpo", ["env.name=fancy"])
