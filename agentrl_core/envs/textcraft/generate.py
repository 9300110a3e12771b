"""TextCraft tasks: synthetic recipe trees with invented item names, or goals from a loaded recipe book.

Synthetic (the default): task id -> a seeded tree. The goal sits at depth d in [min_depth, max_depth];
every craftable node has n in [min_ingredients, max_ingredients] inputs, the first continuing the
spine to depth d - 1 (so the depth is exact), each other one a base item or, with probability
`branch_prob`, a shallower craftable item. Input counts are in [1, max_ingredient_count], output
counts in [1, max_output_count]. Distractor recipes (their number in [min_distractors,
max_distractors]) make new items from the tree's items, as AgentGym's distractors do. A tree whose
expert plan is longer than `max_steps` is redrawn; the last draw has no side branches, which fits
by `Difficulty.validate`.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from agentrl_core.envs.textcraft.crafting import Book
from agentrl_core.envs.textcraft.expert import plan
from agentrl_core.envs.textcraft.recipe_book import Recipe, load_recipe_folder

NAMESPACE = "textcraft"
MAX_DRAWS = 20
_ONSETS = ("b", "br", "d", "dr", "f", "g", "gl", "k", "kr", "l", "m", "n", "p", "pl", "qu", "r", "s", "sk",
           "t", "th", "tr", "v", "z", "zh")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ei", "ou", "y")
_CODAS = ("", "", "l", "n", "r", "s", "th", "x", "k", "m")
# nouns by role, so names read like crafting: raw materials, parts, finished goods
BASE_NOUNS = ("ore", "log", "fiber", "dust", "seed", "root", "stone", "sap", "clay", "sand", "husk", "petal")
PART_NOUNS = ("ingot", "plank", "thread", "plate", "rod", "gear", "lens", "coil", "brick", "resin", "cord", "pane")
GOAL_NOUNS = ("lantern", "chest", "helm", "charm", "loom", "drum", "compass", "banner", "kettle", "saddle", "bell",
              "crown")


@dataclass(frozen=True)
class Difficulty:
    """Knobs of the synthetic generator (see the module docstring)."""

    min_depth: int = 1
    max_depth: int = 4
    min_ingredients: int = 1
    max_ingredients: int = 3
    max_ingredient_count: int = 4
    max_output_count: int = 4
    min_distractors: int = 2
    max_distractors: int = 6
    branch_prob: float = 0.3
    max_steps: int = 40

    def validate(self) -> None:
        """Raise ValueError naming the first knob out of range."""
        checks = [
            (1 <= self.min_depth <= self.max_depth <= 4, "need 1 <= min_depth <= max_depth <= 4"),
            (1 <= self.min_ingredients <= self.max_ingredients <= 4,
             "need 1 <= min_ingredients <= max_ingredients <= 4"),
            (1 <= self.max_ingredient_count <= 8, "need 1 <= max_ingredient_count <= 8"),
            (1 <= self.max_output_count <= 8, "need 1 <= max_output_count <= 8"),
            (0 <= self.min_distractors <= self.max_distractors <= 20,
             "need 0 <= min_distractors <= max_distractors <= 20"),
            (0.0 <= self.branch_prob <= 1.0, "need 0 <= branch_prob <= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"textcraft: {message}; got {self}")
        # a spine-only tree: one craft per level, (n - 1) base inputs per level plus n at the bottom
        longest = self.max_depth + self.max_depth * (self.max_ingredients - 1) + 1
        if self.max_steps < longest:
            raise ValueError(
                f"textcraft: max_steps={self.max_steps} is too small for max_depth={self.max_depth} and "
                f"max_ingredients={self.max_ingredients}; use max_steps >= {longest}"
            )


@dataclass(frozen=True)
class Task:
    """One episode's world: the goal item, the recipe book, and the commands shown (in order)."""

    goal: str
    book: Book
    shown: tuple[Recipe, ...]
    depth: int
    num_distractors: int

    def expert_plan(self) -> list[str]:
        """The expert's commands from an empty inventory."""
        return plan(self.book, self.goal, Counter())


