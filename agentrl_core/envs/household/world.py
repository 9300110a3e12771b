"""The household world: kinds of things, a scene, its state, and the rules of every action.

Everything here is pure: `legal_actions(scene, state)` lists what can be done, `apply` returns
the next state, `describe` says what happened. The env, the expert's search and the scene
generator all use these same functions, so they can never disagree about the rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

# -- kinds ---------------------------------------------------------------------------------------
FOOD = frozenset({"apple", "bread", "egg", "potato", "tomato"})
DISH = frozenset({"bowl", "cup", "mug", "plate"})
UTENSIL = frozenset({"fork", "knife", "spoon"})
MISC = frozenset({"book", "keychain", "remotecontrol", "vase"})

CAPABILITIES: dict[str, frozenset[str]] = {
    "clean": DISH | UTENSIL | {"apple", "potato", "tomato"},
    "heat": FOOD | DISH,
    "cool": FOOD | DISH,
}
"""Which object kinds each appliance verb applies to."""

CLEAN, HOT, COLD = 1, 2, 4
FLAG_OF = {"clean": CLEAN, "heat": HOT, "cool": COLD}
ADJECTIVE = {"clean": "clean", "heat": "hot", "cool": "cool"}
KITCHEN, LIVING_ROOM = "kitchen", "living room"


@dataclass(frozen=True)
class ReceptacleKind:
    """What a receptacle of this kind is like."""

    container: bool  # "in" a container, "on" a surface
    openable: bool  # starts closed; contents hidden until opened
    holds: frozenset[str]  # object kinds it accepts
    rooms: tuple[str, ...]  # rooms it can appear in
    appliance: str | None = None  # the verb it performs: "clean", "heat" or "cool"
    max_count: int = 1  # most of this kind in one room


_BOTH = (KITCHEN, LIVING_ROOM)
RECEPTACLE_KINDS: dict[str, ReceptacleKind] = {
    "cabinet": ReceptacleKind(True, True, DISH | UTENSIL | {"bread", "book", "vase"}, _BOTH, max_count=3),
    "coffeetable": ReceptacleKind(False, False, MISC | DISH, (LIVING_ROOM,)),
    "countertop": ReceptacleKind(False, False, FOOD | DISH | UTENSIL, (KITCHEN,), max_count=2),
    "diningtable": ReceptacleKind(False, False, FOOD | DISH | UTENSIL | MISC, _BOTH),
    "drawer": ReceptacleKind(True, True, UTENSIL | {"book", "keychain", "remotecontrol"}, _BOTH, max_count=3),
    "fridge": ReceptacleKind(True, True, FOOD | DISH, (KITCHEN,), appliance="cool"),
    "microwave": ReceptacleKind(True, True, FOOD | DISH, (KITCHEN,), appliance="heat"),
    "shelf": ReceptacleKind(False, False, DISH | MISC, _BOTH, max_count=2),
    "sidetable": ReceptacleKind(False, False, MISC | {"cup", "mug"}, (LIVING_ROOM,), max_count=2),
    "sinkbasin": ReceptacleKind(
        True, False, DISH | UTENSIL | {"apple", "potato", "tomato"}, (KITCHEN,), appliance="clean"
    ),
    "sofa": ReceptacleKind(False, False, frozenset({"book", "keychain", "remotecontrol"}), (LIVING_ROOM,)),
}
APPLIANCE_FOR = {kind.appliance: name for name, kind in RECEPTACLE_KINDS.items() if kind.appliance}
"""verb -> the receptacle kind that performs it ("heat" -> "microwave")."""


# -- scene and state -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Receptacle:
    """A receptacle in the scene, e.g. `cabinet 2` in the kitchen (room index 0)."""

    name: str
    kind: str
    room: int

    @property
    def spec(self) -> ReceptacleKind:
        return RECEPTACLE_KINDS[self.kind]


@dataclass(frozen=True)
class Goal:
    """Put an object of `kind` (with `need` done to it: "", "clean", "heat" or "cool") into `target`."""

    kind: str
    target: int
    need: str = ""


HELD = -1
"""`State.where` value of the carried object."""
MIDDLE = -1
"""`State.at` value for the middle of the room."""


class State(NamedTuple):
    """Everything that changes: where the agent is, what is open, where each object is, its flags."""

    room: int
    at: int  # receptacle index, or MIDDLE
    opened: int  # bitmask over receptacle indices
    where: tuple[int, ...]  # per object: receptacle index, or HELD
    flags: tuple[int, ...]  # per object: CLEAN | HOT | COLD bits


class Action(NamedTuple):
    """A structured action; `target` is a receptacle index (a room index for "room")."""

    verb: str  # goto room open close take put clean heat cool look inventory
    obj: int = -1
    target: int = -1


@dataclass(frozen=True)
class Scene:
    """One task: rooms, receptacles, objects (name, kind), the start state and the goal."""

    rooms: tuple[str, ...]
    receptacles: tuple[Receptacle, ...]
    objects: tuple[tuple[str, str], ...]
    start: State
    goal: Goal
    task_type: str = "put"

    @cached_property
    def by_room(self) -> tuple[tuple[int, ...], ...]:
        """Receptacle indices of each room, in name order."""
        def name(i: int) -> str:
            return self.receptacles[i].name

        return tuple(
            tuple(sorted((i for i, r in enumerate(self.receptacles) if r.room == k), key=name))
            for k in range(len(self.rooms))
        )

    def goal_text(self) -> str:
        """E.g. 'put a clean mug in cabinet 2'."""
        target = self.receptacles[self.goal.target]
        words = f"{ADJECTIVE[self.goal.need]} {self.goal.kind}" if self.goal.need else self.goal.kind
        article = "an" if words[0] in "aeiou" else "a"
        return f"put {article} {words} {preposition(target)} {target.name}"


def preposition(rec: Receptacle) -> str:
    """'in' for containers, 'on' for surfaces."""
    return "in" if rec.spec.container else "on"


def is_open(state: State, index: int, rec: Receptacle) -> bool:
    """Whether the receptacle's inside is reachable (non-openable ones always are)."""
    return not rec.spec.openable or bool(state.opened >> index & 1)


