"""The continuous agent loop over the native engine: same episodes as lock-step, repeatable, failures stay local."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl_core.config import SamplingConfig
from agentrl_core.envs import make
from agentrl_core.envs.base import Env, StepResult
from agentrl_core.errors import EnvError, PromptTooLongError
from agentrl_core.models import load_model, load_tokenizer
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import EpisodeSpec, HFEngine, LoopLimits, run_episodes
from agentrl_core.rollout.native import NativeEngine

HOUSEHOLD = {"max_steps": 6, "two_room_prob": 0.0, "max_receptacles": 4, "max_objects": 3}


def household() -> Env:
    return make("household", **HOUSEHOLD)


def _specs(n: int, group_size: int = 1) -> list[EpisodeSpec]:
    return [EpisodeSpec(task_id=t, group=t, sample=s) for t in range(n) for s in range(group_size)]


def _same(a, b) -> bool:
    keys = ("token_ids", "loss_mask", "messages", "reward", "num_turns", "terminated", "truncated", "error")
    return all(getattr(a, k) == getattr(b, k) for k in keys)


@pytest.fixture(scope="module")
def tiny(tiny_model_path: Path):
    model, tok = load_model(tiny_model_path), load_tokenizer(tiny_model_path)
    return model, tok, ChatFormat(tok)


@pytest.mark.slow
def test_greedy_episodes_equal_the_lock_step_hf_loop(embedded_model_path: Path):
    model, tok = load_model(embedded_model_path), load_tokenizer(embedded_model_path)
    chat = ChatFormat(tok)
    sampling, limits = SamplingConfig(temperature=0.0, max_new_tokens=12), LoopLimits(4, 2048)
    hf = run_episodes(HFEngine(model, tok), chat, household, _specs(4), sampling, limits)
    native = NativeEngine(model, tok)
    got = run_episodes(native, chat, household, _specs(4), sampling, limits)
    assert all(_same(a, b) for a, b in zip(got, hf))
    assert sum(t.num_turns for t in got) > 4  # multi-turn: later turns reused the kept caches
    assert native.stats()["reused_tokens"] > native.stats()["prefilled_tokens"]
    for a, b in zip(got, hf):
        model_lp = [(x, y) for x, y, m in zip(a.logprobs, b.logprobs, a.loss_mask) if m]
        assert max(abs(x - y) for x, y in model_lp) < 1e-3


def test_seeded_runs_repeat_exactly(tiny):
    model, tok, chat = tiny
    sampling, limits = SamplingConfig(temperature=1.0, max_new_tokens=8), LoopLimits(3, 2048)
    a = run_episodes(NativeEngine(model, tok), chat, household, _specs(3, 2), sampling, limits, seed=11)
    b = run_episodes(NativeEngine(model, tok), chat, household, _specs(3, 2), sampling, limits, seed=11)
    c = run_episodes(NativeEngine(model, tok), chat, household, _specs(3, 2), sampling, limits, seed=12)
    assert all(_same(x, y) for x, y in zip(a, b))
    assert not all(_same(x, y) for x, y in zip(a, c))
    assert all(len(t.token_ids) == len(t.loss_mask) == len(t.logprobs) for t in a)


class FlakyEnv(Env):
    """The household env, except that task 1 fails at its second step."""

    name = "flaky"
    action_format = "text"

    def __init__(self) -> None:
        super().__init__()
        self.inner, self.task, self.steps = household(), None, 0
        self.system_prompt = self.inner.system_prompt

    def task_ids(self, split):
        return self.inner.task_ids(split)

    def _reset(self, *, task_id, seed, options):
        self.task, self.steps = task_id, 0
        return self.inner.reset(task_id=task_id, seed=seed)

    def _step(self, action) -> StepResult:
        self.steps += 1
        if self.task == 1 and self.steps == 2:
            raise EnvError("the engine behind task 1 crashed")
        return self.inner.step(action)

    def expert_action(self):
        return self.inner.expert_action()


class ChattyEnv(FlakyEnv):
    """Task 2 answers with a huge observation, so its episode outgrows the context."""

    def _step(self, action) -> StepResult:
        result = self.inner.step(action)
        if self.task == 2:
            return StepResult("blah " * 3000, result.reward, False, False, result.info)
        return result


@pytest.mark.parametrize("env_cls", [FlakyEnv, ChattyEnv])
def test_a_failing_or_overlong_episode_leaves_the_others_alone(tiny, env_cls):
    model, tok, chat = tiny
    sampling, limits = SamplingConfig(temperature=1.0, max_new_tokens=6), LoopLimits(4, 1024)
    engine = NativeEngine(model, tok)
    trajs = run_episodes(engine, chat, env_cls, _specs(4), sampling, limits, seed=3)
    odd = trajs[1] if env_cls is FlakyEnv else trajs[2]
    if env_cls is FlakyEnv:
        assert odd.error and "task 1 crashed" in odd.error and odd.num_turns == 2
    else:
        assert odd.error is None and odd.truncated and odd.extra["truncated_by"] == "context"
    others = [t for t in trajs if t is not odd]
    assert all(t.error is None and (t.terminated or t.truncated) for t in others)
    assert all(t.num_turns == 4 or t.terminated for t in others)
    assert not engine.has_work() and engine.cache.used_slots == 0  # every finished episode gave its cache back


def test_an_overlong_opening_is_refused_even_when_it_opens_later(tiny):
    """max_live=1: the first episode plays, the overlong one opens in its place and ends unplayed; then the
    run is refused (PromptTooLongError), every cache given back."""
    model, tok, chat = tiny
    envs = [household() for _ in range(6)]
    lengths = {t: len(chat.prompt_ids([{"role": "system", "content": e.system_prompt},
                                       {"role": "user", "content": e.reset(task_id=t)[0]}])) for t, e in enumerate(envs)}
    short, long_ = min(lengths, key=lengths.__getitem__), max(lengths, key=lengths.__getitem__)
    assert lengths[short] < lengths[long_]
    engine = NativeEngine(model, tok)
    specs = [EpisodeSpec(task_id=short), EpisodeSpec(task_id=long_)]
    with pytest.raises(PromptTooLongError, match=rf"1 of 2 episodes .*\(the longest {lengths[long_]}\)"):
        run_episodes(engine, chat, household, specs, SamplingConfig(temperature=1.0, max_new_tokens=4),
                     LoopLimits(2, lengths[long_]), seed=1, max_live=1)
    assert not engine.has_work() and engine.cache.used_slots == 0
    with pytest.raises(PromptTooLongError, match=r"1 of 1 episodes"):  # in the first window: refused at once
        run_episodes(engine, chat, household, specs[::-1], SamplingConfig(temperature=1.0, max_new_tokens=4),
                     LoopLimits(2, lengths[long_]), seed=1, max_live=1)


def test_progress_is_reported_per_turn(tiny):
    model, tok, chat = tiny
    calls = []
    run_episodes(NativeEngine(model, tok), chat, household, _specs(3), SamplingConfig(temperature=1.0, max_new_tokens=4),
                 LoopLimits(3, 2048), on_turn=lambda t, n: calls.append((t, n)))
    assert [t for t, _ in calls] == list(range(len(calls))) and 1 <= len(calls) <= 3
    assert all(0 < n <= 3 for _, n in calls)


class BrokenEngine(NativeEngine):
    """Fails its third step, as an out-of-memory would."""

    def step(self):
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls == 3:
            raise RuntimeError("out of memory")
        return super().step()


def test_an_engine_failure_fails_its_episodes_not_the_run(tiny):
    model, tok, chat = tiny
    trajs = run_episodes(BrokenEngine(model, tok), chat, household, _specs(3),
                         SamplingConfig(temperature=1.0, max_new_tokens=4), LoopLimits(3, 2048))
    assert trajs and all(t.error and "out of memory" in t.error for t in trajs)


class CountedEnv(FlakyEnv):
    """Household (no step fails), counting the sessions open at once (reset to close); task 4's reset fails."""

    name = "counted"
    open_now = 0
    most_open = 0

    def __init__(self) -> None:
        super().__init__()
        self.counted = False

    def _reset(self, *, task_id, seed, options):
        if task_id == 4:
            raise EnvError("task 4 cannot be reset")
        if not self.counted:
            self.counted = True
            CountedEnv.open_now += 1
            CountedEnv.most_open = max(CountedEnv.most_open, CountedEnv.open_now)
        return self.inner.reset(task_id=task_id, seed=seed)

    def _step(self, action) -> StepResult:
        return self.inner.step(action)

    def close(self) -> None:
        if self.counted:
            CountedEnv.open_now -= 1
            self.counted = False


