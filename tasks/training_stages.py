"""Tasks of the training pipeline: load tasks, import the model, SFT, GRPO, export, evaluate.

The long stages run through `run_interruptible`: a Ctrl-C or SIGTERM ends them within seconds (the
task and flow run are then recorded Crashed; running the same command again resumes)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from prefect import get_run_logger, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact

from agentrl_core.system import progress
from agentrl_core.checkpoints import export_hf
from agentrl_core.config import RecipeConfig
from agentrl_core.env_service import EnvClient
from agentrl_core.evaluation.reuse import evaluate_or_reuse
from agentrl_core.evaluation.runner import evaluate_model
from agentrl_core.models import resolve_model
from agentrl_core.models.compute_settings import resolve_compute_settings
from agentrl_core.system.stop_signals import run_interruptible
from agentrl_core.tasksets import format_ranges, resolve_task_ids
from agentrl_core.grpo import train_grpo
from agentrl_core.training.sft import train_sft
from tasks.gpu import stage_gpus
from tasks.retry import retry_transient, retry_unless_disk_full

TRANSIENT = {"retries": 2, "retry_delay_seconds": [5, 20], "retry_condition_fn": retry_transient}


def _progress_callback(key: str, total_hint: str):
    """A step callback that logs each step and moves a Prefect progress artifact."""
    logger = get_run_logger()
    artifact_id = create_progress_artifact(progress=0.0, key=key, description=total_hint)

    def on_step(step: int, total: int, metrics: dict[str, float]) -> None:
        shown = {k: round(v, 4) for k, v in metrics.items() if k in ("loss", "reward_mean", "success_rate", "time/step_s",
                                                                     "time/train_s", "entropy", "kl")}
        logger.info("%s step %d/%d %s", key, step, total, shown)
        update_progress_artifact(artifact_id=artifact_id, progress=100.0 * step / max(1, total))
        progress.report(key, step, total, f"{total_hint} {_short(metrics)}")

    return on_step


def _short(metrics: dict[str, float]) -> str:
    for key in ("success_rate", "loss"):
        if key in metrics:
            return f"({key} {metrics[key]:.3f})"
    return ""


@task(name="import-model", retries=1, retry_delay_seconds=5, retry_condition_fn=retry_unless_disk_full)
def import_model(name: str) -> str:
    """Resolve the model (importing the embedded default into the cache once)."""
    return str(resolve_model(name))


@task(name="compute-settings")
def compute_settings(cfg: RecipeConfig, model: str) -> RecipeConfig:
    """The recipe with model.compute_dtype and model.cpu_threads decided for this machine (auto: by what
    it supports and a short measurement of `model`, cached per machine), printed once."""
    return resolve_compute_settings(cfg, model, report=get_run_logger().info)


@task(name="load-tasks", **TRANSIENT)
def load_tasks(cfg: RecipeConfig, env_url: str) -> dict[str, int]:
    """The train and test task ids the run uses (env.train_ids/test_ids ranges, a verl parquet
    env.task_file, or the first train_tasks/test_tasks of the server's listing); counts them."""
    with EnvClient(env_url) as client:
        train, test = resolve_task_ids(cfg.env, client, "train"), resolve_task_ids(cfg.env, client, "test")
    if not train or not test:
        raise ValueError(f"environment {cfg.env.name}: the recipe selects {len(train)} train and {len(test)} test tasks")
    used = {"train": len(train), "test": len(test)}
    get_run_logger().info("%s: using %s tasks (train %s, test %s)", cfg.env.name, used, format_ranges(train),
                          format_ranges(test))
    return used


@task(name="sft", **TRANSIENT)
def sft_stage(cfg: RecipeConfig, init_model: str, env_url: str) -> dict:
    """Supervised warm-start on expert demonstrations (resumes from its last checkpoint)."""
    with stage_gpus(cfg):
        result = run_interruptible(train_sft, cfg, init_model=Path(init_model), env_url=env_url,
                                   on_step=_progress_callback("sft-progress", "SFT optimizer steps"))
    return asdict(result)


@task(name="grpo", **TRANSIENT)
def grpo_stage(cfg: RecipeConfig, init_model: str, env_url: str) -> dict:
    """GRPO from `init_model` (resumes from its last checkpoint)."""
    with stage_gpus(cfg):
        result = run_interruptible(train_grpo, cfg, init_model=Path(init_model), env_url=env_url,
                                   on_step=_progress_callback("grpo-progress", "GRPO steps"))
    return asdict(result)


@task(name="export-checkpoint", retries=1, retry_delay_seconds=2, retry_condition_fn=retry_unless_disk_full)
def export_checkpoint(checkpoint: str, out_dir: str) -> str:
    """Convert a training checkpoint into a standalone Hugging Face folder."""
    return str(export_hf(Path(checkpoint), Path(out_dir)))


@task(name="evaluate", **TRANSIENT)
def evaluate(cfg: RecipeConfig, label: str, model: str, env_url: str) -> dict:
    """Evaluate one model on the held-out tasks; returns the summary as a dict."""
    with stage_gpus(cfg):
        summary = run_interruptible(_evaluate, cfg, label, model, env_url)
    get_run_logger().info("eval %s: %s", label, summary.to_dict())
    return summary.to_dict()


def _evaluate(cfg: RecipeConfig, label: str, model: str, env_url: str):
    with EnvClient(env_url) as client:
        test_ids = resolve_task_ids(cfg.env, client, "test")
    out_dir = cfg.run_dir / "eval" / label
    return evaluate_or_reuse(cfg, model, test_ids, out_dir, lambda: evaluate_model(
        model, task_ids=test_ids, env_name=cfg.env.name, env_url=env_url, cfg=cfg.eval, n_tasks=cfg.env.test_tasks,
        max_turns=cfg.env.max_turns, max_context_tokens=cfg.rollout.max_context_tokens, dtype=cfg.model.dtype,
        autocast=cfg.model.compute_dtype, engine=cfg.rollout.engine, out_dir=out_dir,
        on_progress=lambda done, total: progress.report(f"eval-{label}", done, total, f"evaluating {label}")))