class _Namer:
    """Invented, unique item names ("kraiven ingot") drawn from the task's rng."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def _word(self) -> str:
        syllables = self.rng.choice((2, 2, 3))
        word = "".join(self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) for _ in range(syllables - 1))
        return word + self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS)

    def new(self, nouns: tuple[str, ...]) -> str:
        for _ in range(1000):
            name = f"{self._word()} {self.rng.choice(nouns)}"
            if name not in self.used and "using" not in name:
                self.used.add(name)
                return f"{NAMESPACE}:{name.replace(' ', '_')}"
        raise RuntimeError("textcraft: could not invent a fresh item name in 1000 tries")


class _TreeBuilder:
    """Grows one recipe tree top-down; base items are sometimes shared between recipes."""

    def __init__(self, rng: random.Random, difficulty: Difficulty, branch_prob: float, namer: _Namer) -> None:
        self.rng, self.d, self.branch_prob, self.namer = rng, difficulty, branch_prob, namer
        self.recipes: list[Recipe] = []
        self.base: list[str] = []

    def node(self, depth: int, nouns: tuple[str, ...], avoid: set[str]) -> str:
        if depth == 0:
            reusable = [b for b in self.base if b not in avoid]
            if reusable and self.rng.random() < 0.15:
                return self.rng.choice(reusable)
            self.base.append(self.namer.new(BASE_NOUNS))
            return self.base[-1]
        item = self.namer.new(nouns)
        n = self.rng.randint(self.d.min_ingredients, self.d.max_ingredients)
        inputs = [self.node(depth - 1, PART_NOUNS, set())]
        for _ in range(n - 1):
            side = self.rng.randint(1, depth - 1) if depth >= 2 and self.rng.random() < self.branch_prob else 0
            inputs.append(self.node(side, PART_NOUNS, set(inputs)))
        counts = [(i, self.rng.randint(1, self.d.max_ingredient_count)) for i in inputs]
        self.recipes.append(Recipe.make(item, self.rng.randint(1, self.d.max_output_count), counts))
        return item


def _distractors(rng: random.Random, d: Difficulty, namer: _Namer, pool: list[str], k: int) -> list[Recipe]:
    """k recipes for new items that use items of the tree (`pool`) and sometimes new base items."""
    out = []
    for _ in range(k):
        n = rng.randint(max(1, d.min_ingredients), d.max_ingredients)
        inputs = rng.sample(pool, min(len(pool), rng.randint(1, n)))
        inputs += [namer.new(BASE_NOUNS) for _ in range(n - len(inputs))]
        counts = [(i, rng.randint(1, d.max_ingredient_count)) for i in inputs]
        out.append(Recipe.make(namer.new(PART_NOUNS + GOAL_NOUNS), rng.randint(1, d.max_output_count), counts))
    return out


@lru_cache(maxsize=2048)
def synthetic_task(task_id: int, difficulty: Difficulty) -> Task:
    """The synthetic task of `task_id` under `difficulty` (deterministic; always solvable in max_steps)."""
    rng = random.Random(f"textcraft-v1:{task_id}")
    depth = rng.randint(difficulty.min_depth, difficulty.max_depth)
    for draw in range(MAX_DRAWS):
        namer = _Namer(rng)
        branch = difficulty.branch_prob if draw < MAX_DRAWS - 1 else 0.0
        builder = _TreeBuilder(rng, difficulty, branch, namer)
        goal = builder.node(depth, GOAL_NOUNS, set())
        tree = Book(tuple(builder.recipes))
        if len(plan(tree, goal, Counter())) <= difficulty.max_steps:
            break
    pool = sorted(tree.items - {goal})
    k = rng.randint(difficulty.min_distractors, difficulty.max_distractors)
    shown = builder.recipes + _distractors(rng, difficulty, namer, pool, k)
    rng.shuffle(shown)
    return Task(goal, Book(tuple(shown)), tuple(shown), depth, k)


# -- goals from a loaded recipe folder ------------------------------------------------------------
@lru_cache(maxsize=8)
def folder_book(folder: str) -> Book:
    """The book of every crafting recipe in `folder` (loaded once per process and folder)."""
    return Book(load_recipe_folder(folder))


def tree_recipes(book: Book, goal: str) -> list[Recipe]:
    """The best recipes of every craftable item under `goal`, goal first (depth-first, no repeats)."""
    seen: set[str] = set()
    order: list[Recipe] = []
    stack = [goal]
    while stack:
        item = stack.pop()
        if item in seen or item not in book.best_recipe:
            continue
        seen.add(item)
        order.append(book.best_recipe[item])
        stack.extend(i for i, _ in reversed(book.best_recipe[item].inputs))
    return order


def folder_goals(book: Book, difficulty: Difficulty) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(train goals, test goals): craftable items in the depth range whose plan fits max_steps,
    sorted by (depth, id); every fifth one is a test goal, so the two sets are disjoint."""
    goals = []
    for item in sorted(book.best_recipe, key=lambda i: (book.depth[i], i)):
        in_range = difficulty.min_depth <= book.depth[item] <= difficulty.max_depth
        if in_range and len(plan(book, item, Counter())) <= difficulty.max_steps:
            goals.append(item)
    train = tuple(g for i, g in enumerate(goals) if i % 5 != 4)
    return train, tuple(g for i, g in enumerate(goals) if i % 5 == 4)


def folder_task(book: Book, goal: str, task_id: int, difficulty: Difficulty) -> Task:
    """A task on a loaded book: the goal's tree recipes plus distractors (other uses of its items)."""
    rng = random.Random(f"textcraft-folder-v1:{task_id}")
    relevant = tree_recipes(book, goal)
    items = {i for r in relevant for i, _ in r.inputs}
    others = [
        r for r in book.recipes
        if r not in relevant and r.output != goal and any(i in items for i, _ in r.inputs)
    ]
    k = min(len(others), rng.randint(difficulty.min_distractors, difficulty.max_distractors))
    shown = relevant + rng.sample(others, k)
    rng.shuffle(shown)
    return Task(goal, book, tuple(shown), int(book.depth[goal]), k)
