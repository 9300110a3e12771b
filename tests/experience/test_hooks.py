"""The GRPO hooks against a real pool: retrieve into half of each group, summarise after, strip if asked."""

from __future__ import annotations

import math

import pytest

from agentrl_core.config import RecipeConfig, SamplingConfig
from agentrl_core.envs import make
from agentrl_core.errors import ConfigError
from agentrl_core.experience.client import ExperienceClient
from agentrl_core.experience.rollout_hooks import experience_after_rollout, experience_specs
from agentrl_core.rollout import EpisodeSpec, LoopLimits, run_episodes

from tests.experience.conftest import ScriptedEngine
from tests.experience.test_summarise import TASK3_ACTIONS


@pytest.mark.slow
def test_round_trip_through_the_pool(pool, exp_chat):
    cfg = RecipeConfig(env={"name": "household"}, experience={"enabled": True, "url": pool.url, "top_k": 2,
                                                             "keep_in_context": False, "rollout_ratio": 0.5})
    factory = lambda: make("household")  # noqa: E731
    specs = [EpisodeSpec(task_id=3, group=0, sample=s) for s in range(4)]
    assert experience_specs(specs, factory, step=0, round_=0, cfg=cfg) == specs  # empty pool: no block anywhere
    limits = LoopLimits(max_turns=10, max_context_tokens=4096)
    first = run_episodes(ScriptedEngine(exp_chat, TASK3_ACTIONS), exp_chat, factory, specs, SamplingConfig(), limits)
    m0 = experience_after_rollout(first, None, exp_chat, 0, cfg)
    assert m0["exp/summarised"] == 1.0 and m0["exp/duplicates"] == 3.0  # four identical successes: one lesson
    assert m0["exp/pool_size"] >= 1.0 and math.isnan(m0["exp/with_success"]) and m0["exp/stripped"] == 0.0

    mixed = experience_specs(specs, factory, step=1, round_=0, cfg=cfg)
    with_block = [s for s in mixed if s.context]
    assert len(with_block) == 2  # floor(0.5 * 4 + 0.5)
    assert "What worked (6 actions, reward 1): go to fridge 1 -> open fridge 1" in with_block[0].context
    second = run_episodes(ScriptedEngine(exp_chat, TASK3_ACTIONS), exp_chat, factory, mixed, SamplingConfig(), limits)
    m1 = experience_after_rollout(second, None, exp_chat, 1, cfg)
    assert (m1["exp/with_samples"], m1["exp/with_success"], m1["exp/without_success"]) == (2.0, 1.0, 1.0)
    assert m1["exp/retrieved"] == 1.0 and m1["exp/stripped"] == 2.0 and m1["exp/summarised"] == 0.0
    assert all(t.token_ids == first[0].token_ids for t in second)  # stripped = as if never injected
    with ExperienceClient(pool.url) as client:
        assert client.stats().by_env["household"] == 1


def test_enabled_without_url_is_a_config_error():
    cfg = RecipeConfig(experience={"enabled": True})
    with pytest.raises(ConfigError, match="experience.url is not set"):
        experience_specs([EpisodeSpec(task_id=3)], lambda: make("household"), 0, 0, cfg)


def test_r3l_with_experience_is_refused_and_failed_resets_get_no_query():
    from agentrl_core.errors import TaskNotFoundError
    from agentrl_core.experience.mixing import first_observations

    with pytest.raises((ConfigError, ValueError), match="r3l_retry"):  # refused when the recipe is built
        RecipeConfig(experience={"enabled": True, "url": "http://127.0.0.1:9"}, algorithm={"r3l_retry": True})

    class Failing:
        def reset(self, task_id):
            if task_id == 2:
                raise TaskNotFoundError("no task 2")
            return f"obs {task_id}", {}

        def close(self):
            pass

    assert first_observations(Failing, [1, 2, 1, 4]) == {1: "obs 1", 4: "obs 4"}
