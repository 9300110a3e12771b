"""ScienceWorld (the real simulator, one capped JVM per env) with AgentGym's task ids."""

from agentrl_core.envs.sciworld.env import SciWorld, normalised_score, parse_action
from agentrl_core.envs.sciworld.jvm import (
    DEFAULT_HEAP_MB,
    MAX_LIVE_JVMS,
    JVMGoneError,
    JVMLimitError,
    Simulator,
    SimulatorError,
    java_options,
    rss_mb,
)
from agentrl_core.envs.sciworld.tasks import (
    AGENTGYM_SIZE,
    TASKS,
    TOTAL,
    TaskSpec,
    locate,
    split_ids,
    task_id_of,
)

__all__ = [
    "AGENTGYM_SIZE",
    "DEFAULT_HEAP_MB",
    "MAX_LIVE_JVMS",
    "TASKS",
    "TOTAL",
    "JVMGoneError",
    "JVMLimitError",
    "SciWorld",
    "Simulator",
    "SimulatorError",
    "TaskSpec",
    "java_options",
    "locate",
    "normalised_score",
    "parse_action",
    "rss_mb",
    "split_ids",
    "task_id_of",
]
