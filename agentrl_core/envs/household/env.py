"""Household: an ALFWorld-style text game on our own generated scenes (the Env the server hosts)."""

from __future__ import annotations

import re
from typing import Any, Sequence

from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.household.expert import search
from agentrl_core.envs.household.generate import TASK_TYPES, TEST_IDS, TRAIN_IDS, Difficulty, make_scene
from agentrl_core.envs.household.world import (
    Action,
    Scene,
    State,
    apply,
    describe,
    goal_reached,
    legal_actions,
    render,
    room_view,
)
from agentrl_core.envs.invalid_action import INVALID_ACTION, check_penalty, turn_reward
from agentrl_core.envs.registry import register
from agentrl_core.envs.task_reminder import check_flag, remind
from agentrl_core.errors import ResetNeededError, TaskNotFoundError

NOTHING = "Nothing happens."
_SPACES = re.compile(r"\s+")
_PUT = re.compile(r"^put (.+?) (?:in/on|in|on) (.+)$")
_PREFIX = re.compile(r"^(?:action\s*:|>)\s*")


def normalize(reply: str) -> str:
    """The command in a reply: first non-empty line, lower case, single spaces, no trailing period.

    A leading "Action:" or ">" is dropped (a bare "Action:" line defers to the next line). The
    preposition of put becomes "in", so "put X in Y", "put X on Y" and ALFWorld 0.3's
    "put X in/on Y" all match the admissible command (which says "in" or "on" as fits).
    """
    for line in reply.splitlines():
        text = _PREFIX.sub("", _SPACES.sub(" ", line.strip().lower())).strip().rstrip(".").strip()
        if text:
            return _PUT.sub(r"put \1 in \2", text)
    return ""


@register
class Household(Env):
    """Find objects (some hidden in closed receptacles), transform them, and put them in place.

    Reward 1.0 and terminated when the goal holds; 0 otherwise (-`invalid_action_penalty` on a turn whose
    command is not admissible: envs.invalid_action); truncated after `max_steps`. With `remind_task` every
    observation restates the task (envs.task_reminder).
    A task id fixes the scene (the reset `seed` is unused); the scene also depends on the
    difficulty kwargs, and every scene is solvable within `max_steps` (checked by the expert).
    Version 2: test scenes come from a part of the scene space no training id draws from.
    """

    name = "household"
    version = 2
    splits = {"train": TRAIN_IDS, "test": TEST_IDS}  # train [0, 10000), test [10000, 10500)
    action_format = "One action from the Actions line per reply, e.g. 'go to cabinet 1'."
    system_prompt = "You are a household robot. Reply with exactly one action from the Actions line, nothing else."
    max_steps = 12  # the default; instances take theirs from the constructor

    def __init__(
        self,
        max_steps: int = 12,
        two_room_prob: float = 0.2,
        min_receptacles: int = 3,
        max_receptacles: int = 6,
        min_objects: int = 2,
        max_objects: int = 5,
        task_types: Sequence[str] = TASK_TYPES,
        invalid_action_penalty: float = 0.0,
        remind_task: bool = False,
    ) -> None:
        super().__init__()
        self.invalid_action_penalty = check_penalty(invalid_action_penalty)
        self.remind_task = check_flag(remind_task)
        self.difficulty = Difficulty(
            two_room_prob, min_receptacles, max_receptacles, min_objects, max_objects, tuple(task_types), max_steps
        )
        self.difficulty.validate()
        self.max_steps = max_steps
        self._scene: Scene | None = None
        self._state: State | None = None
        self._steps = 0
        self._plan: list[Action] = []
        self._plan_from: State | None = None

    # -- episode -------------------------------------------------------------------------------
    def _reset(self, *, task_id: int, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if task_id not in TRAIN_IDS and task_id not in TEST_IDS:
            raise TaskNotFoundError(
                f"household has no task {task_id}: train ids are [0, 10000), test ids are [10000, 10500)"
            )
        scene, _ = make_scene(int(task_id), self.difficulty)
        return self.load_scene(scene)

    def load_scene(self, scene: Scene) -> tuple[str, dict[str, Any]]:
        """Start an episode on a given scene (hand-made scenes in tests, or a custom task set)."""
        self._scene, self._state, self._steps = scene, scene.start, 0
        self._plan, self._plan_from = [], None
        self._active = True
        obs = f"{room_view(scene, scene.start)}\nYour task: {scene.goal_text()}."
        info = self._info(won=False) | {"task_type": scene.task_type, "goal": scene.goal_text()}
        return self._with_actions(obs), info

    def _step(self, action: str) -> StepResult:
        scene, state = self.scene, self.state
        self._steps += 1
        chosen = self._admissible(state).get(normalize(action))
        if chosen is None:
            text = NOTHING
        else:
            state = self._state = apply(scene, state, chosen)
            text = describe(scene, state, chosen)
            if chosen.verb == "look" and not self.remind_task:
                text += f" Your task: {scene.goal_text()}."
        if self.remind_task:
            text = remind(text, scene.goal_text())
        won = goal_reached(scene, state)
        if won:
            text += " Task complete!"
        truncated = not won and self._steps >= self.max_steps
        info = self._info(won=won) | {INVALID_ACTION: chosen is None}
        if won or truncated:
            info["success"] = won
        reward = turn_reward(won, chosen is None, self.invalid_action_penalty)
        return StepResult(self._with_actions(text), reward, won, truncated, info)

    # -- expert --------------------------------------------------------------------------------
    def expert_action(self) -> str:
        """The first action of a shortest plan from the current state (BFS over the full state)."""
        scene, state = self.scene, self.state
        if self._plan_from != state or not self._plan:
            self._plan = search(scene, state) or []
        if not self._plan:
            return "look"  # the goal already holds (or is unreachable): nothing useful to do
        action = self._plan.pop(0)
        self._plan_from = apply(scene, state, action)  # the plan stays valid if the agent follows it
        return render(scene, action)

    # -- helpers -------------------------------------------------------------------------------
    @property
    def scene(self) -> Scene:
        """The current scene (after reset)."""
        if self._scene is None:
            raise ResetNeededError("household: call reset() first")
        return self._scene

    @property
    def state(self) -> State:
        """The current full state (after reset)."""
        if self._state is None:
            raise ResetNeededError("household: call reset() first")
        return self._state

    def admissible_actions(self) -> list[str]:
        """The admissible commands from the current state, sorted."""
        return sorted(render(self.scene, a) for a in legal_actions(self.scene, self.state))

    def _admissible(self, state: State) -> dict[str, Action]:
        """normalized command -> action (normalizing makes put's in/on interchangeable)."""
        return {normalize(render(self.scene, a)): a for a in legal_actions(self.scene, state)}

    def _with_actions(self, text: str) -> str:
        return f"{text}\nActions: {' | '.join(self.admissible_actions())}"

    def _info(self, *, won: bool) -> dict[str, Any]:
        return {"admissible_actions": self.admissible_actions(), "won": won, "success": won, "steps": self._steps}
