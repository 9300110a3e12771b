"""The household catalogue: rooms, receptacle kinds, object kinds and what each can do (ALFRED names).

Facts follow ALFRED/ALFWorld: heating happens in a Microwave, cooling in a Fridge, cleaning in a
SinkBasin; Cabinets, Drawers, Fridges, Microwaves and Safes open and close; a DeskLamp is toggled
to look at something under it; heat/cool/clean tasks happen in kitchens (clean also in bathrooms),
looking under a lamp in living rooms and bedrooms. Which receptacle holds which object is decided
here by object category (our own table), which is all the PDDL `canContain` facts need.
"""

from __future__ import annotations

from dataclasses import dataclass

KITCHEN, LIVING_ROOM, BEDROOM, BATHROOM = "Kitchen", "LivingRoom", "Bedroom", "Bathroom"
HEAT, COOL, CLEAN, TOGGLE = "heatable", "coolable", "cleanable", "toggleable"
LAMP = "DeskLamp"

# task type -> (rooms it happens in, the capability its object needs, the appliance that gives it)
TASK_RULES: dict[str, tuple[tuple[str, ...], str | None, str | None]] = {
    "pick_and_place_simple": ((KITCHEN, LIVING_ROOM, BEDROOM, BATHROOM), None, None),
    "look_at_obj_in_light": ((LIVING_ROOM, BEDROOM), None, None),
    "pick_clean_then_place": ((KITCHEN, BATHROOM), CLEAN, "SinkBasin"),
    "pick_heat_then_place": ((KITCHEN,), HEAT, "Microwave"),
    "pick_cool_then_place": ((KITCHEN,), COOL, "Fridge"),
    "pick_two_obj_and_place": ((KITCHEN, LIVING_ROOM, BEDROOM, BATHROOM), None, None),
}
TASK_TYPES: tuple[str, ...] = tuple(TASK_RULES)


@dataclass(frozen=True)
class ObjectKind:
    """A kind of pickable object: its category (decides the receptacles) and capabilities."""

    category: str
    rooms: tuple[str, ...]
    can: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ReceptacleKind:
    """A kind of receptacle: the rooms it is in, whether it opens, the categories it holds."""

    rooms: tuple[str, ...]
    holds: frozenset[str]
    openable: bool = False
    max_count: int = 1


def _obj(category: str, rooms: tuple[str, ...], *can: str) -> ObjectKind:
    return ObjectKind(category, rooms, frozenset(can))


def _rec(rooms: tuple[str, ...], holds: str, openable: bool = False, max_count: int = 1) -> ReceptacleKind:
    return ReceptacleKind(rooms, frozenset(holds.split()), openable, max_count)


K, L, B, T = (KITCHEN,), (LIVING_ROOM,), (BEDROOM,), (BATHROOM,)
LB = (LIVING_ROOM, BEDROOM)

OBJECT_KINDS: dict[str, ObjectKind] = {
    # kitchen food
    "Apple": _obj("food", K, HEAT, COOL, CLEAN),
    "Bread": _obj("food", K, HEAT, COOL),
    "Egg": _obj("food", K, HEAT, COOL, CLEAN),
    "Potato": _obj("food", K, HEAT, COOL, CLEAN),
    "Tomato": _obj("food", K, HEAT, COOL, CLEAN),
    "Lettuce": _obj("food", K, COOL, CLEAN),
    # kitchen dishes
    "Mug": _obj("dish", K + B, HEAT, COOL, CLEAN),
    "Cup": _obj("dish", K, HEAT, COOL, CLEAN),
    "Plate": _obj("dish", K, HEAT, COOL, CLEAN),
    "Bowl": _obj("dish", K + L, COOL, CLEAN),
    "Pan": _obj("cookware", K, COOL, CLEAN),
    "Pot": _obj("cookware", K, COOL, CLEAN),
    "Kettle": _obj("cookware", K, CLEAN),
    # kitchen utensils and sundries
    "Fork": _obj("utensil", K, CLEAN),
    "Spoon": _obj("utensil", K, CLEAN),
    "Knife": _obj("utensil", K, CLEAN),
    "ButterKnife": _obj("utensil", K, CLEAN),
    "Spatula": _obj("utensil", K, CLEAN),
    "Ladle": _obj("utensil", K, CLEAN),
    "DishSponge": _obj("sundry", K + T, CLEAN),
    "SaltShaker": _obj("sundry", K),
    "PepperShaker": _obj("sundry", K),
    "SoapBottle": _obj("sundry", K + T),
    "WineBottle": _obj("sundry", K, COOL),
    # things on desks and tables
    "AlarmClock": _obj("small", B),
    "Book": _obj("small", LB),
    "CD": _obj("small", B),
    "CellPhone": _obj("small", LB),
    "CreditCard": _obj("small", LB),
    "KeyChain": _obj("small", LB),
    "Laptop": _obj("small", LB),
    "Newspaper": _obj("small", L),
    "Pen": _obj("small", B),
    "Pencil": _obj("small", B),
    "RemoteControl": _obj("small", L),
    "Watch": _obj("small", L),
    "Statue": _obj("decor", L),
    "Vase": _obj("decor", L),
    "Box": _obj("decor", L),
    "Pillow": _obj("soft", LB),
    "TeddyBear": _obj("soft", B),
    "BaseballBat": _obj("sport", B),
    "TennisRacket": _obj("sport", B),
    # bathroom
    "SoapBar": _obj("bath", T, CLEAN),
    "Cloth": _obj("bath", T, CLEAN),
    "Candle": _obj("bath", T),
    "SprayBottle": _obj("bath", T),
    "TissueBox": _obj("bath", T),
    "ToiletPaper": _obj("paper", T),
    "Towel": _obj("towel", T),
    "HandTowel": _obj("handtowel", T),
}

