"""Crafting recipes: the data model, and reading/writing Minecraft's recipe JSON schema.

A recipe turns fixed counts of input items into `count` of one output item. On disk it is one JSON
file per recipe in Minecraft's data-pack schema, so a folder of real Minecraft recipes loads too:

    {"type": "minecraft:crafting_shapeless",
     "ingredients": [{"item": "ns:a"}, {"item": "ns:a"}, {"tag": "ns:b"}],
     "result": {"item": "ns:out", "count": 4}}
    {"type": "minecraft:crafting_shaped", "pattern": ["AA", "B "],
     "key": {"A": {"item": "ns:a"}, "B": {"item": "ns:b"}}, "result": {"item": "ns:out"}}

Input counts are the ingredient repetitions (shapeless) or the key's occurrences in the pattern
(shaped). Newer data packs write an ingredient as a bare string ("ns:a", "#ns:tag" for a tag) and
the result id as "id"; both spellings load. An ingredient list of alternatives takes its first.
A tag loads as an item named by the tag (so it can be fetched with `get` unless something crafts
it), which is how AgentGym treats tags that no recipe produces. Other recipe types (smelting, ...)
are skipped.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHAPED = "minecraft:crafting_shaped"
SHAPELESS = "minecraft:crafting_shapeless"
_KEY_CHARS = "ABCDEFGHI"


def display_name(item_id: str) -> str:
    """How an item id reads in text: namespace dropped, underscores as spaces ("ns:oak_plank" -> "oak plank")."""
    return item_id.split(":", 1)[-1].replace("_", " ")


def item_key(text: str) -> str:
    """The lookup key of an item as the model may write it: display form, lower case, single spaces."""
    return " ".join(display_name(text.strip().lower()).split())


@dataclass(frozen=True)
class Recipe:
    """`count` of `output` from `inputs`, a sorted tuple of (item id, count) with distinct items."""

    output: str
    count: int
    inputs: tuple[tuple[str, int], ...]

    @staticmethod
    def make(output: str, count: int, inputs: Iterable[tuple[str, int]]) -> Recipe:
        """A recipe with repeated input items merged and inputs sorted (its canonical form)."""
        merged: Counter[str] = Counter()
        for item, n in inputs:
            merged[item] += n
        if count < 1 or not merged or min(merged.values()) < 1:
            raise ValueError(f"recipe for {output!r} needs count >= 1 and inputs with counts >= 1")
        return Recipe(output, count, tuple(sorted(merged.items())))

    @property
    def command(self) -> str:
        """The crafting command that uses this recipe once, as shown to the agent (AgentGym's wording)."""
        parts = ", ".join(f"{n} {display_name(item)}" for item, n in self.inputs)
        return f"craft {self.count} {display_name(self.output)} using {parts}"


# -- JSON -----------------------------------------------------------------------------------------
def recipe_to_json(recipe: Recipe, *, shaped: bool = False) -> dict[str, Any]:
    """The Minecraft JSON of `recipe`; shaped (a 3-wide pattern) only when it has <= 9 items in all."""
    total = sum(n for _, n in recipe.inputs)
    result = {"item": recipe.output, "count": recipe.count}
    if not shaped or total > 9 or len(recipe.inputs) > len(_KEY_CHARS):
        ingredients = [{"item": item} for item, n in recipe.inputs for _ in range(n)]
        return {"type": SHAPELESS, "ingredients": ingredients, "result": result}
    cells = "".join(_KEY_CHARS[i] * n for i, (_, n) in enumerate(recipe.inputs))
    pattern = [cells[i : i + 3] for i in range(0, len(cells), 3)]
    key = {_KEY_CHARS[i]: {"item": item} for i, (item, _) in enumerate(recipe.inputs)}
    return {"type": SHAPED, "pattern": pattern, "key": key, "result": result}


def _ingredient_id(value: Any, where: str) -> str:
    """The item id of one ingredient: {"item": id} | {"tag": id} | "id" | "#tag" | [alternatives]."""
    if isinstance(value, list) and value:
        value = value[0]
    if isinstance(value, str) and value:
        return value.lstrip("#")
    if isinstance(value, dict):
        found = value.get("item") or value.get("tag")
        if isinstance(found, str) and found:
            return found
    raise ValueError(f"{where}: an ingredient must be {{'item': id}}, {{'tag': id}} or a string, got {value!r}")


def _result(data: dict[str, Any], where: str) -> tuple[str, int]:
    result = data.get("result")
    if isinstance(result, str):
        return result, 1
    if isinstance(result, dict):
        item = result.get("item") or result.get("id")
        count = result.get("count", 1)
        if isinstance(item, str) and item and isinstance(count, int) and count >= 1:
            return item, count
    raise ValueError(f"{where}: 'result' must be an id or {{'item': id, 'count': n >= 1}}, got {result!r}")


def _shaped_inputs(data: dict[str, Any], where: str) -> list[tuple[str, int]]:
    pattern, key = data.get("pattern"), data.get("key")
    if not isinstance(pattern, list) or not all(isinstance(r, str) for r in pattern) or not isinstance(key, dict):
        raise ValueError(f"{where}: a shaped recipe needs 'pattern' (list of str) and 'key' (object)")
    cells = Counter("".join(pattern))
    return [(_ingredient_id(v, where), cells[k]) for k, v in key.items() if cells[k]]


def recipe_from_json(data: Any, where: str = "recipe") -> Recipe | None:
    """The Recipe of one Minecraft recipe JSON object; None for a type other than crafting."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: a recipe file must hold a JSON object, got {type(data).__name__}")
    kind = data.get("type")
    if kind == SHAPED:
        inputs = _shaped_inputs(data, where)
    elif kind == SHAPELESS:
        ingredients = data.get("ingredients")
        if not isinstance(ingredients, list) or not ingredients:
            raise ValueError(f"{where}: a shapeless recipe needs a non-empty 'ingredients' list")
        inputs = [(_ingredient_id(v, where), 1) for v in ingredients]
    else:
        return None
    output, count = _result(data, where)
    if not inputs:
        raise ValueError(f"{where}: the recipe for {output!r} has no ingredients")
    return Recipe.make(output, count, inputs)


def load_recipe_folder(folder: str | Path) -> tuple[Recipe, ...]:
    """Every crafting recipe in the `*.json` files of `folder` (sorted by file name; other types skipped)."""
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"recipe folder {str(root)!r} does not exist; pass a folder of recipe JSON files")
    recipes = []
    for path in sorted(root.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from exc
        recipe = recipe_from_json(data, where=str(path))
        if recipe is not None:
            recipes.append(recipe)
    if not recipes:
        raise ValueError(f"recipe folder {str(root)!r} holds no crafting recipes (*.json of a crafting type)")
    return tuple(recipes)


def save_recipe_folder(recipes: Iterable[Recipe], folder: str | Path) -> list[Path]:
    """Write one JSON file per recipe into `folder` (alternately shapeless and shaped); returns the paths."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, recipe in enumerate(recipes):
        path = root / f"{recipe.output.split(':', 1)[-1]}_{i}.json"
        path.write_text(json.dumps(recipe_to_json(recipe, shaped=i % 2 == 1), indent=1), encoding="utf-8")
        paths.append(path)
    return paths
