"""Countdown: combine the given numbers with + - * / to reach a target (multi-turn, with feedback)."""

from agentrl_core.envs.countdown.env import (
    FORMAT_REWARD,
    TEST_IDS,
    TRAIN_IDS,
    Countdown,
    Problem,
    Verdict,
    judge,
    make_problem,
    solve,
)

__all__ = ["FORMAT_REWARD", "TEST_IDS", "TRAIN_IDS", "Countdown", "Problem", "Verdict", "judge", "make_problem",
           "solve"]
