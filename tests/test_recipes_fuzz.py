"""Fuzzing recipe overrides: every KEY=VALUE list gives a usable RecipeConfig or a clear ConfigError, nothing else."""

from __future__ import annotations

import math
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import torch
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from agentrl_core.config import RecipeConfig
from agentrl_core.errors import ConfigError
from agentrl_core.recipes import RECIPES_DIR, build_config, load_recipe
from agentrl_core.training.optim import build_optimizer, lr_factor
from tests.fuzzing import Tally, fuzz_settings

MAX_MESSAGE_CHARS = 6000
"""A clear error is a readable one: it quotes a bad value in part, never megabytes of it."""


def leaf_fields(model: type[BaseModel] = RecipeConfig, prefix: str = "") -> dict[str, Any]:
    """Every dotted key of the recipe tree that holds a value (trainer.optim.lr, env.kwargs, ...) -> its type."""
    fields = {}
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            fields.update(leaf_fields(kind, f"{prefix}{name}."))
        else:
            fields[f"{prefix}{name}"] = kind
    return fields


FIELDS = leaf_fields()
KEYS = sorted(FIELDS)


def typed_values(kind: Any) -> st.SearchStrategy[str]:
    """Values of the field's own type, at and past its bounds (so many reach the cross-field checks)."""
    union = get_origin(kind) in (Union, UnionType)
    options = [a for a in get_args(kind) if a is not type(None)] if union else [kind]
    strategies = []
    for option in options:
        if get_origin(option) is Literal:
            strategies.append(st.sampled_from([str(a) for a in get_args(option)]))
        elif option is bool:
            strategies.append(st.sampled_from(["true", "false"]))
        elif option is int:
            strategies.append(st.one_of(st.integers(-2, 70), st.integers(-(2**70), 2**70)).map(str))
        elif option is float:
            strategies.append(st.one_of(st.floats(-2, 10), st.floats()).map(repr))
        elif get_origin(option) is tuple:
            strategies.append(st.lists(st.floats(-1, 2).map(lambda x: round(x, 3)), min_size=2, max_size=2).map(str))
    return st.one_of(strategies) if strategies else values()


def typed_pairs() -> st.SearchStrategy[str]:
    return st.sampled_from(KEYS).flatmap(lambda key: typed_values(FIELDS[key]).map(lambda v: f"{key}={v}"))
SECTIONS = sorted({k.rsplit(".", 1)[0] for k in KEYS if "." in k})
YAML_SNIPPETS = [
    "[1, 2]", "{a: 1}", "{steps: 1}", "!!python/object/apply:os.system ['id']", "&a [*a]", "'unterminated", "1e-6",
    ".inf", "-.inf", ".nan", "nan", "0x10", "0o17", "~", "null", "- a", "a: b: c", "[", "}", "\t", "2**64", "1_000",
    "true", "no", "on", "2001-12-14", "!!binary aGVsbG8=", "? a", "|\n  x", "%YAML 1.1", "*undefined",
    "household", "grpo", "../../etc", "/etc", "s3://b/x", "postgresql+psycopg://u@h/db", "x" * 5000,
]


def values() -> st.SearchStrategy[str]:
    """The text after '=': YAML oddities, numbers at and past every bound, and arbitrary text."""
    numbers = st.one_of(st.integers(min_value=-(2**80), max_value=2**80), st.floats(), st.integers(-3, 3))
    return st.one_of(
        st.sampled_from(YAML_SNIPPETS),
        numbers.map(str),
        st.text(max_size=60),
        st.lists(numbers, max_size=3).map(str),
    )


def keys() -> st.SearchStrategy[str]:
    """Mostly real keys (so values reach the validators), some sections and some junk."""
    junk = st.text(alphabet=st.sampled_from("abcxyz._-=\x00/ é"), max_size=20)
    return st.one_of(st.sampled_from(KEYS), st.sampled_from(KEYS), st.sampled_from(KEYS), st.sampled_from(SECTIONS),
                     junk, st.sampled_from(KEYS).map(lambda k: k + ".x"))


def overrides() -> st.SearchStrategy[str]:
    pairs = st.tuples(keys(), values()).map(lambda kv: f"{kv[0]}={kv[1]}")
    return st.one_of(typed_pairs(), typed_pairs(), typed_pairs(), pairs, pairs, st.text(max_size=40))


RECIPES = [None, "household_grpo", "countdown_dapo", "alfworld_opmd_r3l", str(RECIPES_DIR / "countdown_gspo.yaml")]


def check_usable(cfg: RecipeConfig) -> None:
    """What the pipeline does first with a recipe: send it as a flow parameter (dump, validate again),
    make the run folder's path and the optimizers."""
    assert build_config(cfg.model_dump(mode="json")) == cfg
    real_root = Path(cfg.run.root).resolve()
    assert cfg.run_dir.resolve().parent == real_root
    model = torch.nn.Linear(2, 1)
    for optim, steps in ((cfg.trainer.optim, cfg.trainer.steps), (cfg.sft.optim, cfg.sft.epochs)):
        build_optimizer(model, optim, steps)
        assert all(math.isfinite(lr_factor(s, steps, optim)) for s in {0, 1, steps // 2, max(0, steps - 1), steps})
    torch.Generator().manual_seed(cfg.trainer.seed * 7919 + 1000 * 104_729)  # grpo.py's per-step sampling seed
    torch.Generator().manual_seed(cfg.eval.seed + cfg.eval.k)


def test_fuzz_recipe_overrides() -> None:
    tally = Tally("recipe overrides")

    @fuzz_settings(ci_examples=400)
    @given(recipe=st.sampled_from(RECIPES), texts=st.lists(overrides(), min_size=1, max_size=4))
    def one(recipe: str | None, texts: list[str]) -> None:
        try:
            cfg = load_recipe(recipe, texts)
        except ConfigError as err:
            message = str(err)
            assert message.strip() and len(message) <= MAX_MESSAGE_CHARS, (len(message), message[:300])
            tally.add("ConfigError")
            return
        check_usable(cfg)
        tally.add("valid")

    one()
    counts = tally.report()["outcomes"]
    assert counts.get("valid", 0) >= 10 and counts.get("ConfigError", 0) >= 10, counts  # both sides exercised
