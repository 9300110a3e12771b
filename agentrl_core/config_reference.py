"""The recipe reference: every key of the typed config with its type, default and docstring, as Markdown.

Generated from the config classes themselves (`agentrl_core.config`), so it cannot drift from them: a field's
docstring is the attribute docstring written under it (pydantic reads it, `use_attribute_docstrings`), its
type and constraints are its annotation and `Field(...)` bounds, and its default is the value a recipe that
leaves the key out gets — read from the default instance, so a section whose parent gives it other
defaults (`trainer.optim` is `OptimConfig(lr=2e-6)`) shows those. A nested section is a table of its own
whose keys are dotted (`rollout.sampling.temperature`), as overrides name them.

    agentrl recipe --reference > docs/recipe-reference.md   # regenerate (tests/test_recipe_reference.py checks it)
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

REGENERATE = "agentrl recipe --reference > docs/recipe-reference.md"
"""The command that writes docs/recipe-reference.md (said in its header and by the test that checks it)."""
BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("min_length", "length >="),
          ("max_length", "length <="), ("pattern", "matches"))
"""Constraint attributes of pydantic/annotated-types metadata, and how the reference writes each."""


@dataclass
class Key:
    """One row of the reference: a dotted key, its type, its default (YAML) and its docstring."""

    key: str
    type: str
    default: str
    doc: str


@dataclass
class Table:
    """One section of the config: its dotted name ("" for the top level), its docstring and its keys."""

    name: str
    doc: str
    keys: list[Key] = field(default_factory=list)


def _constraints(metadata: list[Any]) -> list[str]:
    """">= 1", "< 1.0", "matches ^[a-z]+$" for the bounds in a field's (or an Annotated type's) metadata."""
    out = []
    for item in metadata:
        for attr, shown in BOUNDS:
            value = getattr(item, attr, None)
            if value is not None:
                out.append(f"{shown} {value}")
        out += _constraints(list(getattr(item, "metadata", None) or ()))  # a Field(...) inside Annotated
    return out


def type_text(annotation: Any, metadata: list[Any] = ()) -> str:
    """A field's type as a reader writes it: `int (>= 1)`, `"auto" | int (>= 1)`, `float | None`,
    `list[str]`; a nested section by its class name."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0], [*annotation.__metadata__, *metadata])
    bounds = _constraints(list(metadata))
    suffix = f" ({', '.join(bounds)})" if bounds else ""
    if origin is typing.Literal:
        return " | ".join(f'"{a}"' if isinstance(a, str) else str(a) for a in args) + suffix
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(a) for a in args) + suffix
    if annotation is type(None):
        return "None"
    if origin is not None:
        return f"{getattr(origin, '__name__', origin)}[{', '.join(type_text(a) for a in args)}]" + suffix
    if annotation is typing.Any:
        return "Any"
    if isinstance(annotation, type):
        name = {"Path": "path", "Secret": "secret"}.get(annotation.__name__, annotation.__name__)
        return name + suffix
    return str(annotation).replace("typing.", "") + suffix


def default_text(value: Any) -> str:
    """A default as it is written in a YAML recipe: `null`, `true`, `0.2`, `[q_proj, k_proj]`, `{}`."""
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, float):
        return repr(value)  # 1e-06, not YAML's 1.0e-06
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("...").strip()


def _section_class(annotation: Any) -> type[BaseModel] | None:
    """The config class of a nested section field, or None for a plain key."""
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _default_of(cls: type[BaseModel]) -> BaseModel | None:
    """The section a recipe gets when it leaves all keys out, or None when some key is required."""
    try:
        return cls()
    except Exception:  # noqa: BLE001 - a section with required keys has no default instance
        return None


def tables(cls: type[BaseModel], instance: BaseModel | None = None, prefix: str = "",
           doc: str | None = None) -> list[Table]:
    """The reference of `cls` as tables: its own keys first, then each nested section's, depth first.
    `instance` holds the defaults (the parent's default for this section); None reads the class defaults."""
    instance = instance if instance is not None else _default_of(cls)
    dumped = instance.model_dump(mode="json") if instance is not None else {}
    own = Table(prefix.rstrip("."), " ".join((doc if doc is not None else cls.__doc__ or "").split()))
    nested: list[Table] = []
    for name, info in cls.model_fields.items():
        key, description = prefix + name, " ".join((info.description or "").split())
        if (section := _section_class(info.annotation)) is not None:
            own.keys.append(Key(key, f"section `{key}`", "", description))
            nested += tables(section, getattr(instance, name, None), f"{key}.", description)
            continue
        if instance is not None:
            default = dumped.get(name)
        elif info.default_factory is not None:
            default = info.default_factory()
        else:
            default = info.default
        own.keys.append(Key(key, type_text(info.annotation, info.metadata), default_text(default), description))
    return [own, *nested] if own.keys else nested


def _cell(text: str) -> str:
    """Text fit for one Markdown table cell: a `|` would end the cell, and outside code a `<name>` would be
    taken for an HTML tag and vanish."""
    parts = text.replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else re.sub(r"<(?=[A-Za-z/!?])", "&lt;", p) for i, p in enumerate(parts))


def table_markdown(table: Table, top: str) -> str:
    """One section as a heading, its docstring and a table of key | type | default | description."""
    lines = [f"## {table.name or top}", ""]
    if table.doc:
        lines += [table.doc, ""]
    lines += ["| key | type | default | description |", "|---|---|---|---|"]
    lines += [f"| `{k.key}` | {_cell(k.type)} | {f'`{_cell(k.default)}`' if k.default else 'see below'} | "
              f"{_cell(k.doc)} |" for k in table.keys]
    return "\n".join(lines) + "\n"


def reference_markdown(cls: type[BaseModel] | None = None, title: str = "Recipe reference",
                       command: str = REGENERATE) -> str:
    """The whole reference of `cls` (default: `RecipeConfig`) as one Markdown page, headed by what generated it."""
    if cls is None:
        from agentrl_core.config import RecipeConfig as cls  # noqa: N813 - the default config tree
    intro = (f"<!-- Generated from the typed config ({cls.__module__}.{cls.__name__}) by `{command}`: do not edit "
             "by hand; a test fails when it and the config differ. -->\n\n"
             f"# {title}\n\n"
             "Every key a recipe YAML may set, with its type, its default and its docstring, generated from the "
             "typed config. A nested section's keys are dotted, as an override names them on the command line "
             "(`agentrl run household_grpo rollout.sampling.temperature=0.7`); defaults are written as in YAML "
             "(`null` is Python's None). Unknown keys are refused with the list of valid ones.\n")
    return "\n".join([intro, *(table_markdown(t, cls.__name__) for t in tables(cls))])

