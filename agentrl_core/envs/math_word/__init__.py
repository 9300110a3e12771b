"""Math word problems: GSM8K-style arithmetic stories answered with a final `#### <number>`."""

from agentrl_core.envs.math_word.env import (
    TEST_IDS,
    TRAIN_IDS,
    Difficulty,
    MathWord,
    Problem,
    extract_answer,
    fact_key,
    facts,
    make_problem,
)

__all__ = ["TEST_IDS", "TRAIN_IDS", "Difficulty", "MathWord", "Problem", "extract_answer", "fact_key", "facts",
           "make_problem"]
