"""BFCL multi-turn data: the 800 entries, their ground truth and function docs, read from the wheel.

The `bfcl-eval` wheel ships `bfcl_eval/data/BFCL_v4_multi_turn_<category>.json` (JSON lines, 200
entries per category), the per-turn ground-truth call strings under `possible_answer/`, and one
function-doc file per backend class under `multi_turn_func_doc/`. Everything here is read-only:
entries are frozen and `initial_config` is deep-copied before a backend loads it.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

CATEGORIES: tuple[str, ...] = ("base", "miss_func", "miss_param", "long_context")
ENTRIES_PER_CATEGORY = 200
BACKEND_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"

# backend class -> (module under BACKEND_PACKAGE, function-doc file): the eight multi-turn backends
BACKENDS: dict[str, tuple[str, str]] = {
    "GorillaFileSystem": ("gorilla_file_system", "gorilla_file_system.json"),
    "MathAPI": ("math_api", "math_api.json"),
    "MessageAPI": ("message_api", "message_api.json"),
    "TwitterAPI": ("posting_api", "posting_api.json"),
    "TicketAPI": ("ticket_api", "ticket_api.json"),
    "TradingBot": ("trading_bot", "trading_bot.json"),
    "TravelAPI": ("travel_booking", "travel_booking.json"),
    "VehicleControlAPI": ("vehicle_control", "vehicle_control.json"),
}


@dataclass(frozen=True)
class Entry:
    """One multi-turn test entry with its ground truth.

    `turns[t]` holds the user messages of turn t (empty for a miss_func turn that only reveals
    functions); `ground_truth[t]` the call strings that solve turn t (empty: the model must not
    call anything). `missed` maps a turn index to the functions held out until that turn;
    `excluded` functions are never shown.
    """

    category: str
    index: int
    id: str
    turns: tuple[tuple[str, ...], ...]
    ground_truth: tuple[tuple[str, ...], ...]
    initial_config: Mapping[str, Any]
    involved_classes: tuple[str, ...]
    excluded: tuple[str, ...]
    missed: Mapping[int, tuple[str, ...]]

    @property
    def long_context(self) -> bool:
        """Backends load the long-context scenario (extra files, records) for this category."""
        return self.category == "long_context"


def data_dir() -> Path:
    """The wheel's data folder; ImportError (with the install command) when bfcl_eval is missing."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "bfcl_eval is not installed; install it with: "
            "pip install mpmath && pip install --no-deps 'bfcl-eval==2026.3.23'"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _json_lines(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _entry(category: str, index: int, row: dict[str, Any], answer: dict[str, Any]) -> Entry:
    if row["id"] != answer["id"] or row["id"] != f"multi_turn_{category}_{index}":
        raise ValueError(f"BFCL data out of order: entry {row['id']!r} vs answer {answer['id']!r} at {index}")
    turns = tuple(tuple(m["content"] for m in turn if m.get("role") == "user") for turn in row["question"])
    truth = tuple(tuple(calls) for calls in answer["ground_truth"])
    if len(turns) != len(truth):
        raise ValueError(f"{row['id']}: {len(turns)} turns but {len(truth)} ground-truth turns")
    missed = {int(turn): tuple(names) for turn, names in (row.get("missed_function") or {}).items()}
    return Entry(
        category=category,
        index=index,
        id=row["id"],
        turns=turns,
        ground_truth=truth,
        initial_config=row.get("initial_config") or {},
        involved_classes=tuple(row["involved_classes"]),
        excluded=tuple(row.get("excluded_function") or ()),
        missed=missed,
    )


@lru_cache(maxsize=None)
def load_category(category: str) -> tuple[Entry, ...]:
    """The 200 entries of one category, in id order (cached; entries are read-only)."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown BFCL category {category!r}; use one of {', '.join(CATEGORIES)}")
    root = data_dir()
    name = f"BFCL_v4_multi_turn_{category}.json"
    rows = _json_lines(root / name)
    answers = _json_lines(root / "possible_answer" / name)
    if len(rows) != len(answers):
        raise ValueError(f"{name}: {len(rows)} entries but {len(answers)} ground-truth rows")
    return tuple(_entry(category, i, row, ans) for i, (row, ans) in enumerate(zip(rows, answers)))


def get_entry(category: str, index: int) -> Entry:
    """Entry `multi_turn_<category>_<index>`."""
    entries = load_category(category)
    if not 0 <= index < len(entries):
        raise IndexError(f"{category} has entries 0..{len(entries) - 1}, not {index}")
    return entries[index]


@lru_cache(maxsize=None)
def class_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    """The function docs of one backend class, in file order (treat as read-only)."""
    if class_name not in BACKENDS:
        raise ValueError(f"unknown BFCL backend {class_name!r}; known: {', '.join(BACKENDS)}")
    return tuple(_json_lines(data_dir() / "multi_turn_func_doc" / BACKENDS[class_name][1]))


def entry_docs(entry: Entry) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every function of the entry's classes: name -> (owning class, doc). Names are unique."""
    owned: dict[str, tuple[str, dict[str, Any]]] = {}
    for class_name in entry.involved_classes:
        for doc in class_docs(class_name):
            if doc["name"] in owned:
                raise ValueError(f"{entry.id}: function {doc['name']!r} is defined by two classes")
            owned[doc["name"]] = (class_name, doc)
    return owned


def visible_functions(entry: Entry, turn: int) -> frozenset[str]:
    """Functions the model may call at `turn`: all documented ones, minus the excluded ones and
    the held-out (miss_func) ones whose reveal turn is still ahead."""
    hidden = set(entry.excluded)
    for reveal_turn, names in entry.missed.items():
        if reveal_turn > turn:
            hidden.update(names)
    return frozenset(name for name in entry_docs(entry) if name not in hidden)
