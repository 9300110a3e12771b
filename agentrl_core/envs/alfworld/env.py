"""ALFWorld on its real engine (TextWorld PDDL + Fast Downward): the Env the server hosts."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from agentrl_core.envs.alfworld.catalog import TASK_TYPES
from agentrl_core.envs.alfworld.dataset import (
    DEFAULT_SEED,
    TEST_IDS,
    TRAIN_IDS,
    GeneratedGames,
    OfficialGames,
    official_root,
)
from agentrl_core.envs.alfworld.scene import Difficulty
from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.invalid_action import INVALID_ACTION, check_penalty, turn_reward
from agentrl_core.envs.registry import register
from agentrl_core.envs.task_reminder import alfworld_goal, check_flag, remind
from agentrl_core.errors import ResetNeededError

NOTHING = "Nothing happens."
ALFWORLD_OWN_DEFAULT = Path("~/.cache/alfworld").expanduser()  # importing alfworld sets ALFWORLD_DATA to it
_SPACES = re.compile(r"\s+")
_PREFIX = re.compile(r"^(?:action\s*:|>)\s*")
_PUT = re.compile(r"^put (.+?) (?:in/on|in|on|into|onto) (.+)$")


def normalize(reply: str) -> str:
    """The command in a reply: first non-empty line, lower case, single spaces, no trailing period.

    A leading "Action:" or ">" is dropped. ALFWorld 0.3's "put X in/on Y" (AgentGym's wording) and
    "put X in Y" / "put X on Y" become 0.4's "move X to Y".
    """
    for line in reply.splitlines():
        text = _PREFIX.sub("", _SPACES.sub(" ", line.strip().lower())).strip().rstrip(".").strip()
        if text:
            return _PUT.sub(r"move \1 to \2", text)
    return ""


def resolve_games(data_dir: str | os.PathLike[str] | None, seed: int, difficulty: Difficulty) -> Any:
    """The game set to play: `data_dir`, else $ALFWORLD_DATA (official data), else the generated set.

    An explicit `data_dir`, or an ALFWORLD_DATA that is not alfworld's own default, must hold the
    official data; alfworld's default folder without data means "not downloaded" (generated set).
    """
    if data_dir is not None:
        return OfficialGames(data_dir)
    env_dir = os.environ.get("ALFWORLD_DATA")
    if env_dir:
        path = Path(env_dir).expanduser()
        if official_root(path) is not None:
            return OfficialGames(path)
        if path != ALFWORLD_OWN_DEFAULT:
            raise ValueError(
                f"ALFWORLD_DATA={env_dir} holds no ALFWorld games (expected json_2.1.1/train/**/game.tw-pddl); "
                "download them with `alfworld-download`, or unset ALFWORLD_DATA to play the generated games"
            )
    return GeneratedGames(seed, difficulty)


def listing_mode(value: bool | str) -> str:
    """The `list_actions` setting as one of AlfWorld.LISTINGS (True is "all", False is "none")."""
    if isinstance(value, bool):
        return "all" if value else "none"
    if value not in AlfWorld.LISTINGS:
        raise ValueError(f"list_actions must be one of {', '.join(AlfWorld.LISTINGS)} (or true/false), got {value!r}")
    return value


@register
class AlfWorld(Env):
    """ALFWorld text games: six household task types, reward 1.0 when the goal holds.

    Without official data the games are our own (generated per task id, planner-checked, cached);
    with `data_dir` or $ALFWORLD_DATA the official `json_2.1.1` games are played. Admissible commands
    are listed in the observation ("Actions: a | b") and in info["available_actions"]. An invalid
    command returns "Nothing happens." (and reward -`invalid_action_penalty`: envs.invalid_action); the
    episode is truncated after `max_steps`. A task id fixes the game (the reset `seed` is unused); the
    generated games also depend on `seed` and the difficulty kwargs given to the constructor.

    `list_actions` says what the observation lists: "all" (every admissible command, every turn),
    "here" (every command on the first turn; after it only the commands of where the agent stands:
    the "go to" commands and help/inventory/look never change in a game, so they are said once,
    which keeps a 20-turn context about a third shorter), or "none" (True and False mean "all" and
    "none"). info["available_actions"] always holds every admissible command. With `remind_task` every
    later observation restates the first one's task (envs.task_reminder).
    """

    name = "alfworld"
    dedicated_worker = True  # TextWorld's engine is not thread-safe: the server gives each session a process
    reuse_worker = True  # closing a session drops its engine: the process (engine imported, parses cached) serves the next
    extra = "alfworld"
    requires = ("alfworld", "textworld", "fast_downward")
    splits = {"train": TRAIN_IDS, "test": TEST_IDS}  # noqa: RUF012  (instances replace it: official data)
    max_steps = 50
    action_format = "One admissible command per reply, e.g. 'go to cabinet 1' or 'move apple 1 to countertop 1'."
    system_prompt = (
        "You are a household robot in a text world. Reply with exactly one command from the Actions line, "
        "nothing else."
    )
    LISTINGS: ClassVar[tuple[str, ...]] = ("all", "here", "none")
    HERE_PROMPT = (
        "You are a household robot in a text world. Reply with exactly one command, nothing else: one from the "
        "last 'Actions here' line, or a 'go to', 'look' or 'inventory' command from the first Actions line."
    )
    EVERYWHERE: ClassVar[tuple[str, ...]] = ("go to ", "help", "inventory", "look")
    """Commands that are admissible in every state of a game (the go-to commands change only by the
    place the agent stands at): the "here" listing says them once."""

    def __init__(
        self,
        max_steps: int = 50,
        data_dir: str | None = None,
        seed: int = DEFAULT_SEED,
        list_actions: bool | str = "all",
        min_receptacles: int = 6,
        max_receptacles: int = 12,
        min_distractors: int = 3,
        max_distractors: int = 10,
        max_goal_copies: int = 2,
        closed_prob: float = 1.0,
        hidden_prob: float = 0.4,
        task_types: Sequence[str] = TASK_TYPES,
        invalid_action_penalty: float = 0.0,
        remind_task: bool = False,
    ) -> None:
        super().__init__()
        self.invalid_action_penalty = check_penalty(invalid_action_penalty)
        self.remind_task = check_flag(remind_task)
        self._goal = ""
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be an int >= 1, got {max_steps!r}")
        difficulty = Difficulty(
            min_receptacles, max_receptacles, min_distractors, max_distractors, max_goal_copies,
            closed_prob, hidden_prob, tuple(task_types),
        )
        self.games = resolve_games(data_dir, seed, difficulty)
        self.splits = dict(self.games.splits)
        self.max_steps = max_steps
        self.list_actions = listing_mode(list_actions)
        if self.list_actions == "here":
            self.system_prompt = self.HERE_PROMPT  # type: ignore[misc]  (the instance's listing decides it)
        self._engine: Any = None
        self._state: Any = None
        self._loaded: str | None = None  # the game file the engine holds
        self._steps = 0
        self._plan: list[str] = []
        self._plan_at = -1  # the step count at which self._plan was valid

    # -- episode -------------------------------------------------------------------------------
    def _reset(self, *, task_id: int, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.games.check_id(int(task_id))  # TaskNotFoundError before any engine work
        path = str(self.games.path(int(task_id), self.engine))
        if path != self._loaded:  # loading parses the grammar and problem; a reset alone is cheaper
            self.engine.load(path)
            self._loaded = path
        self._state = self.engine.reset()
        self._steps, self._plan, self._plan_at = 0, [], -1
        info = self._info() | {"task_id": int(task_id), "gamefile": path}
        first = self._state.feedback.strip()
        self._goal = alfworld_goal(first) if self.remind_task else ""
        return self._with_actions(first), info

    def _step(self, action: str) -> StepResult:
        command = normalize(action)
        followed = self._plan_at == self._steps and bool(self._plan) and command == self._plan[0]
        self._steps += 1
        invalid = command not in self.admissible_actions()
        if not invalid:
            self._state, _, _ = self.engine.step(command)
            text = self._state.feedback.strip()
        else:
            text = NOTHING  # the engine says the same, without recomputing its infos
        if self.remind_task:
            text = remind(text, self._goal)
        if followed:
            self._plan, self._plan_at = self._plan[1:], self._steps
        won = bool(self._state["won"])
        truncated = not won and self._steps >= self.max_steps
        info = self._info() | {INVALID_ACTION: invalid}
        if won or truncated:
            info["success"] = won
        reward = turn_reward(won, invalid, self.invalid_action_penalty)
        return StepResult(self._with_actions(text), reward, won, truncated, info)

    # -- expert --------------------------------------------------------------------------------
    def expert_action(self) -> str:
        """The next command of the planner's policy from the current state (its `policy_commands`).

        The plan is kept while the agent follows it, and recomputed after any other action.
        """
        from agentrl_core.envs.alfworld.gamefile import plan

        if self._state is None:
            raise ResetNeededError("alfworld: call reset() before expert_action()")
        if self._plan_at != self._steps or not self._plan:
            self._plan, self._plan_at = plan(self.engine), self._steps
        return self._plan[0] if self._plan else "look"

    # -- helpers -------------------------------------------------------------------------------
    @property
    def engine(self) -> Any:
        """This env's TextWorld engine, built on first use (one per env; not thread-safe)."""
        if self._engine is None:
            from agentrl_core.envs.alfworld.gamefile import make_engine

            self._engine = make_engine(admissible=True)
        return self._engine

    def admissible_actions(self) -> list[str]:
        """The engine's admissible commands in the current state, sorted."""
        if self._state is None:
            raise ResetNeededError("alfworld: call reset() first")
        return list(self._state["admissible_commands"])

    def _with_actions(self, text: str) -> str:
        if self.list_actions == "none":
            return text
        actions = self.admissible_actions()
        if self.list_actions == "all" or self._steps == 0:
            return f"{text}\nActions: {' | '.join(actions)}"
        here = [a for a in actions if not a.startswith(self.EVERYWHERE)]
        return f"{text}\nActions here: {' | '.join(here) or '(none)'}"

    def _info(self) -> dict[str, Any]:
        won = bool(self._state["won"])
        actions = self.admissible_actions()
        return {"available_actions": actions, "admissible_actions": actions, "won": won, "success": won,
                "steps": self._steps}

    def close(self) -> None:
        """Release the engine."""
        super().close()
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        self._state, self._loaded = None, None
