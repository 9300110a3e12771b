"""The recipe reference (docs/recipe-reference.md, `agentrl recipe --reference`) is generated from the typed config."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from agentrl.cli import main
from agentrl_core.config import RecipeConfig, Section
from agentrl_core.config_reference import REGENERATE, reference_markdown, tables

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "recipe-reference.md"


def _keys(cls: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted key of a config tree, sections included."""
    out = []
    for name, info in cls.model_fields.items():
        out.append(prefix + name)
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            out += _keys(info.annotation, f"{prefix}{name}.")
    return out


def test_the_reference_in_docs_is_what_the_config_generates() -> None:
    assert DOC.read_text() == reference_markdown(), f"docs/recipe-reference.md is stale: run {REGENERATE}"
    assert REGENERATE in DOC.read_text().splitlines()[0]


def test_every_field_of_the_recipe_config_is_in_the_reference() -> None:
    text = reference_markdown()
    missing = [key for key in _keys(RecipeConfig) if f"| `{key}` |" not in text]
    assert not missing, f"keys missing from the reference: {missing}"
    assert "## rollout.sampling" in text and "| `rollout.sampling.temperature` | float (>= 0.0) | `1.0` |" in text


def test_a_nested_section_shows_the_defaults_its_parent_gives_it() -> None:
    text = reference_markdown()
    assert "| `trainer.optim.lr` | float (> 0.0) | `2e-06` | Peak learning rate of AdamW. |" in text
    assert "| `sft.optim.lr` | float (> 0.0) | `0.0001` |" in text
    assert "| `eval.sampling.temperature` | float (>= 0.0) | `0.0` |" in text


class _Inner(Section):
    depth: int = Field(3, ge=1)
    """How deep | it goes, in <levels>."""


class _Fake(Section):
    """A fake recipe."""

    mode: Literal["a", "b"] = "a"
    """Which mode:
    a or b."""
    limit: float | None = None
    """An optional limit."""
    inner: _Inner = _Inner(depth=5)
    """The inner part."""


def test_a_documented_field_renders_with_its_type_default_and_docstring() -> None:
    text = reference_markdown(_Fake, title="Fake", command="make fake")
    assert text.startswith("<!-- Generated from the typed config (tests.test_recipe_reference._Fake) by `make fake`")
    assert "| `mode` | \"a\" \\| \"b\" | `a` | Which mode: a or b. |" in text
    assert "| `limit` | float \\| None | `null` | An optional limit. |" in text
    assert "| `inner` | section `inner` | see below | The inner part. |" in text
    assert "## inner\n\nThe inner part.\n" in text
    assert "| `inner.depth` | int (>= 1) | `5` | How deep \\| it goes, in &lt;levels>. |" in text
    assert [t.name for t in tables(_Fake)] == ["", "inner"]


def test_the_cli_prints_the_reference_and_a_validated_recipe(capsys) -> None:
    assert main(["recipe", "--reference"]) == 0
    assert capsys.readouterr().out == reference_markdown()
    assert main(["recipe", "household_grpo", "trainer.steps=7"]) == 0
    assert "\n  steps: 7\n" in capsys.readouterr().out
    assert main(["recipe", "household_grpo", "trainer.stepz=7"]) == 2
    assert "trainer.stepz" in capsys.readouterr().err
    assert main(["recipe", "trainer.steps=9"]) == 0 and "\n  steps: 9\n" in capsys.readouterr().out
    assert main(["recipe", "--reference", "household_grpo"]) == 2
    assert "takes no recipe or overrides" in capsys.readouterr().err