def held(state: State) -> int:
    """Index of the carried object, or -1."""
    for i, w in enumerate(state.where):
        if w == HELD:
            return i
    return -1


def goal_reached(scene: Scene, state: State) -> bool:
    """Some object of the goal kind, with the needed flag, is in the target."""
    goal = scene.goal
    need = FLAG_OF.get(goal.need, 0)
    for i, (_, kind) in enumerate(scene.objects):
        if kind == goal.kind and state.where[i] == goal.target and state.flags[i] & need == need:
            return True
    return False


# -- rules ---------------------------------------------------------------------------------------
def legal_actions(scene: Scene, state: State) -> list[Action]:
    """Every admissible action from `state` (unsorted; `render` and sort for display)."""
    actions = [Action("goto", target=r) for r in scene.by_room[state.room] if r != state.at]
    actions += [Action("room", target=k) for k in range(len(scene.rooms)) if k != state.room]
    actions += [Action("look"), Action("inventory")]
    if state.at != MIDDLE:
        actions += _actions_at(scene, state, state.at)
    return actions


def _actions_at(scene: Scene, state: State, r: int) -> list[Action]:
    """Actions on the receptacle the agent stands at."""
    rec = scene.receptacles[r]
    spec = rec.spec
    out: list[Action] = []
    opened = is_open(state, r, rec)
    if spec.openable:
        out.append(Action("close" if opened else "open", target=r))
    carried = held(state)
    if carried < 0 and opened:
        out += [Action("take", obj=o, target=r) for o, w in enumerate(state.where) if w == r]
    if carried >= 0:
        kind = scene.objects[carried][1]
        if opened and kind in spec.holds:
            out.append(Action("put", obj=carried, target=r))
        if spec.appliance and kind in CAPABILITIES[spec.appliance]:
            out.append(Action(spec.appliance, obj=carried, target=r))
    return out


