"""A group of three household episodes played from per-episode scripts, with shared states by construction."""

from __future__ import annotations

from agentrl_core.config import SamplingConfig
from agentrl_core.envs import make
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import EpisodeSpec, Generation, LoopLimits, Trajectory, run_episodes

TASK = 10  # household task 10: the expert solves it in 5 steps
BAD = "dance wildly"


def expert_plan(task: int = TASK) -> list[str]:
    env = make("household")
    env.reset(task_id=task)
    actions = []
    for _ in range(10):
        actions.append(env.expert_action())
        if env.step(actions[-1]).terminated:
            return actions
    raise AssertionError(f"the expert did not finish household task {task}")


def group_scripts(plan: list[str]) -> list[list[str]]:
    """Five turns each, so every episode stays live all along and row j of each engine call is sample j:
    sample 0 plays the plan (success at its last turn); sample 1 first does something useless, then the plan
    (reaching the plan's states one turn late); sample 2 plays plan[0], something useless, then the plan."""
    assert len(plan) == 5
    return [plan, [BAD] + plan[:4], [plan[0], BAD] + plan[1:4]]


class RowScriptedEngine:
    """Fake lock-step engine: on its n-th call, row j replies scripts[j][n] (closed with eos); log-prob -0.5."""

    def __init__(self, chat: ChatFormat, scripts: list[list[str]]):
        self.chat, self.scripts, self.calls = chat, scripts, 0

    def generate(self, prompts, sampling, seed):
        assert len(prompts) == len(self.scripts), "every scripted episode must stay live"
        out = []
        for script in self.scripts:
            ids = self.chat.encode(script[self.calls]) + [self.chat.eos_id]
            out.append(Generation(ids, [-0.5] * len(ids), "stop"))
        self.calls += 1
        return out


def play_group(chat: ChatFormat, plan: list[str], context: str | None = None, **env_kwargs) -> list[Trajectory]:
    """The three scripted episodes as one GRPO group (group 0) of task TASK, through the lock-step loop."""
    specs = [EpisodeSpec(task_id=TASK, group=0, sample=s, context=context) for s in range(3)]
    factory = lambda: make("household", **env_kwargs)  # noqa: E731
    return run_episodes(RowScriptedEngine(chat, group_scripts(plan)), chat, factory, specs,
                        SamplingConfig(), LoopLimits(max_turns=5, max_context_tokens=4096), workers=3)
