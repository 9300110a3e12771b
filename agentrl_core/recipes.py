"""Recipes: YAML files plus dotted command-line overrides, validated into a RecipeConfig."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import yaml
from pydantic import BaseModel, ValidationError

from agentrl_core.config import RecipeConfig
from agentrl_core.config_checks import log_odd_settings
from agentrl_core.errors import ConfigError
from agentrl_core.secrets import REVEAL

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"


def find_recipe(name_or_path: str | Path) -> Path:
    """A recipe path, or a name looked up in recipes/ (`household_grpo` -> recipes/household_grpo.yaml)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    for candidate in (RECIPES_DIR / f"{name_or_path}.yaml", RECIPES_DIR / str(name_or_path)):
        if candidate.is_file():
            return candidate
    known = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml")) if RECIPES_DIR.is_dir() else []
    raise ConfigError(f"recipe {str(name_or_path)!r} not found; give a YAML path or one of: {', '.join(known)}")


def parse_override(text: str) -> tuple[list[str], Any]:
    """`trainer.optim.lr=1e-6` -> (["trainer", "optim", "lr"], 1e-06); values parse as YAML scalars."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text[:200]!r} is not KEY=VALUE (e.g. trainer.optim.lr=1e-6)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        raise ConfigError(f"override {key.strip()[:200]!r}: the value {raw[:200]!r} is not valid YAML "
                          f"({_yaml_problem(err)})") from None
    if isinstance(value, str) and _looks_numeric(raw):
        value = float(raw)
    return key.strip().split("."), value


def _yaml_problem(err: yaml.YAMLError) -> str:
    """What YAML objected to, with the fix for the usual cause."""
    if isinstance(err, yaml.reader.ReaderError):  # a character YAML never allows (NUL, most controls)
        return str(err).splitlines()[0]
    return f"{getattr(err, 'problem', None) or type(err).__name__}; quote a text value, e.g. KEY='\"a: b\"'"


def _looks_numeric(raw: str) -> bool:
    # YAML 1.1 reads "1e-6" as a string; users mean a float.
    try:
        float(raw)
    except ValueError:
        return False
    return True


def _valid_keys(model_cls: type[BaseModel]) -> list[str]:
    return sorted(model_cls.model_fields)


def _section_class(model_cls: type[BaseModel], key: str) -> type[BaseModel] | None:
    annotation = model_cls.model_fields[key].annotation
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def check_keys(data: dict[str, Any], model_cls: type[BaseModel] = RecipeConfig, prefix: str = "") -> None:
    """Reject unknown keys anywhere in `data`, naming the dotted key and the valid ones."""
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in model_cls.model_fields:
            raise ConfigError(f"unknown key {dotted!r}; valid keys here: {', '.join(_valid_keys(model_cls))}")
        sub = _section_class(model_cls, key)
        if sub is not None:
            if not isinstance(value, dict):
                raise ConfigError(f"{dotted!r} must be a mapping of {', '.join(_valid_keys(sub))}")
            check_keys(value, sub, dotted + ".")


def apply_override(data: dict[str, Any], path: list[str], value: Any) -> None:
    """Set data[path[0]]...[path[-1]] = value, creating sections as needed."""
    node = data
    for part in path[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"cannot set {'.'.join(path)!r}: {part!r} is not a section")
    node[path[-1]] = value


def _short(value: Any) -> str:
    """repr of a rejected value, cut to 200 characters (a fuzzed or pasted value can be megabytes)."""
    text = repr(value)
    return text if len(text) <= 200 else f"{text[:200]}... ({len(text)} characters)"


def _format_validation(err: ValidationError) -> str:
    lines = []
    for item in err.errors():
        if not item["loc"]:  # a cross-field check: its message names the key already
            lines.append(item["msg"].removeprefix("Value error, "))
            continue
        loc = ".".join(str(p) for p in item["loc"])
        if item["type"] == "value_error":  # our validators' messages quote the value and say what to use
            lines.append(f"{loc}: {item['msg'].removeprefix('Value error, ')}")
        else:
            lines.append(f"{loc}: {item['msg']} (got {_short(item.get('input'))})")
    return "invalid recipe:\n  " + "\n  ".join(lines)


def build_config(data: dict[str, Any]) -> RecipeConfig:
    """Validate a nested dict into a RecipeConfig, with errors that name the key; odd but legal
    settings are logged once (config_checks.odd_settings)."""
    check_keys(data)
    try:
        cfg = RecipeConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_validation(err)) from None
    log_odd_settings(cfg)
    return cfg


def load_recipe(recipe: str | Path | None = None, overrides: Iterable[str] = ()) -> RecipeConfig:
    """Read a recipe (or the defaults when None), apply dotted overrides, validate."""
    data: dict[str, Any] = {}
    if recipe is not None:
        path = find_recipe(recipe)
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: not valid YAML: {err}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: a recipe must be a mapping of sections, got {type(loaded).__name__}")
        data = loaded
    for text in overrides:
        apply_override(data, *parse_override(text))
    return build_config(data)


def resolve_recipe(recipe: RecipeConfig | None, recipe_file: str | None, overrides: Iterable[str]) -> RecipeConfig:
    """A flow's recipe: the given config, or a YAML file, then the overrides (validated again)."""
    if recipe is not None and recipe_file:
        raise ConfigError("give either recipe or recipe_file, not both")
    if recipe is None:
        return load_recipe(recipe_file, overrides)
    data = recipe.model_dump(mode="json", context={REVEAL: True})  # an in-process copy: keep secret values
    for text in overrides:
        apply_override(data, *parse_override(text))
    return build_config(data)
