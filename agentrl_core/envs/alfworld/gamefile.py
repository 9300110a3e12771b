"""ALFWorld game files and the engine: write `game.tw-pddl` JSON, build TextWorld's PDDL env, plan.

A game file is `{"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}`: the
`alfred` domain and grammar shipped in the alfworld wheel, the grammar's "UNKNOWN GOAL" replaced by
the task sentence. It is played by `textworld.envs.PddlEnv` wrapped by ALFWorld's
`AlfredDemangler` (ALFRED ids -> "cabinet 1") and `AlfredInfos`; the Fast Downward planner behind
it gives `policy_commands`, which both checks solvability and drives the expert.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from agentrl_core.envs.alfworld.pddl import alfworld_dir

GOAL_PLACEHOLDER = "UNKNOWN GOAL"


@lru_cache(maxsize=1)
def domain_and_grammar() -> tuple[str, str]:
    """The texts of `alfred.pddl` and `alfred.twl2` from the installed alfworld package."""
    data = alfworld_dir() / "data"
    return (data / "alfred.pddl").read_text(encoding="utf-8"), (data / "alfred.twl2").read_text(encoding="utf-8")


def game_data(problem: str, sentence: str, *, solvable: bool = True) -> dict[str, Any]:
    """The game as a dict (what `game.tw-pddl` holds), keys in ALFWorld's order."""
    domain, grammar = domain_and_grammar()
    if GOAL_PLACEHOLDER not in grammar:
        raise ValueError(f"alfred.twl2 has no {GOAL_PLACEHOLDER!r} placeholder; is the alfworld package intact?")
    return {
        "pddl_domain": domain,
        "grammar": grammar.replace(GOAL_PLACEHOLDER, sentence),
        "pddl_problem": problem,
        "solvable": solvable,
        "walkthrough": None,
    }


def encode(data: Mapping[str, Any]) -> bytes:
    """The bytes of a game file (stable: same dict, same bytes)."""
    return json.dumps(data, ensure_ascii=True).encode("utf-8")


def make_engine(*, admissible: bool = True) -> Any:
    """A fresh TextWorld PDDL env wrapped like ALFWorld's (one per episode player; not thread-safe).

    `policy_commands` is not requested per step (it runs the planner every step); call `plan()` when
    the expert needs it. Without `admissible`, infos are cheaper but the engine still parses commands.
    """
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    from textworld.envs import PddlEnv

    from agentrl_core.envs.alfworld import parse_cache

    parse_cache.install()  # TextWorld's grammar parses memoized (parse_cache says why): same text, ~2x faster
    infos = textworld.EnvInfos(won=True, admissible_commands=admissible, extras=["gamefile"])
    return AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))


def plan(engine: Any) -> list[str]:
    """The planner's commands from the engine's current state to the goal ([] when it finds none).

    Exactly what `policy_commands` holds (PddlEnv computes it with the same call).
    """
    pddl_env = engine.unwrapped
    return list(pddl_env._pddl_state.replan(pddl_env._entity_infos) or [])


def goal_met(engine: Any) -> bool:
    """True when the goal holds in the engine's current state (what `won` reports)."""
    return bool(engine.unwrapped._pddl_state.check_goal())


def load(engine: Any, game: str | Mapping[str, Any]) -> Any:
    """Load a game (a path or the game dict) into `engine` and reset it; returns the first state."""
    engine.load(game)
    return engine.reset()
