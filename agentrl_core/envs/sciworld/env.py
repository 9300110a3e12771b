"""The SciWorld env: ScienceWorld (the real simulator, in a JVM) behind the Env contract.

Task ids are AgentGym's `data_idx` (see tasks.py); reset loads that (task, variation), then
plays "look around" as AgentGym does; the first observation is the task description, a newline,
and that look (AgentGym's client shows the same). The reset `seed` is unused: a variation fixes
the world.

Reward (sparse, at the end only): with s_T the engine's raw score in [-100, 100] when the episode
ends (won, failed, or truncated at max_steps),

    r_t = 0 for t < T,    r_T = max(s_T, 0) / 100,

so an episode's return is its final normalised score in [0, 1]; a failure (ScienceWorld sets the
score to -100) gives 0. Every step's info carries "raw_score" (s_t) and "score" (max(s_t, 0)/100)
for denser shaping. The episode terminates when the engine says the task is complete or the score
is negative (failure); info["success"] is True when it ends with the full score of 100.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.registry import register
from agentrl_core.envs.sciworld.jvm import DEFAULT_HEAP_MB, MAX_LIVE_JVMS, Simulator
from agentrl_core.envs.sciworld.tasks import (
    TaskSet,
    TaskSpec,
    locate,
    split_ids,
    tasks_in,
)
from agentrl_core.errors import ResetNeededError, TaskNotFoundError

MAX_ACTION_CHARS = 300  # the longest real command is under 100 characters
FIRST_ACTION = "look around"
_ACTION_MARKER = re.compile(r"action\s*:", re.IGNORECASE)

ACTIONS = (
    ("open/close OBJ", "open/close a container"), ("activate/deactivate OBJ", "activate/deactivate a device"),
    ("connect OBJ to OBJ", "connect electrical components"), ("disconnect OBJ", "disconnect electrical components"),
    ("use OBJ [on OBJ]", "use a device/item"), ("look around", "describe the current room"),
    ("look at OBJ", "describe an object in detail"), ("look in OBJ", "describe a container's contents"),
    ("read OBJ", "read a note or book"), ("move OBJ to OBJ", "move an object to a container"),
    ("pick up OBJ", "move an object to the inventory"), ("put down OBJ", "drop an inventory item"),
    ("pour OBJ into OBJ", "pour a liquid into a container"), ("dunk OBJ into OBJ", "dunk a container into a liquid"),
    ("mix OBJ", "chemically mix a container"), ("go to LOC", "move to a new location"), ("eat OBJ", "eat a food"),
    ("flush OBJ", "flush a toilet"), ("focus on OBJ", "signal intent on a task object (a wrong focus fails the task)"),
    ("wait", "take no action for 10 iterations"), ("wait1", "take no action for 1 iteration"),
    ("task", "describe the current task"), ("inventory", "list your inventory"),
)


def normalised_score(raw_score: int) -> float:
    """max(raw, 0) / 100: ScienceWorld's score in [-100, 100] as a reward in [0, 1]."""
    return max(int(raw_score), 0) / 100


def parse_action(reply: str) -> str:
    """The command in a model reply: the first non-empty line after the last "Action:" marker
    (AgentGym's "Thought: ... Action: ..." format), else the first non-empty line; at most
    MAX_ACTION_CHARS characters."""
    parts = _ACTION_MARKER.split(reply)
    text = parts[-1] if len(parts) > 1 else reply
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line[:MAX_ACTION_CHARS]


