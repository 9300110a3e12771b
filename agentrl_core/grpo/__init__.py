"""The GRPO stage: one loop (rollout, update, weight sync, log, validate, checkpoint) over an executor."""

from agentrl_core.grpo.stage import ALGORITHM_FILE, record_algorithm, train_grpo

__all__ = ["ALGORITHM_FILE", "record_algorithm", "train_grpo"]
