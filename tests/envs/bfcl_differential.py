"""Our BFCL verdict against the official runner's, trajectory by trajectory (tests and by hand only).

For every entry: the ground truth and systematic perturbations of it (`PERTURBATIONS`), each judged
by our `check_trajectory` and by the installed `bfcl-eval`'s `multi_turn_checker` (the function its
`eval_runner._evaluate_single_multi_turn_entry` calls after decoding). The official checker `eval`s
call strings; it runs here, in the test process only, never in the env or the server.

    .venv/bin/python tests/envs/bfcl_differential.py [--every 1]   # all 800 entries, prints the figure
"""

from __future__ import annotations

import argparse
import inspect
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agentrl_core.envs.bfcl.calls import Call, param_names, parse_python_calls  # noqa: E402
from agentrl_core.envs.bfcl.checker import check_trajectory  # noqa: E402
from agentrl_core.envs.bfcl.data import CATEGORIES, Entry, entry_docs, load_category  # noqa: E402
from agentrl_core.envs.bfcl.executor import backend_class  # noqa: E402

Turns = list[list[list[str]]]  # turn -> step -> call strings


def render(call: Call) -> str:
    """A call as Python source the official runner can `eval` (literal arguments only)."""
    parts = [repr(a) for a in call.args] + [f"{k}={v!r}" for k, v in call.kwargs.items()]
    return f"{call.name}({', '.join(parts)})"


def truth(entry: Entry) -> list[list[Call]]:
    return [[c for text in calls for c in parse_python_calls(text)] for calls in entry.ground_truth]


def as_turns(turns: list[list[Call]]) -> Turns:
    """One step per non-empty turn (as the ground truth is played); no step for an empty turn."""
    return [[[render(c) for c in calls]] if calls else [] for calls in turns]


def signature_order(entry: Entry, name: str) -> list[str]:
    class_name = entry_docs(entry)[name][0]
    params = list(inspect.signature(getattr(backend_class(class_name), name)).parameters)
    return params[1:]  # without self


def doc_order(entry: Entry, name: str) -> list[str]:
    return param_names(entry_docs(entry)[name][1])


def positional(call: Call, order: list[str]) -> Call:
    """The leading keyword arguments that `order` names, moved to positions."""
    args, kwargs = list(call.args), dict(call.kwargs)
    for name in order[len(args):]:
        if name not in kwargs:
            break
        args.append(kwargs.pop(name))
    return Call(call.name, tuple(args), kwargs)


def changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "_x"
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    return None


def _nonempty(turns: list[list[Call]]) -> list[int]:
    return [t for t, calls in enumerate(turns) if calls]


def _one_call(turns: list[list[Call]], rng: random.Random) -> tuple[int, int]:
    turn = rng.choice(_nonempty(turns))
    return turn, rng.randrange(len(turns[turn]))


def p_exact(entry: Entry, gt: list[list[Call]], rng: random.Random) -> Turns:
    return as_turns(gt)


def p_one_call_per_step(entry: Entry, gt: list[list[Call]], rng: random.Random) -> Turns:
    return [[[render(c)] for c in calls] for calls in gt]


def p_reversed(entry: Entry, gt: list[list[Call]], rng: random.Random) -> Turns:
    return as_turns([calls[::-1] for calls in gt])


def p_drop(entry: Entry, gt: list[list[Call]], rng: random.Random) -> Turns:
    turn, i = _one_call(gt, rng)
    gt[turn].pop(i)
    return as_turns(gt)


def p_duplicate(entry: Entry, gt: list[list[Call]], rng: random.Random) -> Turns:
    turn, i = _one_call(gt, rng)
    gt[turn].insert(i, gt[turn][i])
    return as_turns(gt)


def p_empty_turn(entry: Entry, gt: list[list[Call]], rng: random.Random) -> Turns:
    gt[rng.choice(_nonempty(gt))] = []
    return as_turns(gt)


def p_changed_argument(entry: Entry, gt: list[list[Call]], rng: random.Random) -> Turns:
    turn, i = _one_call(gt, rng)
    call = gt[turn][i]
    if call.kwargs:
        key = rng.choice(sorted(call.kwargs))
        gt[turn][i] = Call(call.name, call.args, {**call.kwargs, key: changed(call.kwargs[key])})
    return as_turns(gt)


