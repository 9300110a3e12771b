"""The TextCraft expert: plan over the recipe tree from the current inventory, bottom-up.

To hold n of item x with h already held: nothing if h >= n; a base item is fetched with
`get (n - h) x`; a craftable one takes k = ceil((n - h) / c) batches of its best recipe (c made per
batch), first securing k * m of every input (m per batch, recursively), then one
`craft k*c x using k*m1 a, k*m2 b, ...`. Secured inputs are set aside as soon as they are held, so
a later branch that shares an item cannot consume them. Best recipes strictly decrease the
crafting depth, so the plan is finite even when the book has cycles.
"""

from __future__ import annotations

import math
from collections import Counter

from agentrl_core.envs.textcraft.crafting import Book
from agentrl_core.envs.textcraft.recipe_book import display_name


def plan(book: Book, goal: str, inventory: Counter[str], amount: int = 1) -> list[str]:
    """The commands that bring `amount` of `goal` into `inventory` (empty if already there)."""
    if goal not in book.items or not math.isfinite(book.depth[goal]):
        raise ValueError(f"textcraft: {goal!r} cannot be obtained from this recipe book")
    actions: list[str] = []
    _secure(book, goal, amount, Counter(inventory), actions)
    return actions


def _secure(book: Book, item: str, n: int, free: Counter[str], actions: list[str]) -> None:
    """Make `free[item] >= n`, appending the commands; `free` is the inventory not yet set aside."""
    missing = n - free[item]
    if missing <= 0:
        return
    recipe = book.best_recipe.get(item)
    if recipe is None:
        actions.append(f"get {missing} {display_name(item)}")
        free[item] += missing
        return
    batches = -(-missing // recipe.count)  # ceil
    for ingredient, m in recipe.inputs:
        _secure(book, ingredient, batches * m, free, actions)
        free[ingredient] -= batches * m  # set aside for this craft
    parts = ", ".join(f"{batches * m} {display_name(i)}" for i, m in recipe.inputs)
    actions.append(f"craft {batches * recipe.count} {display_name(item)} using {parts}")
    free[item] += batches * recipe.count
