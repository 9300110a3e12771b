"""TextCraft: craft a goal item from base materials with the listed recipes (the Env the server hosts)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.registry import register
from agentrl_core.envs.textcraft.crafting import Crafter
from agentrl_core.envs.textcraft.expert import plan
from agentrl_core.envs.textcraft.generate import (
    Difficulty,
    Task,
    folder_book,
    folder_goals,
    folder_task,
    synthetic_task,
)
from agentrl_core.envs.textcraft.recipe_book import display_name
from agentrl_core.errors import ResetNeededError, TaskNotFoundError

TRAIN_IDS = range(0, 10_000)
TEST_IDS = range(10_000, 10_500)


def render_task(task: Task) -> str:
    """The first observation, in AgentGym's layout: the commands, a blank line, the goal."""
    commands = "\n".join(r.command for r in task.shown)
    return f"Crafting commands:\n{commands}\n\nGoal: craft {display_name(task.goal)}."


@register
class TextCraft(Env):
    """Get base items and craft intermediate items until the goal item is in the inventory.

    Reward 1.0 and terminated as soon as the goal item is held; 0.0 otherwise; truncated after
    `max_steps`. A task id fixes the task (the reset `seed` is unused). With `recipe_dir`, goals
    come from that folder of Minecraft-schema recipe JSON files instead of the generator: sorted
    by (depth, id), every fifth goal is a test goal, and a task id picks a goal of its split
    modulo their number.
    """

    name = "textcraft"
    splits = {"train": TRAIN_IDS, "test": TEST_IDS}  # train [0, 10000), test [10000, 10500)
    action_format = (
        "One command per reply: 'get <count> <item>', "
        "'craft <count> <item> using <count> <item>, <count> <item>, ...', or 'inventory'."
    )
    system_prompt = (
        "You craft items in a text crafting game. Fetch base items with 'get <count> <item>', craft with one of "
        "the listed crafting commands (ingredient counts may be multiplied by a whole number to craft several "
        "batches at once), and check your items with 'inventory'. Reply with exactly one command."
    )
    max_steps = 40  # the default; instances take theirs from the constructor

    def __init__(
        self,
        max_steps: int = 40,
        min_depth: int = 1,
        max_depth: int = 4,
        min_ingredients: int = 1,
        max_ingredients: int = 3,
        max_ingredient_count: int = 4,
        max_output_count: int = 4,
        min_distractors: int = 2,
        max_distractors: int = 6,
        branch_prob: float = 0.3,
        recipe_dir: str | None = None,
    ) -> None:
        super().__init__()
        self.difficulty = Difficulty(
            min_depth, max_depth, min_ingredients, max_ingredients, max_ingredient_count, max_output_count,
            min_distractors, max_distractors, branch_prob, max_steps,
        )
        self.difficulty.validate()
        self.max_steps = max_steps
        self.recipe_dir = str(Path(recipe_dir).resolve()) if recipe_dir else None
        self._goals: tuple[Sequence[str], Sequence[str]] | None = None
        if self.recipe_dir:
            self._goals = folder_goals(folder_book(self.recipe_dir), self.difficulty)
            if not all(self._goals):
                raise ValueError(
                    f"textcraft: {self.recipe_dir} has too few goals in depth [{min_depth}, {max_depth}] that fit "
                    f"max_steps={max_steps} (train {len(self._goals[0])}, test {len(self._goals[1])}); widen the range"
                )
        self._task: Task | None = None
        self._crafter: Crafter | None = None
        self._steps = 0

    @property
    def task(self) -> Task:
        """The current task (after reset)."""
        if self._task is None:
            raise ResetNeededError("textcraft: no task yet; call reset() first")
        return self._task

    def make_task(self, task_id: int) -> Task:
        """The task of `task_id` under this env's settings."""
        in_train, in_test = task_id in TRAIN_IDS, task_id in TEST_IDS
        if not (in_train or in_test):
            raise TaskNotFoundError(
                f"textcraft has no task {task_id}: train ids are [{TRAIN_IDS.start}, {TRAIN_IDS.stop}), "
                f"test ids are [{TEST_IDS.start}, {TEST_IDS.stop})"
            )
        if self._goals is None:
            return synthetic_task(task_id, self.difficulty)
        goals = self._goals[0] if in_train else self._goals[1]
        book = folder_book(self.recipe_dir)  # type: ignore[arg-type]
        return folder_task(book, goals[task_id % len(goals)], task_id, self.difficulty)

    def _reset(self, *, task_id: int, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._task = self.make_task(int(task_id))
        self._crafter = Crafter(self._task.book)
        self._steps = 0
        info = {"goal": display_name(self._task.goal), "depth": self._task.depth, "steps": 0}
        return render_task(self._task), info

    def _step(self, action: str) -> StepResult:
        assert self._crafter is not None  # reset() ran: Env.step checks it
        self._steps += 1
        outcome = self._crafter.run(action)
        won = self._crafter.inventory[self.task.goal] > 0
        info: dict[str, Any] = {"success": won, "steps": self._steps, "valid": outcome.changed}
        if won:
            return StepResult(outcome.message, 1.0, True, False, info)
        truncated = self._steps >= self.max_steps
        return StepResult(outcome.message, 0.0, False, truncated, info)

    def expert_action(self) -> str:
        """The next command of a bottom-up plan from the current inventory."""
        if self._crafter is None:
            raise ResetNeededError("textcraft: no task yet; call reset() first")
        commands = plan(self.task.book, self.task.goal, self._crafter.inventory)
        return commands[0] if commands else "inventory"
