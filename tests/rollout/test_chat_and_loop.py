"""Chat splicing and the agent loop with a scripted engine (one layer at a time)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl_core.config import SamplingConfig
from agentrl_core.envs import make
from agentrl_core.envs.base import Env, StepResult
from agentrl_core.errors import EnvError, PromptTooLongError
from agentrl_core.models import load_tokenizer
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import EpisodeSpec, Generation, LoopLimits, read_trajectories, run_episodes, write_trajectories


@pytest.fixture(scope="module")
def chat(embedded_model_path: Path) -> ChatFormat:
    return ChatFormat(load_tokenizer(embedded_model_path))


def test_spliced_ids_equal_the_rendered_template(chat: ChatFormat):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Goal: open drawer 1."}]
    ids = chat.prompt_ids(msgs) + chat.assistant_ids("open drawer 1") + chat.user_turn_ids("Drawer 1 is open.")
    full = msgs + [{"role": "assistant", "content": "open drawer 1"}, {"role": "user", "content": "Drawer 1 is open."}]
    rendered = chat.tokenizer.apply_chat_template(full, tokenize=False, add_generation_prompt=True)
    assert chat.tokenizer.decode(ids) == rendered
    assert ids[len(chat.prompt_ids(msgs)) + len(chat.assistant_ids("open drawer 1")) - 1] == chat.eos_id


class ScriptedEngine:
    """Replies with fixed texts in turn; log-prob -0.5 per token."""

    def __init__(self, chat: ChatFormat, replies: list[str], close: bool = True):
        self.chat, self.replies, self.close, self.calls = chat, replies, close, 0

    def generate(self, prompts, sampling, seed):
        text = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        ids = self.chat.encode(text) + ([self.chat.eos_id] if self.close else [])
        return [Generation(list(ids), [-0.5] * len(ids), "stop" if self.close else "length") for _ in prompts]


def test_loop_keeps_engine_tokens_and_masks(chat: ChatFormat):
    env_probe = make("household")
    env_probe.reset(task_id=10)
    first = env_probe.expert_action()
    engine = ScriptedEngine(chat, [first, "dance wildly"])
    limits = LoopLimits(max_turns=3, max_context_tokens=4096)
    (traj,) = run_episodes(engine, chat, lambda: make("household"), [EpisodeSpec(task_id=10)], SamplingConfig(), limits)
    assert traj.error is None and traj.num_turns == 3 and traj.truncated and not traj.terminated
    assert len(traj.token_ids) == len(traj.loss_mask) == len(traj.logprobs)
    reply = chat.encode(first) + [chat.eos_id]
    start = traj.prompt_len
    assert traj.token_ids[start:start + len(reply)] == reply
    assert traj.loss_mask[:start] == [0] * start and traj.loss_mask[start:start + len(reply)] == [1] * len(reply)
    assert all(lp == -0.5 for lp, m in zip(traj.logprobs, traj.loss_mask) if m)
    assert traj.messages[2] == {"role": "assistant", "content": first}
    assert traj.messages[4]["content"] == "dance wildly"
    assert traj.messages[5]["content"].startswith("Nothing happens.")


def test_unclosed_reply_gets_an_untrained_eos(chat: ChatFormat):
    engine = ScriptedEngine(chat, ["look"], close=False)
    (traj,) = run_episodes(engine, chat, lambda: make("household"), [EpisodeSpec(task_id=3)], SamplingConfig(),
                           LoopLimits(max_turns=1, max_context_tokens=4096))
    end = traj.prompt_len + len(chat.encode("look"))
    assert traj.loss_mask[traj.prompt_len:end] == [1] * (end - traj.prompt_len)
    assert traj.token_ids[end] == chat.eos_id and traj.loss_mask[end] == 0


class BrokenEnv(Env):
    name = "broken"
    action_format = "text"
    system_prompt = "x"

    def task_ids(self, split):
        return [0]

    def _reset(self, *, task_id, seed, options):
        return "start", {}

    def _step(self, action) -> StepResult:
        raise EnvError("engine crashed")

    def expert_action(self):
        return "x"


def test_failed_env_is_data_on_the_trajectory_not_a_crash(chat: ChatFormat, tmp_path: Path):
    engine = ScriptedEngine(chat, ["go"])
    specs = [EpisodeSpec(task_id=0, group=0, sample=i) for i in range(2)]
    trajs = run_episodes(engine, chat, BrokenEnv, specs, SamplingConfig(), LoopLimits(3, 4096))
    assert all(t.error and "engine crashed" in t.error for t in trajs)
    path = write_trajectories(tmp_path / "rollout_log" / "step_000001.parquet", trajs, step=1)
    back = read_trajectories(path)
    assert [t.error for t in back] == [t.error for t in trajs] and back[0].token_ids == trajs[0].token_ids


class ReportingEnv(Env):
    """Reports a share after each reply: 1/n on reply n (the last report wins); `bad` reports an out-of-range one."""

    name = "reporting"
    action_format = "text"
    system_prompt = "x"

    def __init__(self, bad: bool = False):
        super().__init__()
        self.bad, self.replies = bad, 0

    def task_ids(self, split):
        return [0]

    def _reset(self, *, task_id, seed, options):
        self.replies = 0
        return "start", {}

    def _step(self, action) -> StepResult:
        self.replies += 1
        share = 2.0 if self.bad else 1 / self.replies
        return StepResult("more", 0.0, False, False, {"episode_metrics": {"well_formed": share}})

    def expert_action(self):
        return "x"


def test_the_loop_keeps_the_latest_episode_metrics_even_when_the_context_cuts_it_short(chat: ChatFormat):
    engine = ScriptedEngine(chat, ["go"] * 3)
    (full,) = run_episodes(engine, chat, ReportingEnv, [EpisodeSpec(task_id=0)], SamplingConfig(), LoopLimits(3, 4096))
    assert full.extra["episode_metrics"] == {"well_formed": pytest.approx(1 / 3)} and full.truncated
    from agentrl_core.grpo.rollout import episode_metric_means

    assert episode_metric_means([full, full.__class__(task_id=1, env="x", group=1, sample=0)]) == {
        "episode/well_formed": pytest.approx(1 / 3)}  # an episode without a report is left out, not counted 0
    (bad,) = run_episodes(ScriptedEngine(chat, ["go"]), chat, lambda: ReportingEnv(bad=True), [EpisodeSpec(task_id=0)],
                          SamplingConfig(), LoopLimits(3, 4096))
    assert bad.error.startswith("step failed: the environment's info is malformed: episode metric 'well_formed'")


class CountingEnvs:
    """An env factory that counts the household sessions it made and how many were closed."""

    def __init__(self):
        self.made, self.closed = 0, 0

    def __call__(self) -> Env:
        env, counter = make("household"), self
        close = env.close

        def counted_close():
            counter.closed += 1
            close()
        env.close, self.made = counted_close, self.made + 1
        return env


def test_an_opening_prompt_at_the_context_limit_is_refused_before_any_reply(chat: ChatFormat):
    specs = [EpisodeSpec(task_id=t) for t in (3, 10, 11)]
    probe = run_episodes(ScriptedEngine(chat, ["look"]), chat, lambda: make("household"), specs, SamplingConfig(),
                         LoopLimits(max_turns=1, max_context_tokens=4096))
    longest = max(t.prompt_len for t in probe)
    engine, envs = ScriptedEngine(chat, ["look"]), CountingEnvs()
    with pytest.raises(PromptTooLongError) as err:
        run_episodes(engine, chat, envs, specs, SamplingConfig(), LoopLimits(max_turns=1, max_context_tokens=longest))
    over = sum(t.prompt_len >= longest for t in probe)
    assert f"{over} of 3 episodes opened with a prompt of rollout.max_context_tokens={longest} tokens" in str(err.value)
    assert f"(the longest {longest})" in str(err.value) and "raise rollout.max_context_tokens" in str(err.value)
    assert engine.calls == 0 and envs.closed == envs.made == 3  # nothing generated, no session left open
    played = run_episodes(ScriptedEngine(chat, ["look"]), chat, lambda: make("household"), specs, SamplingConfig(),
                          LoopLimits(max_turns=1, max_context_tokens=longest + 1))
    assert [t.num_turns for t in played] == [1, 1, 1] and all(t.error is None for t in played)


def test_a_later_wave_with_an_overlong_opening_is_refused(chat: ChatFormat):
    probe = run_episodes(ScriptedEngine(chat, ["look"]), chat, lambda: make("household"),
                         [EpisodeSpec(task_id=t) for t in range(12)], SamplingConfig(), LoopLimits(1, 4096))
    short, long_ = min(probe, key=lambda t: t.prompt_len), max(probe, key=lambda t: t.prompt_len)
    assert short.prompt_len < long_.prompt_len
    specs = [EpisodeSpec(task_id=short.task_id), EpisodeSpec(task_id=long_.task_id)]
    with pytest.raises(PromptTooLongError, match=r"1 of 1 episodes"):
        run_episodes(ScriptedEngine(chat, ["look"]), chat, lambda: make("household"), specs, SamplingConfig(),
                     LoopLimits(1, long_.prompt_len), max_live=1)
