"""SQL: a SQLGym-style text-to-SQL environment on generated SQLite databases (judged by execution)."""

from agentrl_core.envs.sql.env import Sql, extract_sql
from agentrl_core.envs.sql.execute import Outcome, run_query, same_result
from agentrl_core.envs.sql.questions import (
    TEST_IDS,
    TRAIN_IDS,
    Question,
    Task,
    make_task,
)
from agentrl_core.envs.sql.schema import (
    DOMAINS,
    GENERATOR_VERSION,
    Database,
    ensure_database,
    generate,
)

__all__ = [
    "DOMAINS", "GENERATOR_VERSION", "TEST_IDS", "TRAIN_IDS", "Database", "Outcome", "Question", "Sql", "Task",
    "ensure_database", "extract_sql", "generate", "make_task", "run_query", "same_result",
]
