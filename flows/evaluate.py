"""Batch and nightly evaluation: checkpoints × environments × seeds, idempotent through the run registry."""

from __future__ import annotations

from typing import Literal

from prefect import flow, get_run_logger

from agentrl_core.config import EngineConfig
from agentrl_core.evaluation.batch import EvalGrid
from agentrl_core.secrets import SecretUrl
from tasks.env_server import env_servers
from tasks.evaluation import evaluate_grid, find_pending, publish_leaderboard
from tasks.lifecycle import flow_run_name, run_lifecycle
from tasks.secrets import check_sent_secrets


@flow(name="batch-eval", log_prints=True, validate_parameters=True)
def batch_eval(grid: EvalGrid, registry_url: SecretUrl | None = None, root: str = "runs",
               report_dir: str = "runs/leaderboard") -> dict:
    """Evaluate `grid` (what the registry already holds is skipped), then publish the leaderboard and plots.

    The flow run is a run of the registry (`batch-eval-<UTC time>-<flow run name>`), ended completed, failed or
    interrupted."""
    check_sent_secrets(registry_url=registry_url, **{"grid.engine.url": grid.engine.url})
    with run_lifecycle(registry_url, root, flow_run_name("batch-eval"), "batch-eval",
                       {"grid": grid.model_dump(mode="json"), "report_dir": report_dir}):
        return _evaluate(grid, registry_url, root, report_dir)


def _evaluate(grid: EvalGrid, registry_url: SecretUrl | None, root: str, report_dir: str) -> dict:
    with env_servers(grid.envs) as url:
        new = evaluate_grid(grid, registry_url, root, url)
    board = publish_leaderboard(registry_url, root, grid.envs, report_dir)
    return {"evaluated": new, "leaderboard": board}


@flow(name="nightly-eval", log_prints=True, validate_parameters=True)
def nightly_eval(envs: list[str] = ["household"], seeds: list[int] = [0], k: int = 1, n_tasks: int = 16,  # noqa: B006
                 max_turns: int = 8, engine: Literal["auto", "native", "hf", "vllm", "openai"] = "auto",
                 registry_url: SecretUrl | None = None, root: str = "runs", report_dir: str = "runs/leaderboard") -> dict:
    """Evaluate every exported checkpoint in the registry that misses an evaluation (scheduled at 02:00).

    The flow run is a run of the registry (`nightly-eval-<UTC time>-<flow run name>`), ended completed, failed
    or interrupted, even when there is nothing new."""
    check_sent_secrets(registry_url=registry_url)
    settings = {"envs": envs, "seeds": seeds, "k": k, "n_tasks": n_tasks, "max_turns": max_turns, "engine": engine,
                "report_dir": report_dir}
    with run_lifecycle(registry_url, root, flow_run_name("nightly-eval"), "nightly-eval", settings):
        pending = find_pending(registry_url, root, envs, seeds, k, "test", engine)
        if not pending:
            get_run_logger().info("nothing new to evaluate")
            return {"evaluated": [], "leaderboard": publish_leaderboard(registry_url, root, envs, report_dir)}
        grid = EvalGrid(checkpoints=pending, envs=envs, seeds=seeds, k=k, n_tasks=n_tasks, max_turns=max_turns,
                        engine=EngineConfig(kind=engine))
        return _evaluate(grid, registry_url, root, report_dir)