def p_string_for_number(entry: Entry, gt: list[list[Call]], rng: random.Random) -> Turns:
    """A number argument passed as a string (the official runner has no type checks)."""
    for calls in gt:
        for i, call in enumerate(calls):
            numbers = [k for k, v in call.kwargs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if numbers:
                calls[i] = Call(call.name, call.args, {**call.kwargs, numbers[0]: str(call.kwargs[numbers[0]])})
                return as_turns(gt)
    return as_turns(gt)


def p_unknown_function(entry: Entry, gt: list[list[Call]], rng: random.Random) -> Turns:
    gt[rng.choice(_nonempty(gt))].append(Call("no_such_function", (), {"x": 1}))
    return as_turns(gt)


def p_a_turn_early(entry: Entry, gt: list[list[Call]], rng: random.Random) -> Turns:
    """The calls of turn t+1 made in turn t too (so turn t+1 is solved before it is asked)."""
    turn = rng.randrange(len(gt) - 1) if len(gt) > 1 else 0
    if turn + 1 < len(gt):
        gt[turn] = gt[turn] + gt[turn + 1]
    return as_turns(gt)


def p_call_where_none_is_due(entry: Entry, gt: list[list[Call]], rng: random.Random) -> Turns:
    """In each turn whose ground truth is empty: the next non-empty turn's calls (miss_func:
    the held-out function), else the previous turn's; elsewhere, a read-only repeat."""
    for turn, calls in enumerate(gt):
        if calls:
            continue
        later = [t for t in _nonempty(gt) if t > turn]
        earlier = [t for t in _nonempty(gt) if t < turn]
        source = later[0] if later else (earlier[-1] if earlier else None)
        if source is not None:
            gt[turn] = list(gt[source])
    return as_turns(gt)


def p_positional_by_signature(entry: Entry, gt: list[list[Call]], rng: random.Random) -> Turns:
    return as_turns([[positional(c, signature_order(entry, c.name)) for c in calls] for calls in gt])


def p_positional_by_doc(entry: Entry, gt: list[list[Call]], rng: random.Random) -> Turns:
    """Positional arguments in the doc's order: wrong wherever it differs from the signature's."""
    return as_turns([[positional(c, doc_order(entry, c.name)) for c in calls] for calls in gt])


def p_unparsable_step(entry: Entry, gt: list[list[Call]], rng: random.Random) -> Turns:
    """A step that does not decode (dropped by both), beside the real one."""
    turns = as_turns(gt)
    turn = rng.choice(_nonempty(gt))
    turns[turn].insert(0, ["cd(folder='x'"])
    return turns


PERTURBATIONS: dict[str, Callable[[Entry, list[list[Call]], random.Random], Turns]] = {
    name.removeprefix("p_"): fn for name, fn in globals().items() if name.startswith("p_") and callable(fn)
}


def official_verdict(entry: Entry, turns: Turns, model_name: str) -> bool:
    """The installed `bfcl-eval` runner's verdict: its decoding step (a step that does not decode is
    dropped), its force-termination check, then `multi_turn_checker`."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    if len(turns) != len(entry.ground_truth):
        return False
    decoded = [[step for step in steps if step and _decodes(step)] for steps in turns]
    test_entry = {"id": entry.id, "initial_config": entry.initial_config, "involved_classes": list(entry.involved_classes)}
    try:
        result = multi_turn_checker(decoded, [list(g) for g in entry.ground_truth], test_entry, entry.category, model_name)
    finally:
        for key in [k for k in vars(multi_turn_utils) if k.startswith(model_name)]:
            del vars(multi_turn_utils)[key]  # the runner keeps instances in module globals
    return bool(result["valid"])


def _decodes(step: list[str]) -> bool:
    try:
        for text in step:
            parse_python_calls(text)
        return True
    except ValueError:
        return False


def compare(every: int = 1, seed: int = 0) -> tuple[Counter, list[tuple[str, str, bool, bool]]]:
    """(verdict counts per perturbation, disagreements) over every `every`-th entry of each category."""
    counts: Counter = Counter()
    differ: list[tuple[str, str, bool, bool]] = []
    for category in CATEGORIES:
        for entry in load_category(category)[::every]:
            rng = random.Random(f"{seed}:{entry.id}")
            for name, make in PERTURBATIONS.items():
                turns = make(entry, truth(entry), rng)
                ours = check_trajectory(entry, turns).valid
                theirs = official_verdict(entry, turns, f"agentrl_diff_{name}")
                counts[(name, ours)] += 1
                if ours != theirs:
                    differ.append((entry.id, name, ours, theirs))
    return counts, differ


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--every", type=int, default=1, help="check every n-th entry of each category")
    args = p.parse_args()
    start = time.perf_counter()
    counts, differ = compare(args.every)
    n = sum(counts.values())
    print(f"{'perturbation':26s} {'ours valid':>10s} {'invalid':>8s}")
    for name in PERTURBATIONS:
        print(f"{name:26s} {counts[(name, True)]:10d} {counts[(name, False)]:8d}")
    print(f"{n} trajectories, {n - len(differ)} equal verdicts ({100 * (n - len(differ)) / n:.2f}%), "
          f"{len(differ)} differ; {time.perf_counter() - start:.0f} s")
    for row in differ[:20]:
        print("  differs:", row)
    from bench.recording import current
    if (recording := current()) is not None:
        recording.report({"trajectories": n, "equal_verdicts": n - len(differ), "equal_percent": 100 * (n - len(differ)) / n,
                          "seconds": time.perf_counter() - start}, args=vars(args))


if __name__ == "__main__":
    from bench.recording import run_recorded
    run_recorded("bfcl_differential", main)
