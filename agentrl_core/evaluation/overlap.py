"""Held out in content, not only in id: how many test tasks share their content with a training task.

A test id that never occurs in training can still repeat a training task's content: a math story
whose arithmetic fact a training story already taught, a household scene already played. For an env
with a content function, each task gets one key per level of content, and the report counts, per
level, the test tasks whose key some training task also has:

    shared(level) = |{t ∈ test : key_level(t) ∈ {key_level(u) : u ∈ train}}|

Levels, coarse to fine — a fair held-out task shares at most its *kind* with training:
- math: `arithmetic` (the facts of the worked steps, e.g. (("+", 10, 19),): 19 + 10 is the same fact),
  `story` (the question text);
- household: `goal` (the goal sentence alone, "put a clean mug in cabinet 2"), `scene` (rooms,
  receptacles, objects and where they start), `scene with goal` (the whole task);
- alfworld (the generated games; official data is not checked): `goal` (task type, object kind,
  target kind), `scene` (room, receptacles, objects and where they start), `scene with goal`.
  Its games are generated (and cached) on first use: the first check of all 2,620 takes minutes.

    .venv/bin/python -m agentrl_core.evaluation.overlap --recipe math_learn
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any, Callable, Hashable, Sequence

from agentrl_core.tasksets.ranges import select_ids

ContentKeys = Callable[[int], dict[str, Hashable]]


@dataclass(frozen=True)
class LevelOverlap:
    """One level of content: of `n_test` test tasks, `shared` have a key some training task has."""

    level: str
    n_test: int
    shared: int
    distinct_train_keys: int

    @property
    def share(self) -> float:
        return self.shared / self.n_test if self.n_test else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"share": self.share}


def math_keys(kwargs: dict[str, Any]) -> ContentKeys:
    """Content keys of the `math` env built with `kwargs` (its difficulty decides the problems)."""
    from agentrl_core.envs.math_word import MathWord, facts, make_problem

    level = MathWord(**kwargs).difficulty

    def keys(task_id: int) -> dict[str, Hashable]:
        problem = make_problem(task_id, level)
        return {"arithmetic": facts(problem), "story": problem.question}
    return keys


def household_keys(kwargs: dict[str, Any]) -> ContentKeys:
    """Content keys of the `household` env built with `kwargs` (its difficulty decides the scenes)."""
    from agentrl_core.envs.household.env import Household
    from agentrl_core.envs.household.generate import make_scene, scene_key

    difficulty = Household(**kwargs).difficulty

    def keys(task_id: int) -> dict[str, Hashable]:
        scene, _ = make_scene(task_id, difficulty)
        layout = scene_key(scene)
        return {"goal": scene.goal_text(), "scene": layout, "scene with goal": (layout, scene.goal, scene.task_type)}
    return keys


def alfworld_keys(kwargs: dict[str, Any]) -> ContentKeys:
    """Content keys of the generated `alfworld` games built with `kwargs` (seed and difficulty decide them)."""
    from agentrl_core.envs.alfworld import AlfWorld
    from agentrl_core.envs.alfworld.dataset import GeneratedGames
    from agentrl_core.envs.alfworld.gamefile import make_engine
    from agentrl_core.envs.alfworld.scene import goal_key, scene_key

    games = AlfWorld(**kwargs).games
    if not isinstance(games, GeneratedGames):
        raise ValueError("the content check reads generated ALFWorld games; official data (data_dir or "
                         "ALFWORLD_DATA) keeps ALFWorld's own splits: unset it to check the generated set")
    engine = make_engine(admissible=False)  # one planner for every game not cached yet

    def keys(task_id: int) -> dict[str, Hashable]:
        scene = games.scene(task_id, engine)
        layout, goal = scene_key(scene), goal_key(scene)
        return {"goal": goal, "scene": layout, "scene with goal": (layout, goal)}
    return keys


CONTENT: dict[str, Callable[[dict[str, Any]], ContentKeys]] = {
    "math": math_keys, "household": household_keys, "alfworld": alfworld_keys}
"""Env name -> its content-key function (envs without one cannot be checked)."""


def content_keys(env: str, kwargs: dict[str, Any]) -> ContentKeys:
    if env not in CONTENT:
        raise ValueError(f"no content check for env {env!r}: envs with one are {sorted(CONTENT)}")
    return CONTENT[env](dict(kwargs))


def overlap(keys: ContentKeys, train_ids: Sequence[int], test_ids: Sequence[int]) -> list[LevelOverlap]:
    """Per level, how many of `test_ids` share their key with one of `train_ids` (module docstring)."""
    train: dict[str, set[Hashable]] = {}
    for task_id in train_ids:
        for level, key in keys(task_id).items():
            train.setdefault(level, set()).add(key)
    shared: dict[str, int] = {level: 0 for level in train}
    for task_id in test_ids:
        for level, key in keys(task_id).items():
            shared[level] = shared.get(level, 0) + (key in train.get(level, ()))
    return [LevelOverlap(level, len(test_ids), shared[level], len(train.get(level, ()))) for level in shared]


def split_ids(env_cfg: Any, split: str) -> list[int]:
    """A recipe's task ids of `split` without a server: `env.{split}_ids` ranges, else the first
    `env.{split}_tasks` ids of the env's split (rules 2–3 of `tasksets.resolve`)."""
    from agentrl_core.envs.registry import env_class

    available = list(env_class(env_cfg.name).splits[split])
    ranges = env_cfg.train_ids if split == "train" else env_cfg.test_ids
    if ranges is not None:
        return select_ids(available, ranges, where=f"the {env_cfg.name} {split} split")
    return available[: env_cfg.train_tasks if split == "train" else env_cfg.test_tasks]


def recipe_overlap(recipe: str, overrides: Sequence[str] = ()) -> list[LevelOverlap]:
    """The content overlap of a recipe's test tasks with its training tasks."""
    from agentrl_core.recipes import load_recipe

    cfg = load_recipe(recipe, overrides)
    if cfg.env.task_file is not None:
        raise ValueError("env.task_file recipes are not checked here: their ids come from the file")
    keys = content_keys(cfg.env.name, cfg.env.kwargs)
    return overlap(keys, split_ids(cfg.env, "train"), split_ids(cfg.env, "test"))


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", required=True)
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    for row in recipe_overlap(args.recipe, args.overrides):
        print(f"{row.level:16s} {row.shared:5d} of {row.n_test} test tasks share it with training "
              f"({100 * row.share:.1f}%; {row.distinct_train_keys} distinct in training)")


if __name__ == "__main__":
    main()
