"""The opening-prompt fit check: the rollout's rule (a prompt below max_context_tokens), measured before a run."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl_core.envs import make
from agentrl_core.models import load_tokenizer
from agentrl_core.models.chat import ChatFormat
from agentrl_core.recipes import RECIPES_DIR
from agentrl_core.rollout.prompt_fit import main, measure, opening_prompt_len, recipe_fit
from tests.envs.conftest import every_env

INSTALLED = {p.values[0] for p in every_env() if not p.marks}


@pytest.fixture(scope="module")
def chat(embedded_model_path: Path) -> ChatFormat:
    return ChatFormat(load_tokenizer(embedded_model_path))


def test_the_fit_counts_prompts_at_or_over_the_limit(chat: ChatFormat):
    env = make("household")
    lengths = [opening_prompt_len(env, chat, t) for t in range(8)]
    longest = max(lengths)
    tight = measure(env, chat, "train", range(8), limit=longest)
    assert (tight.n, tight.longest, tight.median, tight.over) == (8, longest, sorted(lengths)[4], lengths.count(longest))
    assert not tight.fits and f"{tight.over} do not fit" in tight.line()
    roomy = measure(env, chat, "train", range(8), limit=longest + 10)
    assert roomy.fits and roomy.over == 0 and "10 tokens left for replies and observations" in roomy.line()
    assert lengths[roomy.longest_task] == longest
    with pytest.raises(ValueError, match="no tasks"):
        measure(env, chat, "test", [], limit=100)


@pytest.mark.skipif("bfcl" not in INSTALLED, reason="bfcl's extra is not installed")
def test_a_recipe_is_measured_on_the_ids_a_run_uses(capsys):
    rows = recipe_fit("bfcl_learn", ["env.kwargs.stage=1"])  # stage 1: 34 training and 31 held-out dialogues
    assert [(r.split, r.n) for r in rows] == [("train", 34), ("test", 31)] and all(r.fits for r in rows)
    tight = recipe_fit("bfcl_learn", ["env.kwargs.stage=1", f"rollout.max_context_tokens={rows[0].longest}",
                                      "env.train_tasks=400"], splits=("train",))[0]
    assert tight.over >= 1 and tight.longest == rows[0].longest
    assert main(["--recipe", "bfcl_learn", "env.kwargs.stage=1"]) == 0
    assert main(["--recipe", "bfcl_learn", "env.kwargs.stage=1", f"rollout.max_context_tokens={rows[1].longest}"]) == 1
    assert "do not fit" in capsys.readouterr().out


CHEAP = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml") if not p.stem.startswith(("alfworld", "sciworld", "webshop")))


@pytest.mark.slow
@pytest.mark.parametrize("recipe", CHEAP)
def test_every_recipe_s_opening_prompts_fit_its_context(recipe: str):
    """The first 64 tasks of each split (ALFWorld, ScienceWorld and WebShop, whose resets take seconds, are left
    to `python -m agentrl_core.rollout.prompt_fit`)."""
    from agentrl_core.recipes import load_recipe

    env = load_recipe(recipe).env.name
    if env not in INSTALLED:
        pytest.skip(f"{env}'s extra is not installed")
    for row in recipe_fit(recipe, limit_tasks=64):
        assert row.fits, row.line()
