"""ALFWorld on its real engine, with our own generated games (or the official data when present)."""

from agentrl_core.envs.alfworld.catalog import TASK_TYPES
from agentrl_core.envs.alfworld.dataset import (
    DEFAULT_SEED,
    GENERATOR_VERSION,
    TEST_IDS,
    TRAIN_IDS,
    GeneratedGames,
    OfficialGames,
    build_default_set,
    generate_game,
)
from agentrl_core.envs.alfworld.env import AlfWorld, normalize
from agentrl_core.envs.alfworld.scene import Difficulty, Scene, draw_scene

__all__ = [
    "DEFAULT_SEED", "GENERATOR_VERSION", "TASK_TYPES", "TEST_IDS", "TRAIN_IDS", "AlfWorld", "Difficulty",
    "GeneratedGames", "OfficialGames", "Scene", "build_default_set", "draw_scene", "generate_game", "normalize",
]