@pytest.mark.parametrize("max_batch", [None, 2])
def test_at_most_the_engines_batch_of_episodes_is_open_at_once(tiny, max_batch):
    model, tok, chat = tiny
    sampling, limits = SamplingConfig(temperature=1.0, max_new_tokens=6), LoopLimits(3, 2048)
    CountedEnv.open_now = CountedEnv.most_open = 0
    trajs = run_episodes(NativeEngine(model, tok, max_batch=max_batch), chat, CountedEnv, _specs(7), sampling, limits,
                         seed=5)
    assert [t.task_id for t in trajs] == list(range(7)) and CountedEnv.open_now == 0
    assert CountedEnv.most_open == (6 if max_batch is None else 2)  # task 4 never opened
    assert trajs[4].error and "task 4 cannot be reset" in trajs[4].error
    assert all(t.error is None and t.num_turns >= 1 for i, t in enumerate(trajs) if i != 4)
    if max_batch == 2:  # each episode samples from its own generator: the window changes no draw
        wide = run_episodes(NativeEngine(model, tok), chat, CountedEnv, _specs(7), sampling, limits, seed=5)
        assert all(_same(a, b) for a, b in zip(trajs, wide))


def test_the_lock_step_loop_plays_in_waves_of_max_live(tiny):
    model, tok, chat = tiny
    sampling, limits = SamplingConfig(temperature=0.0, max_new_tokens=4), LoopLimits(2, 2048)
    CountedEnv.open_now = CountedEnv.most_open = 0
    trajs = run_episodes(HFEngine(model, tok), chat, CountedEnv, _specs(5), sampling, limits, max_live=2)
    assert [t.task_id for t in trajs] == list(range(5)) and CountedEnv.most_open == 2 and CountedEnv.open_now == 0
    assert trajs[4].error and all(t.error is None for t in trajs[:4])
    with pytest.raises(ValueError, match="max_live must be >= 1"):
        run_episodes(HFEngine(model, tok), chat, CountedEnv, _specs(2), sampling, limits, max_live=0)
