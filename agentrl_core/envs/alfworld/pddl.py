"""The PDDL writer: a Scene -> the problem text of ALFWorld's `alfred` domain, and its goal sentence.

Authoring rules (checked by generating, planning and replaying every task type): the rtype/otype
constants the domain's actions name are declared in every problem; each receptacle stands at its own
location and the agent starts at location 0, which has none; each object has both `inReceptacle` and
`objectAtLocation`; capability predicates (`pickupable`, `heatable`, `coolable`, `cleanable`,
`toggleable`, `openable`) decide which actions exist; `canContain <rtype> <otype>` allows putting an
object kind into a receptacle kind. The goal formula and the sentence come from ALFWorld's own goal
library (`alfworld/gen/goal_library.py`).
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
from types import ModuleType

from agentrl_core.envs.alfworld.catalog import (
    DOMAIN_OTYPES,
    DOMAIN_RTYPES,
    capabilities,
    holds,
)
from agentrl_core.envs.alfworld.scene import Scene

# our task type -> the goal library's key (ALFWorld's names for the six types)
LIBRARY_KEYS = {
    "pick_and_place_simple": "pick_and_place_simple",
    "look_at_obj_in_light": "look_at_obj_in_light",
    "pick_clean_then_place": "pick_clean_then_place_in_recep",
    "pick_heat_then_place": "pick_heat_then_place_in_recep",
    "pick_cool_then_place": "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place": "pick_two_obj_and_place",
}
AGENT = "agent1"
START = "loc_bar_0"


def alfworld_dir() -> Path:
    """The installed `alfworld` package folder, found without importing it.

    Importing `alfworld` has side effects (it creates ~/.cache/alfworld and sets ALFWORLD_DATA),
    so data files are located through the import system's finder instead.
    """
    spec = importlib.util.find_spec("alfworld")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the `alfworld` package is not installed; install it with: pip install 'agentrl[alfworld]'")
    return Path(next(iter(spec.submodule_search_locations)))


@lru_cache(maxsize=1)
def goal_library() -> ModuleType:
    """ALFWorld's goal library module (a dict `gdict` of goal PDDL and sentence templates)."""
    path = alfworld_dir() / "gen" / "goal_library.py"
    spec = importlib.util.spec_from_file_location("agentrl_alfworld_goal_library", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load ALFWorld's goal library from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fill(scene: Scene) -> dict[str, str]:
    return {"obj": scene.obj, "recep": scene.recep or "", "toggle": scene.toggle or "", "mrecep": ""}


def goal_sentence(scene: Scene) -> str:
    """The task sentence, e.g. "put a clean apple in countertop" (goal library template, lower case)."""
    templates = goal_library().gdict[LIBRARY_KEYS[scene.task_type]]["templates"]
    words = {k: v.lower() for k, v in _fill(scene).items()}
    return templates[scene.template % len(templates)].format(**words)


def goal_pddl(scene: Scene) -> str:
    """The `(:goal ...)` block (and the closing parenthesis of the problem) from the goal library."""
    text = goal_library().gdict[LIBRARY_KEYS[scene.task_type]]["pddl"].format(**_fill(scene))
    return text.replace("#", "-")  # the library writes "?r # receptacle" for "?r - receptacle"


def problem_text(scene: Scene, name: str) -> str:
    """The full PDDL problem of `scene`, deterministic for a given scene."""
    lines = [f"(define (problem {name})", "    (:domain alfred)", "    (:objects", f"        {AGENT} - agent"]
    lines += [f"        {loc} - location" for loc in _locations(scene)]
    lines += [f"        {r.pddl_id} - receptacle" for r in scene.receptacles]
    lines += [f"        {t.pddl_id} - object" for t in scene.things]
    lines += [f"        {kind}Type - otype" for kind in _otypes(scene)]
    lines += [f"        {kind}Type - rtype" for kind in _rtypes(scene)]
    lines += ["    )", "    (:init"]
    lines += [f"        {fact}" for fact in _init_facts(scene)]
    lines += ["    )", goal_pddl(scene).rstrip()]
    return "\n".join(lines) + "\n"


def _locations(scene: Scene) -> list[str]:
    return [START] + [f"loc_bar_{i + 1}" for i in range(len(scene.receptacles))]


def _otypes(scene: Scene) -> list[str]:
    return sorted({t.kind for t in scene.things} | {d[: -len("Type")] for d in DOMAIN_OTYPES})


def _rtypes(scene: Scene) -> list[str]:
    return sorted({r.kind for r in scene.receptacles} | {d[: -len("Type")] for d in DOMAIN_RTYPES})


def _init_facts(scene: Scene) -> list[str]:
    facts = [f"(atLocation {AGENT} {START})"]
    for i, r in enumerate(scene.receptacles):
        facts += [f"(receptacleType {r.pddl_id} {r.kind}Type)", f"(receptacleAtLocation {r.pddl_id} loc_bar_{i + 1})"]
        facts += [f"(openable {r.pddl_id})"] * r.openable + [f"(opened {r.pddl_id})"] * r.opened
    for t in scene.things:
        place = scene.receptacles[t.place]
        facts += [
            f"(objectType {t.pddl_id} {t.kind}Type)",
            f"(inReceptacle {t.pddl_id} {place.pddl_id})",
            f"(objectAtLocation {t.pddl_id} loc_bar_{t.place + 1})",
        ]
        can = capabilities(t.kind)
        facts += [f"({c} {t.pddl_id})" for c in sorted(can)]
        if "toggleable" not in can:  # the lamp stays where it is
            facts.append(f"(pickupable {t.pddl_id})")
    kinds = sorted({t.kind for t in scene.things if "toggleable" not in capabilities(t.kind)})
    rkinds = sorted({r.kind for r in scene.receptacles})
    facts += [f"(canContain {rk}Type {ok}Type)" for rk in rkinds for ok in kinds if holds(rk, ok)]
    return facts
