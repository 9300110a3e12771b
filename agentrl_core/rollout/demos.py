"""Expert demonstrations: episodes played by the environment's expert, as trainable token ids."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from agentrl_core.envs.base import Env
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout.trajectory import Trajectory

log = logging.getLogger(__name__)


def expert_episode(env: Env, chat: ChatFormat, task_id: int, max_turns: int) -> Trajectory:
    """Play `task_id` with the expert; assistant tokens get loss mask 1, the rest 0.

    The ids are spliced exactly as the agent loop splices them at rollout time, so SFT teaches
    the model the very token layout it will see when it plays.
    """
    traj = Trajectory(task_id=task_id, env=env.name, group=task_id, sample=0)
    obs, _ = env.reset(task_id=task_id)
    traj.messages = [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": obs}]
    traj.append(chat.prompt_ids(traj.messages), trainable=False)
    traj.prompt_len = len(traj.token_ids)
    for turn in range(max_turns):
        action = env.expert_action()
        traj.append(chat.assistant_ids(action), trainable=True)
        traj.messages.append({"role": "assistant", "content": action})
        result = env.step(action)
        traj.turn_rewards.append(result.reward)
        traj.num_turns = turn + 1
        if result.terminated or result.truncated:
            traj.success = bool(result.info.get("success", False))
            traj.terminated, traj.truncated = result.terminated, result.truncated
            break
        traj.append(chat.user_turn_ids(result.observation), trainable=False)
        traj.messages.append({"role": "user", "content": result.observation})
    traj.reward = float(sum(traj.turn_rewards))
    return traj


def collect_demos(
    env_factory: Callable[[], Env], chat: ChatFormat, task_ids: Sequence[int], max_turns: int, workers: int = 8
) -> list[Trajectory]:
    """Expert episodes for each task id that the expert finishes within `max_turns` (the others are
    longer than the agent's turn budget, so they are skipped and logged; if none is left, it fails)."""

    def play(task_id: int) -> Trajectory:
        env = env_factory()
        try:
            return expert_episode(env, chat, task_id, max_turns)
        finally:
            env.close()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        demos = list(pool.map(play, task_ids))
    kept = [d for d in demos if d.success]
    if len(kept) < len(demos):
        log.info("skipped %d of %d demos longer than %d turns", len(demos) - len(kept), len(demos), max_turns)
    if not kept:
        raise RuntimeError(f"the expert finished none of {len(demos)} tasks within {max_turns} turns; raise env.max_turns")
    return kept
