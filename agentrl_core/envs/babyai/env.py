"""BabyAI as text (AgentGym's convention): the Env the server hosts."""

from __future__ import annotations

import contextlib
import io
import re
from typing import Any

from agentrl_core.envs.babyai.actions import CHECK, available_actions, walkable
from agentrl_core.envs.babyai.expert import ExpertStuck, expert_action
from agentrl_core.envs.babyai.levels import TEST_IDS, TRAIN_IDS, Level, build, level_of
from agentrl_core.envs.babyai.text import View, actions_line, describe, observe
from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.registry import register
from agentrl_core.errors import ResetNeededError

UNKNOWN = "The action is not recognized. Please check valid actions."
COMPLETED = "The task is completed."
FAILED = "The task failed."
_KNOWN = ("turn ", "move forward", "pickup ", "drop", "go to ", "go through ", "toggle")
_SPACES = re.compile(r"\s+")
_PREFIX = re.compile(r"^(?:action\s*:|>)\s*")


def normalize(reply: str) -> str:
    """The action in a reply: first non-empty line, lower case, single spaces, no "Action:",
    surrounding quotes or trailing period."""
    for line in reply.splitlines():
        text = _PREFIX.sub("", _SPACES.sub(" ", line.strip().lower())).strip().strip("\"'`").rstrip(".").strip()
        if text:
            return text
    return ""


def step_reward(step_count: int, max_steps: int) -> float:
    """minigrid's success reward: 1 - 0.9 * step_count / max_steps (primitive steps, level's limit)."""
    return 1.0 - 0.9 * (step_count / max_steps)


@register
class BabyAI(Env):
    """BabyAI levels as text: AgentGym's observation sentences and high-level actions.

    Task id -> level `LEVELS[id % 40]` with minigrid seed `id // 40` (AgentGym's numbering; the
    reset `seed` is unused). One step takes one high-level action, which runs its primitive
    actions until done or the episode ends. Reward on success is minigrid's
    `1 - 0.9 * primitive_steps / level_max_steps`, else 0. The episode is truncated when
    minigrid's own primitive step limit is hit or after `max_steps` high-level actions.
    Macro actions plan over the cells seen so far this episode (see `actions`).
    """

    name = "babyai"
    extra = "babyai"
    requires = ("minigrid", "gymnasium")
    splits = {"train": TRAIN_IDS, "test": TEST_IDS}  # train [0, 40000), test [40000, 41000)
    action_format = "Exactly one action copied from the 'Available actions' list, e.g. 'go to red ball 1'."
    system_prompt = (
        "You are an agent in a grid world (BabyAI). Each turn you see your goal, what is in front of you, and "
        "the available actions. Reply with exactly one action from the 'Available actions' list, nothing else."
    )
    max_steps = 100  # high-level actions per episode (the default; instances take theirs from the constructor)

    def __init__(self, max_steps: int = 100) -> None:
        super().__init__()
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.max_steps = max_steps
        self._level: Level | None = None
        self._mg: Any = None  # the minigrid env (kept across resets of the same level)
        self._seen = bytearray()
        self._image: Any = None
        self._view: View | None = None
        self._actions: dict[str, list[int]] = {}
        self._steps = 0

    # -- state -------------------------------------------------------------------------------
    @property
    def minigrid(self) -> Any:
        """The underlying minigrid env (after reset)."""
        if self._mg is None or self._view is None:
            raise ResetNeededError("babyai: no episode yet; call reset() first")
        return self._mg

    @property
    def available(self) -> list[str]:
        """The high-level actions available now."""
        return list(self._actions)

    def _look(self, image: Any) -> None:
        """Take in a new observation image: mark visible cells as seen, re-plan the actions."""
        mg = self._mg
        self._image = image
        self._view = observe(mg, image)
        width = mg.grid.width
        for x, y in self._view.visible:
            self._seen[y * width + x] = 1
        self._actions = available_actions(mg, self._view, self._passable())

    def _mark_seen(self, image: Any) -> None:
        width = self._mg.grid.width
        for x, y in observe(self._mg, image).visible:
            self._seen[y * width + x] = 1

    def _passable(self) -> list[int]:
        return [1 if s and walkable(o) else 0 for s, o in zip(self._seen, self._mg.grid.grid)]

    def _text(self) -> str:
        return describe(self._view, self._mg.carrying)

    # -- episode -------------------------------------------------------------------------------
    def _reset(self, *, task_id: int, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        level, level_seed = level_of(int(task_id))
        if level != self._level:
            self._mg, self._level = build(level), level
        with contextlib.redirect_stdout(io.StringIO()):  # minigrid prints "Sampling rejected: ..."
            obs, _ = self._mg.reset(seed=level_seed)
        self._seen = bytearray(self._mg.grid.width * self._mg.grid.height)
        self._steps = 0
        self._look(obs["image"])
        text = f"Your goal: {self._mg.mission}\n{self._text()}\n{actions_line(self._actions)}"
        info = {"level": level.env_id, "seed": level_seed, "mission": self._mg.mission, "available_actions": self.available}
        return text, info

    def _run(self, primitives: list[int]) -> tuple[float, bool, bool, Any]:
        """Run primitives until done or the episode ends; (reward, terminated, truncated, last image)."""
        reward, terminated, truncated, image = 0.0, False, False, self._image
        for i, p in enumerate(primitives):
            obs, r, terminated, truncated, _ = self._mg.step(p)
            reward += float(r)
            image = obs["image"]
            if terminated or truncated:
                break
            if i + 1 < len(primitives):
                self._mark_seen(image)
        return reward, terminated, truncated, image

    def _step(self, action: str) -> StepResult:
        self._steps += 1
        command = normalize(action)
        info: dict[str, Any] = {"success": False, "action_valid": command in self._actions}
        if command == CHECK:
            text = "You can take the following actions: " + ", ".join(self._actions)
            reward, terminated, truncated = 0.0, False, False
        elif command in self._actions:
            reward, terminated, truncated, image = self._run(self._actions[command])
            self._look(image)
            text = self._text()
        else:
            known = command.startswith(_KNOWN)
            text = f"You cannot {command} now. Please check valid actions." if known else UNKNOWN
            reward, terminated, truncated = 0.0, False, False
        info["primitive_steps"] = self._mg.step_count
        if terminated:
            info["success"] = reward > 0
            return StepResult(f"{text}\n{COMPLETED if reward > 0 else FAILED}", reward, True, False, info)
        truncated = truncated or self._steps >= self.max_steps
        return StepResult(f"{text}\n{actions_line(self._actions)}", reward, False, truncated, info)

    def expert_action(self) -> str:
        """A winning next action: the expert's plan said as one available high-level action.

        On the few layouts it cannot solve (minigrid level bugs: a key behind its own locked
        door; strict door orders that fail on the winning toggle) it says "check available
        actions", which changes nothing."""
        try:
            return expert_action(self.minigrid, self._actions, self._view)
        except ExpertStuck:
            return CHECK
