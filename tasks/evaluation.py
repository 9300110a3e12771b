"""Batch-evaluation tasks: run the grid (idempotent, through the registry), then publish the leaderboard and plots."""

from __future__ import annotations

import base64
from pathlib import Path

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, create_table_artifact
from prefect.artifacts import update_progress_artifact

from agentrl_core.evaluation.batch import EvalGrid, pending_checkpoints, plan_grid, run_grid
from agentrl_core.evaluation.leaderboard import leaderboard, to_markdown
from agentrl_core.evaluation.plots import plot_registry
from agentrl_core.store import open_registry
from tasks.retry import retry_unless_disk_full
from tasks.training_stages import TRANSIENT


@task(name="pending-checkpoints", retries=2, retry_delay_seconds=2, retry_condition_fn=retry_unless_disk_full)
def find_pending(registry_url: str | None, root: str, envs: list[str], seeds: list[int], k: int, split: str,
                 engine: str) -> list[str]:
    """URIs of exported checkpoints that miss an evaluation for some env × seed."""
    reg = open_registry(registry_url, Path(root))
    try:
        return [c.uri for c in pending_checkpoints(reg, envs, seeds, k, split, engine)]
    finally:
        reg.close()


@task(name="evaluate-grid", **TRANSIENT)
def evaluate_grid(grid: EvalGrid, registry_url: str | None, root: str, env_url: str) -> list[dict]:
    """Evaluate every job of the grid not yet in the registry; each result is stored as it finishes."""
    reg = open_registry(registry_url, Path(root))
    try:
        total = len(plan_grid(grid, reg))
        artifact = create_progress_artifact(progress=0.0, key="batch-eval-progress",
                                            description=f"{total} evaluation jobs")
        done: list[dict] = []

        def on_result(record) -> None:
            done.append({"checkpoint": record.checkpoint_uri, "env": record.env, "seed": record.seed,
                         "success_rate": record.success_rate})
            update_progress_artifact(artifact_id=artifact, progress=100.0 * len(done) / max(1, total))
            get_run_logger().info("evaluated %s on %s (seed %d): success %.3f", record.checkpoint_uri, record.env,
                                  record.seed, record.success_rate)

        run_grid(grid, reg, {env: env_url for env in grid.envs}, on_result=on_result)
        return done
    finally:
        reg.close()


@task(name="leaderboard", retries=1, retry_delay_seconds=2, retry_condition_fn=retry_unless_disk_full)
def publish_leaderboard(registry_url: str | None, root: str, envs: list[str], out_dir: str) -> dict:
    """The leaderboard (a table artifact and leaderboard.md) and one PNG per metric over training steps."""
    reg = open_registry(registry_url, Path(root))
    try:
        records = [r for env in envs for r in reg.evals(env=env)]
        rows = leaderboard(records)
        runs = sorted({r.run for r in records if r.run})
        plots = plot_registry(reg, runs, Path(out_dir) / "plots") if runs else []
    finally:
        reg.close()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    markdown = "# Leaderboard\n\n" + to_markdown(rows) + "\n"
    (out / "leaderboard.md").write_text(markdown)
    create_table_artifact(table=rows, key="leaderboard", description="Evaluations, best first")
    images = "".join(f"\n### {p.stem}\n\n![{p.stem}](data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()})\n"
                     for p in plots)
    create_markdown_artifact(markdown=markdown + images, key="leaderboard-report", description="Leaderboard and plots")
    return {"rows": rows, "markdown": str(out / "leaderboard.md"), "plots": [str(p) for p in plots]}
