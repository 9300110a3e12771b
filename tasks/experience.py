"""Tasks that start and stop the experience pool service for a flow run (like the env server)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from prefect import get_run_logger, task

from agentrl_core.config import RecipeConfig
from agentrl_core.secrets import Secret, reveal
from agentrl_core.web.auth import run_token
from tasks.retry import retry_unless_disk_full

_POOLS: dict[int, Any] = {}


def _db_url(recipe: RecipeConfig) -> str:
    """The pool's database: experience.db_url, or a SQLite file in the run folder (kept across runs)."""
    if recipe.experience.db_url:
        return reveal(recipe.experience.db_url, "experience.db_url")
    path = Path(recipe.run_dir).resolve() / "experience.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


@task(name="start-experience-pool", retries=2, retry_delay_seconds=2, timeout_seconds=180,
      retry_condition_fn=retry_unless_disk_full)
def start_experience_pool(recipe: RecipeConfig) -> dict[str, object]:
    """Start the experience pool on 127.0.0.1; returns its url and pid."""
    from agentrl_core.experience.launcher import launch_experience_pool

    pool = launch_experience_pool(_db_url(recipe), host="127.0.0.1")
    _POOLS[pool.pid] = pool
    get_run_logger().info("experience pool at %s (pid %d)", pool.url, pool.pid)
    return {"url": pool.url, "pid": pool.pid}


@task(name="stop-experience-pool", retries=0)
def stop_experience_pool(pid: int) -> None:
    """Stop the pool this process started (by its pid)."""
    pool = _POOLS.pop(pid, None)
    if pool is not None:
        pool.stop()


@contextmanager
def experience_pool(recipe: RecipeConfig) -> Iterator[RecipeConfig]:
    """The recipe with `experience.url` set to a running pool: the configured one, or one started here and
    always stopped (also when the body fails); the recipe unchanged when the pool is off."""
    if not recipe.experience.enabled or recipe.experience.url:
        yield recipe
        return
    with run_token():  # the pool and its clients share the run's bearer token
        yield from _started_pool(recipe)


def _started_pool(recipe: RecipeConfig) -> Iterator[RecipeConfig]:
    info = start_experience_pool(recipe)
    try:
        yield recipe.model_copy(update={"experience": recipe.experience.model_copy(update={"url": Secret(str(info["url"]))})})
    finally:
        stop_experience_pool(int(info["pid"]))