@register
class SciWorld(Env):
    """ScienceWorld's 30 science tasks (AgentGym's 23 by default), one JVM per env instance.

    The JVM starts on the first reset (so building an env to read its splits is cheap) and stops
    on close(); at most MAX_LIVE_JVMS run per process (JVMLimitError beyond).
    """

    name = "sciworld"
    dedicated_worker = True  # the server gives each session (and its JVM bridge) a process of its own
    extra = "sciworld"
    requires = ("scienceworld", "py4j")
    max_sessions = MAX_LIVE_JVMS  # one JVM per session: ~0.13 GB idle, up to ~1.1 GB with the default heap cap
    splits = split_ids("agentgym")  # train/dev/test: ScienceWorld's variation splits, AgentGym's ids
    max_steps = 100
    action_format = (
        "One ScienceWorld command, e.g. 'open door to kitchen', 'pick up thermometer', 'focus on red box'; "
        "a reply in AgentGym's 'Thought: ...\\nAction: <command>' form is accepted (the line after 'Action:')."
    )
    system_prompt = (
        "You are an agent in ScienceWorld, a text simulation of a house with science tasks. Each turn you see "
        "an observation and reply with one action to finish the task. Actions: "
        + "; ".join(f"{a} ({d})" for a, d in ACTIONS)
        + ". Reply in the form:\nThought:\nyour thoughts.\n\nAction:\nyour next action"
    )

    def __init__(
        self,
        max_steps: int = 100,
        jvm_heap_mb: int | None = DEFAULT_HEAP_MB,
        task_set: TaskSet = "agentgym",
        available_actions: bool = False,
        java_opts: Sequence[str] = (),
    ) -> None:
        """`jvm_heap_mb`: the JVM's -Xmx (None: the JVM default, 1/4 of RAM); `task_set`: "agentgym"
        (its 23 tasks, ids [0, 4639)) or "all" (30 tasks, ids [0, 7207); the inclined-plane and
        Mendelian tasks often have gold paths of 100-740 steps, so raise max_steps); `available_actions`: put the valid
        commands in every info (costly: hundreds of strings, 0.05-0.3 s per step)."""
        super().__init__()
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be an int >= 1, got {max_steps!r}")
        self.max_steps = max_steps
        self.splits = split_ids(task_set)  # validates task_set
        self.task_set = task_set
        self.jvm_heap_mb = jvm_heap_mb
        self.java_opts = tuple(java_opts)
        self.with_available_actions = available_actions
        self._sim: Simulator | None = None
        self._task: tuple[TaskSpec, int] | None = None
        self._history: list[str] = []  # commands sent this episode, after the opening "look around"
        self._gold: list[str] | None = None
        self._closed = False

    # -- the JVM ---------------------------------------------------------------------------------
    @property
    def jvm_pid(self) -> int | None:
        """The process id of this env's JVM, None before the first reset and after close()."""
        return self._sim.pid if self._sim is not None else None

    def _simulator(self) -> Simulator:
        if self._closed:
            raise ResetNeededError("sciworld: this env was closed; build a new one")
        if self._sim is not None and not self._sim.alive:  # killed or crashed: start afresh
            self._sim.close()
            self._sim = None
        if self._sim is None:
            self._sim = Simulator(self.jvm_heap_mb, self.java_opts)
        return self._sim

    def close(self) -> None:
        """Shut the JVM down (it is gone when this returns); the env cannot be used afterwards."""
        super().close()
        self._closed = True
        if self._sim is not None:
            self._sim.close()
            self._sim = None

    # -- episode ---------------------------------------------------------------------------------
    def _locate(self, task_id: int) -> tuple[TaskSpec, int]:
        task, variation = locate(int(task_id))
        if task not in tasks_in(self.task_set):  # the splits cover every variation of the set's tasks
            raise TaskNotFoundError(
                f"sciworld task {task_id} ({task.name} variation {variation}) is not in task_set "
                f"{self.task_set!r}; use task_set='all' for ids in [4639, 7207)"
            )
        return task, variation

    def _reset(self, *, task_id: int, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task, variation = self._locate(task_id)
        sim = self._simulator()
        sim.load(task.name, variation)
        self._task, self._history, self._gold = (task, variation), [], None
        description = sim.task_description()
        look = sim.step(FIRST_ACTION)
        info = {"task_id": int(task_id), "task_name": task.name, "variation": variation,
                "split": task.split_of(variation), **self._score_info(sim)}
        if self.with_available_actions:
            info["available_actions"] = sim.valid_actions()
        return f"{description}\n{look}", info

    def _step(self, action: str) -> StepResult:
        sim = self._active_sim()
        command = parse_action(action)
        observation = sim.step(command)
        self._history.append(command)
        info: dict[str, Any] = {"action": command, **self._score_info(sim)}
        raw = info["raw_score"]
        terminated = raw < 0 or sim.completed()
        truncated = not terminated and len(self._history) >= self.max_steps
        if terminated or truncated:
            info["success"] = terminated and raw >= 100
            return StepResult(observation, normalised_score(raw), terminated, truncated, info)
        if self.with_available_actions:
            info["available_actions"] = sim.valid_actions()
        return StepResult(observation, 0.0, False, False, info)

    @staticmethod
    def _score_info(sim: Simulator) -> dict[str, Any]:
        raw = sim.raw_score()
        return {"raw_score": raw, "score": normalised_score(raw), "moves": sim.moves()}

    def _active_sim(self) -> Simulator:
        if self._sim is None or self._task is None:
            raise ResetNeededError("sciworld: call reset() first")
        return self._sim

    # -- extras ----------------------------------------------------------------------------------
    def available_actions(self) -> list[str]:
        """The valid commands in the current state (on request: the list is long and slow to build)."""
        return self._active_sim().valid_actions()

    def expert_action(self) -> str:
        """The next command of ScienceWorld's gold path, indexed by the steps taken this episode
        ("look around" once the path is used up). The path is planned on first use: the task is
        reloaded with planning on and this episode's commands are replayed (the engine is
        deterministic), so the state is unchanged."""
        sim = self._active_sim()
        if self._gold is None:
            task, variation = self._task  # type: ignore[misc]  # set by _active_sim's check
            sim.load(task.name, variation, gold_path=True)
            self._gold = sim.gold_actions()
            for command in [FIRST_ACTION, *self._history]:
                sim.step(command)
        step = len(self._history)
        return self._gold[step] if step < len(self._gold) else FIRST_ACTION

