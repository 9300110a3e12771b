"""The crafting world: a recipe book, an inventory, and the three commands (get, craft, inventory).

Messages follow AgentGym's TextCraft ("Got 2 x", "Crafted 4 y", "Could not find x", ...). A craft
command must name a recipe's inputs exactly, or all of them scaled by one integer factor k >= 1
(then it crafts k batches at once: k * count of the output); the stated output count is
informational, as in AgentGym. Items are matched by display name, case-insensitive.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

from agentrl_core.envs.textcraft.recipe_book import Recipe, display_name, item_key

MAX_GET = 1000  # the most of one item a single `get` fetches
MAX_COMMAND_CHARS = 1000
"""Longest command that is parsed; real ones are a few dozen characters."""
_GET = re.compile(r"^get (\d+) (.+)$")
_CRAFT = re.compile(r"^craft (?:(\d+) )?(.+?) using (.+)$")
_COUNT = re.compile(r"^(\d+) (.+)$")
_SPACES = re.compile(r"\s+")
_PREFIX = re.compile(r"^(?:action\s*:|>)\s*")


@dataclass(frozen=True)
class Book:
    """All recipes the world knows. Items no recipe makes are base items, fetched with `get`."""

    recipes: tuple[Recipe, ...]

    @cached_property
    def by_output(self) -> dict[str, tuple[Recipe, ...]]:
        """Output item id -> its recipes, in book order."""
        table: dict[str, list[Recipe]] = {}
        for recipe in self.recipes:
            table.setdefault(recipe.output, []).append(recipe)
        return {k: tuple(v) for k, v in table.items()}

    @cached_property
    def items(self) -> frozenset[str]:
        """Every item id that appears in a recipe."""
        return frozenset(r.output for r in self.recipes) | {i for r in self.recipes for i, _ in r.inputs}

    @cached_property
    def by_key(self) -> dict[str, str]:
        """Display key ("oak plank") -> item id (the first id wins if two namespaces share a name)."""
        table: dict[str, str] = {}
        for item in sorted(self.items):
            table.setdefault(item_key(item), item)
        return table

    @cached_property
    def depth(self) -> dict[str, float]:
        """Minimum crafting depth: 0 for base items, 1 + max over inputs for the best recipe.

        depth(x) = min over recipes r of x of (1 + max_{i in r} depth(i)); inf for items that
        only cycles produce. Computed by relaxation (Bellman-Ford style), so cycles terminate.
        """
        depth = {item: (math.inf if item in self.by_output else 0.0) for item in self.items}
        for _ in range(len(self.by_output) + 1):
            changed = False
            for item, recipes in self.by_output.items():
                best = min(1 + max(depth[i] for i, _ in r.inputs) for r in recipes)
                if best < depth[item]:
                    depth[item], changed = best, True
            if not changed:
                break
        return depth

    @cached_property
    def best_recipe(self) -> dict[str, Recipe]:
        """Craftable item -> its first recipe of minimum depth (the expert's choice; acyclic)."""
        table = {}
        for item, recipes in self.by_output.items():
            if math.isfinite(self.depth[item]):
                table[item] = min(recipes, key=lambda r: 1 + max(self.depth[i] for i, _ in r.inputs))
        return table

    def is_craftable(self, item: str) -> bool:
        return item in self.by_output

    def find(self, text: str) -> str | None:
        """The item id the model means by `text` ("Oak Plank", "oak_plank", "ns:oak_plank"), or None."""
        return self.by_key.get(item_key(text))


def command_of(reply: str) -> str:
    """The command in a reply: the last "Action:" line if any, else the first non-empty line;
    lower case, single spaces, no trailing period."""
    lines = [_SPACES.sub(" ", line.strip().lower()) for line in reply.splitlines()]
    tagged = [line for line in lines if _PREFIX.match(line)]
    for line in reversed(tagged) if tagged else lines:
        text = _PREFIX.sub("", line).strip().rstrip(".").strip()
        if text:
            return text
    return ""


@dataclass
class Outcome:
    """What one command did: the observation text and whether it changed the inventory."""

    message: str
    changed: bool = False


@dataclass
class Crafter:
    """The mutable state of one episode: the book and the inventory (item id -> count)."""

    book: Book
    inventory: Counter[str] = field(default_factory=Counter)

    def run(self, reply: str) -> Outcome:
        """Apply one reply; an invalid command returns an explanatory message, never raises."""
        command = command_of(reply)
        if len(command) > MAX_COMMAND_CHARS:  # the messages below quote the command: keep observations short
            return Outcome(f"Could not execute a command of {len(command)} characters (at most "
                           f"{MAX_COMMAND_CHARS}). Use get, craft or inventory.")
        if command in ("inventory", "check inventory", "i"):
            return Outcome(self.describe_inventory())
        if match := _GET.match(command):
            return self.get(int(match[1]), match[2])
        if match := _CRAFT.match(command):
            return self.craft(match[2], match[3])
        return Outcome(f"Could not execute {command or '(empty reply)'}. Use get, craft or inventory.")

    def describe_inventory(self) -> str:
        if not self.inventory:
            return "Inventory: You are not carrying anything."
        return "Inventory: " + " ".join(f"[{display_name(i)}] ({n})" for i, n in sorted(self.inventory.items()))

    def get(self, count: int, text: str) -> Outcome:
        item = self.book.find(text)
        if item is None or self.book.is_craftable(item):
            return Outcome(f"Could not find {text}")
        if not 1 <= count <= MAX_GET:
            return Outcome(f"Could not get {count} {text}: the count must be between 1 and {MAX_GET}")
        self.inventory[item] += count
        return Outcome(f"Got {count} {display_name(item)}", changed=True)

    def craft(self, target: str, inputs_text: str) -> Outcome:
        output = self.book.find(target)
        if output is None:
            return Outcome(f"Could not find {target}")
        given: Counter[str] = Counter()
        for part in inputs_text.split(","):
            match = _COUNT.match(part.strip())
            if not match:
                return Outcome(f"Wrong item format: {part.strip()}. Write each ingredient as '<count> <item>'.")
            item = self.book.find(match[2])
            if item is None:
                return Outcome(f"Could not find {match[2]}")
            given[item] += int(match[1])
        recipe, factor = _matching_recipe(self.book.by_output.get(output, ()), given)
        if recipe is None:
            return Outcome(f"Could not find a valid recipe for {display_name(output)}")
        if any(self.inventory[i] < n for i, n in given.items()):
            return Outcome(f"Could not find enough items to craft {display_name(output)}")
        self.inventory.subtract(given)
        self.inventory = +self.inventory  # drop the items that reached zero
        self.inventory[output] += factor * recipe.count
        return Outcome(f"Crafted {factor * recipe.count} {display_name(output)}", changed=True)


def _matching_recipe(recipes: Iterable[Recipe], given: Counter[str]) -> tuple[Recipe | None, int]:
    """The recipe whose inputs times some integer k >= 1 equal `given`, and k; (None, 0) if none."""
    for recipe in recipes:
        if set(given) != {i for i, _ in recipe.inputs}:
            continue
        first_item, first_n = recipe.inputs[0]
        factor, rest = divmod(given[first_item], first_n)
        if rest == 0 and factor >= 1 and all(given[i] == factor * n for i, n in recipe.inputs):
            return recipe, factor
    return None, 0