def apply(scene: Scene, state: State, action: Action) -> State:
    """The state after a legal `action`."""
    verb, o, r = action
    if verb == "goto":
        return state._replace(at=r)
    if verb == "room":
        return state._replace(room=r, at=MIDDLE)
    if verb == "open":
        return state._replace(opened=state.opened | 1 << r)
    if verb == "close":
        return state._replace(opened=state.opened & ~(1 << r))
    if verb in ("take", "put"):
        where = list(state.where)
        where[o] = HELD if verb == "take" else r
        return state._replace(where=tuple(where))
    if verb in FLAG_OF:
        flags = list(state.flags)
        # heating undoes cooling and vice versa; cleaning keeps the temperature
        keep = {"clean": ~0, "heat": ~COLD, "cool": ~HOT}[verb]
        flags[o] = flags[o] & keep | FLAG_OF[verb]
        return state._replace(flags=tuple(flags))
    return state  # look, inventory


# -- text ----------------------------------------------------------------------------------------
def render(scene: Scene, action: Action) -> str:
    """The command text of an action, e.g. 'put mug 1 in cabinet 2'."""
    verb, o, r = action
    if verb == "room":
        return f"go to {scene.rooms[r]}"
    if verb in ("look", "inventory"):
        return verb
    rec = scene.receptacles[r]
    if verb == "goto":
        return f"go to {rec.name}"
    if verb in ("open", "close"):
        return f"{verb} {rec.name}"
    obj = scene.objects[o][0]
    if verb == "take":
        return f"take {obj} from {rec.name}"
    if verb == "put":
        return f"put {obj} {preposition(rec)} {rec.name}"
    return f"{verb} {obj} with {rec.name}"


def contents(scene: Scene, state: State, r: int) -> str:
    """What the agent sees at receptacle `r`: 'It is closed.' or 'On it you see apple 1.'"""
    rec = scene.receptacles[r]
    if not is_open(state, r, rec):
        return "It is closed."
    names = [scene.objects[o][0] for o, w in enumerate(state.where) if w == r]
    return f"{preposition(rec).capitalize()} it you see {', '.join(names) if names else 'nothing'}."


def room_view(scene: Scene, state: State) -> str:
    """The view from the middle of the current room, and the doors."""
    names = ", ".join(scene.receptacles[r].name for r in scene.by_room[state.room])
    text = f"You are in the middle of the {scene.rooms[state.room]}. You see {names}."
    doors = [scene.rooms[k] for k in range(len(scene.rooms)) if k != state.room]
    if doors:
        text += f" A door leads to the {' and the '.join(doors)}."
    return text


def inventory(scene: Scene, state: State) -> str:
    """'You carry mug 1 (clean).' or 'You carry nothing.'"""
    o = held(state)
    if o < 0:
        return "You carry nothing."
    adjectives = [ADJECTIVE[v] for v, bit in FLAG_OF.items() if state.flags[o] & bit]
    suffix = f" ({', '.join(adjectives)})" if adjectives else ""
    return f"You carry {scene.objects[o][0]}{suffix}."


def describe(scene: Scene, state: State, action: Action) -> str:
    """What the agent observes after `action` took it to `state`."""
    verb, o, r = action
    if verb == "room":
        return room_view(scene, state)
    if verb == "inventory":
        return inventory(scene, state)
    if verb == "look":
        if state.at == MIDDLE:
            return room_view(scene, state)
        rec = scene.receptacles[state.at]
        return f"You are at {rec.name} in the {scene.rooms[state.room]}. {contents(scene, state, state.at)}"
    rec = scene.receptacles[r]
    if verb == "goto":
        return f"You arrive at {rec.name}. {contents(scene, state, r)}"
    if verb == "open":
        return f"You open {rec.name}. {contents(scene, state, r)}"
    if verb == "close":
        return f"You close {rec.name}."
    return f"You {render(scene, action)}."  # take, put, clean, heat, cool read as commands
