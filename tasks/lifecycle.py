"""One run lifecycle for every flow (train, curriculum, SFT, batch and nightly evaluation).

    with run_lifecycle(registry_url, root, name, kind, recipe) as run_id:
        ...the flow's work...

holds one registry for the run (its bookkeeping tasks share it: `run_registry`), opens (or re-opens) the
run's record there as "running", handles Ctrl-C and SIGTERM for the block
(agentrl_core.system.stop_signals: stop within seconds; a second signal exits at once), and ends the record
whatever happens:

    the block returns                      -> "completed"
    a signal (Ctrl-C, SIGTERM)             -> "interrupted"
    any other exception                    -> "failed"

The error that ended the run is the one raised: a registry that cannot record the end (e.g. on the same full
disk) is logged, never raised over it. Secrets are prepared by the flow before: the recipe stored here is the
one whose secrets are references.
"""

from __future__ import annotations

import datetime as dt
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from prefect import get_run_logger, runtime, task

from agentrl_core.config import RecipeConfig, dump
from agentrl_core.store import open_registry
from agentrl_core.system.stop_signals import handling_signals, requested
from tasks.retry import retry_unless_disk_full

QUICK = {"retries": 2, "retry_delay_seconds": 2, "retry_condition_fn": retry_unless_disk_full}
_held: dict[tuple[int, str, str], Any] = {}
"""The registry each running lifecycle holds open, by (thread, url, root): its bookkeeping tasks share it."""


@contextmanager
def run_registry(registry_url: Any, root: str | Path) -> Iterator[Any]:
    """The run's registry: the one its lifecycle holds (same thread, url and root), else one opened and closed
    here (a task run on another thread, a caller outside a flow)."""
    key = (threading.get_ident(), str(registry_url), str(root))
    if key in _held:
        yield _held[key]
        return
    reg = open_registry(registry_url, Path(root))
    try:
        yield reg
    finally:
        reg.close()


@contextmanager
def holding_registry(registry_url: Any, root: str) -> Iterator[None]:
    """One registry (engine and migrations check) for the whole run instead of one per bookkeeping call."""
    key = (threading.get_ident(), str(registry_url), str(root))
    if key in _held:  # a flow inside a flow of the same run: the outer one holds it
        yield
        return
    _held[key] = open_registry(registry_url, Path(root))
    try:
        yield
    finally:
        _held.pop(key).close()


@task(name="registry-run", **QUICK)
def open_run(registry_url: Any, root: str, name: str, recipe: dict) -> int:
    """Register (or re-open) the run `name` as running; returns its id."""
    with run_registry(registry_url, root) as reg:
        return reg.ensure_run(name, recipe=recipe, flow_run_id=str(runtime.flow_run.id) if runtime.flow_run.id else None)


@task(name="registry-run-status", **QUICK)
def end_run(registry_url: Any, root: str, run_id: int, status: str) -> None:
    """Set the run's final status: completed, failed or interrupted."""
    with run_registry(registry_url, root) as reg:
        reg.set_run_status(run_id, status)


def end_quietly(registry_url: Any, root: str, name: str, run_id: int, status: str) -> None:
    """end_run from an `except`: a failure to record is logged, never raised over the run's own error."""
    try:
        end_run(registry_url, root, run_id, status)
    except Exception as err:  # noqa: BLE001 - the run's own error is already propagating
        get_run_logger().warning("could not record run %s as %s in the registry: %s", name, status, err)


@contextmanager
def run_lifecycle(registry_url: Any, root: str | Path, name: str, kind: str, recipe: dict) -> Iterator[int]:
    """The run's record from start to end (module docstring); yields its id."""
    root = str(root)
    with holding_registry(registry_url, root):
        run_id = open_run(registry_url, root, name, {"kind": kind, **recipe})
        try:
            with handling_signals():  # Ctrl-C/SIGTERM: stop within seconds, recorded Crashed; a second exits at once
                yield run_id
        except BaseException as err:
            end_quietly(registry_url, root, name, run_id, "interrupted" if was_signalled(err) else "failed")
            raise
        end_run(registry_url, root, run_id, "completed")


def was_signalled(err: BaseException) -> bool:
    """True when a signal ended the run: Ctrl-C (KeyboardInterrupt, stop_signals.Interrupted), or any error
    raised while stopping after one (Prefect's SIGTERM bridge raises its TerminationSignal first)."""
    return isinstance(err, KeyboardInterrupt) or requested() is not None


def recipe_lifecycle(recipe: RecipeConfig, kind: str) -> Any:
    """run_lifecycle for a flow with a recipe: its registry, root and name, the recipe stored."""
    return run_lifecycle(recipe.store.registry_url, recipe.run.root, recipe.run.name, kind, dump(recipe))


def flow_run_name(kind: str) -> str:
    """The record name of a flow run that has no run name of its own (batch and nightly evaluation): the kind,
    the UTC time it started and Prefect's name for the flow run, e.g. `batch-eval-20261127T2201Z-gentle-otter`."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    flow_name = runtime.flow_run.name
    return f"{kind}-{stamp}" + (f"-{flow_name}" if flow_name else "")
