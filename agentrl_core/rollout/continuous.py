"""The continuous agent loop: every episode generates and steps its environment on its own clock.

With an engine that supports it (`engine.continuous`, the native engine), episodes do not move in
lock-step. An episode's reply is submitted as soon as its context is ready; when the reply is
finished, its environment step runs on a worker thread while the engine keeps decoding the other
episodes; the observation is appended and the next turn submitted. Nobody waits for the slowest
episode of a turn, and environment time hides behind decoding.

The schedule does not depend on timing, so a seeded run repeats exactly: the environment step of
a reply finished at engine step s is joined at engine step s + `env_lag` (waiting for it then if
it is late), and episodes rejoin in index order. Each episode samples from its own generator,
seeded from (seed, episode index), so its draws do not depend on the batch it shares.

At most `max_live` episodes are open at once (default: the engine's `max_batch`, else all): the
rest wait their turn, in index order, and each opens (its env session created and reset, on a
worker thread, joined like an env step) when an episode ends. An env with a process per session
(ALFWorld) then runs `max_live` processes, not one per task: 200 test games at once were 200
processes of ~70-100 MB beside the model, and the machine ran out of memory.

Failures stay data, as in the lock-step loop: an environment error ends that episode with
`error` set; an engine error (e.g. out of memory) fails the episodes it was generating for.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Sequence

from agentrl_core.config import SamplingConfig
from agentrl_core.envs.base import Env
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout.episode import (
    Episode, EpisodeSpec, LoopLimits, advance, cut_episode, finish_episode, open_episode, overlong_openings,
    refuse_overlong_openings,
)
from agentrl_core.rollout.sampling_seeds import make_generator
from agentrl_core.rollout.trajectory import Trajectory

log = logging.getLogger(__name__)

ENV_LAG_STEPS = 1
"""Engine steps an environment call may take before the loop waits for it (each step decodes every
other live episode, so light environments never make it wait)."""


def run_continuous(
    engine: Any, chat: ChatFormat, env_factory: Callable[[], Env], specs: Sequence[EpisodeSpec],
    sampling: SamplingConfig, limits: LoopLimits, *, seed: int = 0, workers: int = 8,
    on_turn: Callable[[int, int], None] | None = None, env_lag: int = ENV_LAG_STEPS, max_live: int | None = None,
) -> list[Trajectory]:
    """Play every spec to the end through a continuous engine; one trajectory per spec, in order. At most
    `max_live` (default `engine.max_batch`, else every spec) are open at once (see the module docstring)."""
    window = max_live or getattr(engine, "max_batch", None) or len(specs)
    if window < 1:
        raise ValueError(f"max_live must be >= 1, got {window}")
    with ThreadPoolExecutor(max_workers=max(workers, min(64, len(specs)))) as pool:
        opener = lambda s: open_episode(env_factory, chat, s, limits)  # noqa: E731
        first = list(pool.map(opener, specs[:window]))
        refuse_overlong_openings(first, limits)
        loop = _Loop(engine, chat, first, specs, opener, sampling, limits, seed, pool, env_lag, on_turn)
        loop.run()
    trajs = [e.traj for e in loop.episodes]
    err = overlong_openings(trajs, limits)  # one opened later, in another's place: ended at once, unplayed
    if err is not None:
        raise err
    return trajs


class _Loop:
    """The state of one continuous run: which episode waits on the engine, which on its environment."""

    def __init__(self, engine: Any, chat: ChatFormat, opened: list[Episode], specs: Sequence[EpisodeSpec],
                 opener: Callable[[EpisodeSpec], Episode], sampling: SamplingConfig, limits: LoopLimits, seed: int,
                 pool: ThreadPoolExecutor, env_lag: int, on_turn: Callable[[int, int], None] | None) -> None:
        self.engine, self.chat, self.sampling, self.limits = engine, chat, sampling, limits
        self.specs, self.opener = specs, opener
        self.episodes: list[Episode] = list(opened)  # episode i is opened once the i - 1 before it were
        self.pool, self.env_lag, self.on_turn = pool, max(0, env_lag), on_turn
        sampled = sampling.temperature > 0
        self.generators = [make_generator(seed, i, engine.device) if sampled else None for i in range(len(specs))]
        self.keys = [object() for _ in specs]  # engine sequence names, unique to this run
        self.played = [0] * len(specs)  # turns each episode has played
        self.done = [False] * len(specs)
        self.owner: dict[int, int] = {}  # engine request id -> episode index
        self.env_jobs: dict[int, tuple[Future[Any], int]] = {}  # episode index -> (env step or opening, due step)
        self.clock = 0
        self.reported = 0

    def run(self) -> None:
        for i in range(len(self.episodes)):
            self._opened(i)
        while True:
            self._join_due()
            if self.engine.has_work():
                self._engine_step()
                self.clock += 1
            elif self.env_jobs:
                self.clock = min(due for _, due in self.env_jobs.values())
            else:
                break
        self._report_progress()

    def _opened(self, i: int) -> None:
        """Episode i is open: its first turn goes to the engine (a failed reset ends it at once)."""
        if self.episodes[i].env is None:
            self._ended(i)
        else:
            self._submit(i)

    def _ended(self, i: int) -> None:
        """Episode i is over: the next waiting spec opens in its place (on a worker thread, joined when due)."""
        self.done[i] = True
        nxt = len(self.episodes)
        if nxt < len(self.specs):
            self.episodes.append(None)  # type: ignore[arg-type]  (filled when its opening is joined)
            self.env_jobs[nxt] = (self.pool.submit(self.opener, self.specs[nxt]), self.clock + self.env_lag)

    def _submit(self, i: int) -> None:
        rid = self.engine.submit(self.episodes[i].traj.token_ids, self.sampling, key=self.keys[i],
                                 generator=self.generators[i])
        self.owner[rid] = i

    def _engine_step(self) -> None:
        try:
            finished = self.engine.step()
        except (RuntimeError, ValueError) as err:  # e.g. out of memory: fail these episodes, keep the run
            log.exception("engine failed with %d episodes generating", len(self.owner))
            self._fail_generating(err)
            return
        for f in finished:
            i = self.owner.pop(f.rid)
            gen: Any = f.generation if f.error is None else RuntimeError(f.error)
            job = self.pool.submit(advance, self.chat, self.episodes[i], gen, self.limits, self.played[i])
            self.env_jobs[i] = (job, self.clock + self.env_lag)

    def _fail_generating(self, err: Exception) -> None:
        self.engine.abort()
        failed, self.owner = sorted(self.owner.values()), {}
        for i in failed:
            ep = self.episodes[i]
            ep.traj.error = f"engine failed: {type(err).__name__}: {err}"
            finish_episode(ep)
            self._ended(i)

    def _join_due(self) -> None:
        """Collect the environment steps due by now (in episode order) and start the next turns."""
        for i in sorted(i for i, (_, due) in self.env_jobs.items() if due <= self.clock):
            job, _ = self.env_jobs.pop(i)
            result = job.result()  # advance()/open_episode record env failures on the trajectory; else a bug
            if self.episodes[i] is None:  # an opening
                self.episodes[i] = result
                self._opened(i)
            else:
                self._after_env(i)
        self._report_progress()

    def _after_env(self, i: int) -> None:
        ep = self.episodes[i]
        self.played[i] += 1
        if ep.env is not None and self.played[i] >= self.limits.max_turns:
            cut_episode(ep, "max_turns")  # still running after max_turns
        if ep.env is None:
            self.engine.release(self.keys[i])
            self._ended(i)
        else:
            self._submit(i)

    def _report_progress(self) -> None:
        """on_turn(t, n) once every episode has played turn t or ended, n = the episodes that played turn t
        (what the lock-step loop reports after each turn)."""
        if self.on_turn is None:
            return
        done = min((self.limits.max_turns if d else p for d, p in zip(self.done, self.played)),
                   default=self.limits.max_turns)
        while self.reported < done:
            live = sum(p > self.reported for p in self.played)
            if live == 0:
                self.reported = self.limits.max_turns
                return
            self.on_turn(self.reported, live)
            self.reported += 1