RECEPTACLE_KINDS: dict[str, ReceptacleKind] = {
    "CounterTop": _rec(K + T, "food dish cookware utensil sundry bath paper", max_count=2),
    "Cabinet": _rec(K + L + T, "dish cookware sundry bath paper decor", openable=True, max_count=6),
    "Drawer": _rec(K + LB + T, "utensil sundry small bath", openable=True, max_count=6),
    "Fridge": _rec(K, "food dish cookware sundry", openable=True),
    "Microwave": _rec(K, "food dish", openable=True),
    "SinkBasin": _rec(K + T, "food dish utensil sundry bath"),
    "StoveBurner": _rec(K, "cookware", max_count=4),
    "DiningTable": _rec(K + L, "food dish cookware utensil sundry small decor"),
    "Shelf": _rec(K + LB + T, "dish sundry small decor bath paper", max_count=3),
    "GarbageCan": _rec(K + LB + T, "food sundry bath paper"),
    "CoffeeMachine": _rec(K, "dish"),
    "Sofa": _rec(L, "small soft"),
    "ArmChair": _rec(LB, "small soft"),
    "CoffeeTable": _rec(L, "small decor soft"),
    "SideTable": _rec(LB, "small decor dish", max_count=2),
    "TVStand": _rec(L, "small decor"),
    "Desk": _rec(B, "small dish sport"),
    "Dresser": _rec(LB, "small decor dish"),
    "Bed": _rec(B, "small soft sport"),
    "Safe": _rec(LB, "small", openable=True),
    "Toilet": _rec(T, "bath paper"),
    "BathtubBasin": _rec(T, "bath towel"),
    "TowelHolder": _rec(T, "towel"),
    "HandTowelHolder": _rec(T, "handtowel"),
    "ToiletPaperHanger": _rec(T, "paper"),
}

LAMP_HOLDERS = ("Desk", "SideTable", "Dresser")
# Kinds the domain's actions name as constants: every problem declares them.
DOMAIN_RTYPES = ("FridgeType", "MicrowaveType", "SinkBasinType")
DOMAIN_OTYPES = ("ButterKnifeType", "KnifeType")


def holds(receptacle: str, obj: str) -> bool:
    """True when a receptacle of kind `receptacle` can hold an object of kind `obj`."""
    if obj == LAMP:
        return receptacle in LAMP_HOLDERS
    return OBJECT_KINDS[obj].category in RECEPTACLE_KINDS[receptacle].holds


def receptacle_kinds(room: str) -> list[str]:
    """Receptacle kinds found in `room`, sorted."""
    return sorted(k for k, spec in RECEPTACLE_KINDS.items() if room in spec.rooms)


def object_kinds(room: str) -> list[str]:
    """Pickable object kinds found in `room`, sorted."""
    return sorted(k for k, spec in OBJECT_KINDS.items() if room in spec.rooms)


def capabilities(obj: str) -> frozenset[str]:
    """What an object of kind `obj` can undergo (the lamp only toggles)."""
    return frozenset({TOGGLE}) if obj == LAMP else OBJECT_KINDS[obj].can
