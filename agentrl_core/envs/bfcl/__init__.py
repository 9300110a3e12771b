"""BFCL multi-turn function calling: safe executor, official checks, EnvTuning's protocol and stages."""

from agentrl_core.envs.bfcl.env import Bfcl
from agentrl_core.envs.bfcl.stages import TEST_IDS, TRAIN_IDS, entry_key, stage_task_ids, task_id_of

__all__ = ["Bfcl", "TEST_IDS", "TRAIN_IDS", "entry_key", "stage_task_ids", "task_id_of"]
