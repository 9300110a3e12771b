"""The executor contract: where a GRPO step's rollout and update run, and nothing about what a step is.

The loop (grpo/loop.py) is the algorithm; an executor only carries its phases out somewhere. Two exist:
- `LocalExecutor` (grpo/local.py): this process — the trainer's own model samples through its engine, the
  update runs on it, the engine is told after each update;
- `RayExecutor` (distributed/executor.py): a rollout worker group (actors, each with an engine and a copy of the
  weights) and a trainer actor; weights travel from the trainer to the workers through Ray's object store.

Version v = the weights after v optimizer steps. `publish(v, in_flight)` gives the rollout side version v:
between rollouts (`in_flight` False, the synchronous schedule) or to a rollout under way, taken between two
decode steps (`in_flight` True, the asynchronous schedule: only an executor with `overlaps` can).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ContextManager, Protocol

from agentrl_core.rollout import EpisodeSpec, Trajectory


class Executor(Protocol):
    """What the loop asks of the place it runs in. Every method blocks until its work is done; the loop runs
    `play` in its rollout thread and everything else in its own, so an executor that `overlaps` must allow
    `play` to run while `update`, `publish`, `log` or `save` runs."""

    start_step: int
    """The step the stage resumes from (0, or the step of its last complete checkpoint)."""
    overlaps: bool
    """Whether a rollout may run during an update (distributed.max_policy_lag >= 1 needs it)."""

    def play(self, specs: Sequence[EpisodeSpec], seed: int, step: int) -> list[Trajectory]:
        """One round of step `step`'s episodes (0-based) with the rollout side's current weights, sampled from
        `seed`; one trajectory per spec, in order."""

    def after_rollout(self, trajs: list[Trajectory], step: int) -> dict[str, float]:
        """What the rollout side does with a step's trajectories before they train (the experience pool:
        summarise them, measure with vs without, strip the block); its metrics."""

    def engine_counters(self) -> dict[str, float]:
        """The rollout side's running counts, summed over it: the engines' (prefilled and reused tokens,
        evictions, forward seconds; none for engines that keep none) and `retries` (rounds played again after
        a rollout process died). The loop reports each step's share as rollout/<name>."""

    def rollout_peak_gib(self) -> float:
        """The rollout side's peak resident memory so far, GiB (the largest of its processes)."""

    def update(self, usable: list[Trajectory]) -> dict[str, float]:
        """One policy update on the trajectories (the trainer's policy_update); its metrics."""

    def publish(self, version: int, in_flight: bool) -> None:
        """The trainer's weights, as version `version`, to the rollout side (see the module docstring)."""

    def validate(self, ids: Sequence[int]) -> dict[str, float]:
        """val/* of the trainer's current policy on the task ids (greedy, the evaluation's sampling)."""

    def keep_best(self, step: int, metrics: dict[str, float]) -> None:
        """Keep the current weights as the stage's best checkpoint (`<stage>/best/`) when `metrics` beat it."""

    def peaks(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        """memory/peak_rss_gib (the trainer's process) and memory/run_peak_gib (every process of the run added)
        after `step`, each against the run's memory plan (a warning when over it); {} where none is measured."""

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Append the step's metrics to the stage's metrics file (and TensorBoard)."""

    def save(self, step: int, extra: dict[str, Any]) -> str:
        """A complete, atomic checkpoint of `step` (keeping trainer.keep_last); its path."""

    def last_checkpoint(self) -> str:
        """The path of the stage's last complete checkpoint."""

    def resume_hint(self) -> ContextManager[None]:
        """Around the loop: a DiskFullError gets the step that running the same command again resumes from."""

    def close(self) -> None:
        """Release what the executor holds (actors, engines, files); called once, also after an error."""
