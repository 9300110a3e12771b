"""Task sets: id ranges, verl-style parquet files, and the one rule choosing a run's task ids."""

from agentrl_core.tasksets.ranges import format_ranges, parse_ranges, select_ids
from agentrl_core.tasksets.resolve import resolve_task_ids, task_file_ids

__all__ = ["format_ranges", "parse_ranges", "resolve_task_ids", "select_ids", "task_file_ids"]
