"""A safe executor over fresh BFCL backend instances: parsed calls in, result strings out.

Unlike the official executor (which builds Python source from model output, `eval`s it, and keeps
instances in module globals shared by every episode and thread), each `Executor` owns its own
backend instances, loaded from a deep copy of the entry's `initial_config` with the backends'
`_load_scenario(config, long_context=...)`. A call runs only if its name is a function documented
for the entry's classes and its arguments bind; then `getattr(instance, name)(**kwargs)`. As in
the official executor (which resolves any public method by name), a function held out of the
current turn's docs still runs when called by name, and positional arguments bind in the order
of the backend method's signature (which can differ from the doc's: `purchase_insurance`). Results are rendered as the official checker does
(str as is, dict as JSON, anything else `str()`), and every failure becomes a result string that
starts with `ERROR_PREFIX`, so a bad call is data, never an exception.
"""

from __future__ import annotations

import copy
import decimal
import importlib
import inspect
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from agentrl_core.envs.bfcl.calls import Call, CallError, bind
from agentrl_core.envs.bfcl.data import BACKEND_PACKAGE, BACKENDS, Entry, entry_docs

ERROR_PREFIX = "Error during execution: "  # the official executor's prefix for a failed call
MAX_PRECISION = 1_000  # MathAPI sets mpmath/decimal precision from the call: cap it (DoS guard)
MAX_EXPONENT = 10_000  # MathAPI.power with integers builds exact big ints: cap the exponent
MAX_INT = 10**18  # integer arguments beyond this are refused (no backend needs them)


@dataclass(frozen=True)
class Outcome:
    """One executed call: its rendered result and whether it ran without an error."""

    call: Call | None
    result: str
    ok: bool


def backend_class(class_name: str) -> type:
    """The backend class named in `involved_classes` (imported from the wheel on first use)."""
    if class_name not in BACKENDS:
        raise ValueError(f"unknown BFCL backend {class_name!r}; known: {', '.join(BACKENDS)}")
    module = importlib.import_module(f"{BACKEND_PACKAGE}.{BACKENDS[class_name][0]}")
    return getattr(module, class_name)


def render_result(value: Any) -> str:
    """A call's return value as the official checker compares it: str, JSON for dicts, else str()."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        try:
            return json.dumps(value)
        except (TypeError, ValueError, OverflowError):
            return str(value)
    return str(value)


def _number(value: Any) -> float | None:
    """`value` as a number if it is one or a string that reads as one (mpmath coerces strings)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _guard(name: str, kwargs: Mapping[str, Any]) -> None:
    """Refuse arguments that would make a backend run for minutes (CallError)."""
    for key, value in kwargs.items():
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise CallError(f"{name}: argument {key!r} is out of range (|value| <= {MAX_INT})")
    precision = _number(kwargs.get("precision"))
    if precision is not None and precision > MAX_PRECISION:
        raise CallError(f"{name}: precision {kwargs['precision']} is above the limit {MAX_PRECISION}")
    exponent = _number(kwargs.get("exponent"))
    if name == "power" and exponent is not None and abs(exponent) > MAX_EXPONENT:
        raise CallError(f"power: exponent {kwargs['exponent']} is above the limit {MAX_EXPONENT}")


def _isolated(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Call `fn`, restoring the process-wide numeric precision that MathAPI changes in place."""
    import mpmath

    dps, context = mpmath.mp.dps, decimal.getcontext().copy()
    try:
        return fn(**kwargs)
    finally:
        mpmath.mp.dps = dps
        decimal.setcontext(context)


class Executor:
    """The backend instances of one entry for one party (the model, or the ground truth)."""

    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        self.docs = entry_docs(entry)  # name -> (class, doc)
        self.instances: dict[str, Any] = {name: self._fresh(name) for name in entry.involved_classes}

    def _fresh(self, class_name: str) -> Any:
        instance = backend_class(class_name)()
        load = getattr(instance, "_load_scenario", None)
        if load is not None:  # MathAPI is stateless and has none
            config = copy.deepcopy(dict(self.entry.initial_config).get(class_name, {}))
            load(config, long_context=self.entry.long_context)
        return instance

    def run(self, call: Call) -> Outcome:
        """Execute one call if it is documented and well-typed; otherwise an error outcome."""
        try:
            kwargs = self._check(call)
            value = _isolated(getattr(self.instances[self.docs[call.name][0]], call.name), kwargs)
            return Outcome(call, render_result(value), True)
        except CallError as exc:
            return Outcome(call, f"{ERROR_PREFIX}{exc}", False)
        except Exception as exc:  # noqa: BLE001 - a backend bug on odd input is the model's error result
            return Outcome(call, f"{ERROR_PREFIX}{exc}", False)  # the official wording

    def run_all(self, calls: Iterable[Call]) -> list[Outcome]:
        """Execute calls in order (each independently, as the official executor does)."""
        return [self.run(call) for call in calls]

    def positional_order(self, name: str) -> list[str]:
        """The parameters positional arguments fill for function `name`: the backend method's
        signature order (what Python's call binding, and so the official executor, uses)."""
        method = getattr(self.instances[self.docs[name][0]], name)
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return [p.name for p in inspect.signature(method).parameters.values() if p.kind in kinds]

    def _check(self, call: Call) -> dict[str, Any]:
        if call.name not in self.docs:
            raise CallError(f"{call.name!r} is not one of the available functions")
        positional = self.positional_order(call.name) if call.args else None
        kwargs = bind(call, self.docs[call.name][1], positional, check_types=False)  # as the official runner
        _guard(call.name, kwargs)
        return kwargs

    def public_state(self, class_name: str) -> dict[str, Any]:
        """The public attributes of one instance: what the official state check compares."""
        return {k: v for k, v in vars(self.instances[class_name]).items() if not k.startswith("_")}
