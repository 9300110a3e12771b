"""BabyAI as text: minigrid's 40 BabyAI levels in AgentGym's text convention (extra "babyai")."""

from agentrl_core.envs.babyai.env import BabyAI, normalize, step_reward
from agentrl_core.envs.babyai.levels import (
    LEVELS,
    NUM_LEVELS,
    TEST_IDS,
    TRAIN_IDS,
    Level,
    level_of,
)

__all__ = ["LEVELS", "NUM_LEVELS", "TEST_IDS", "TRAIN_IDS", "BabyAI", "Level", "level_of", "normalize", "step_reward"]
