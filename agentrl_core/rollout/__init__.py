"""Rollout: engines, the multi-turn agent loop, trajectories and expert demonstrations."""

from agentrl_core.rollout.agent_loop import EpisodeSpec, LoopLimits, run_episodes
from agentrl_core.rollout.demos import collect_demos, expert_episode
from agentrl_core.rollout.generation import Engine, Generation
from agentrl_core.rollout.hf_engine import HFEngine
from agentrl_core.rollout.io import read_trajectories, write_trajectories
from agentrl_core.rollout.openai_engine import (
    OpenAIEngine,
    OpenAIEngineError,
    OpenAIRequestError,
    OpenAIResponseError,
    OpenAIServerUnavailable,
)
from agentrl_core.rollout.trajectory import Trajectory

__all__ = [
    "Engine", "EpisodeSpec", "Generation", "HFEngine", "LoopLimits", "OpenAIEngine", "OpenAIEngineError",
    "OpenAIRequestError", "OpenAIResponseError", "OpenAIServerUnavailable", "Trajectory", "collect_demos",
    "expert_episode", "read_trajectories", "run_episodes", "write_trajectories",
]
