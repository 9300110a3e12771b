"""Tasks that keep the run registry (SQL) and object storage up to date as a flow runs (the run's own record,
from start to end: tasks/lifecycle.py)."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task

from agentrl_core.config import RecipeConfig
from tasks.lifecycle import run_registry
from tasks.retry import retry_unless_disk_full

QUICK = {"retries": 2, "retry_delay_seconds": 2, "retry_condition_fn": retry_unless_disk_full}


def aws_block_credentials(recipe: RecipeConfig) -> dict[str, str | None]:
    """Credentials from the Prefect `AwsCredentials` block named in store.aws_credentials_block
    (prefect-aws), or none: boto3 then reads the usual AWS settings (environment, ~/.aws)."""
    name = recipe.store.aws_credentials_block
    if not name:
        return {}
    try:
        from prefect_aws import AwsCredentials
    except ImportError:
        raise RuntimeError(f"store.aws_credentials_block={name!r} needs prefect-aws: pip install prefect-aws") from None
    block = AwsCredentials.load(name)
    secret = block.aws_secret_access_key
    return {"aws_access_key_id": block.aws_access_key_id,
            "aws_secret_access_key": secret.get_secret_value() if secret is not None else None,
            "aws_session_token": block.aws_session_token, "profile_name": block.profile_name}


def _registry(recipe: RecipeConfig):
    """The run's registry (held by its lifecycle for the whole run: tasks/lifecycle.py)."""
    return run_registry(recipe.store.registry_url, recipe.run.root)


@task(name="registry-stage", **QUICK)
def record_stage(recipe: RecipeConfig, run_id: int, name: str, index: int, outcome: dict, stage_dir: Path) -> None:
    """Record a finished stage, its last checkpoint and its per-step metrics."""
    from agentrl_core.store.metrics_import import import_stage_metrics

    with _registry(recipe) as reg:
        stage_id = reg.ensure_stage(run_id, name, index)
        reg.add_checkpoint(run_id, stage=name, step=int(outcome.get("steps", 0)), uri=str(outcome["checkpoint"]),
                           kind="train")
        import_stage_metrics(reg, run_id, name, Path(stage_dir))
        reg.set_stage_status(stage_id, "completed", checkpoint_uri=str(outcome["checkpoint"]))


@task(name="publish-export", **QUICK)
def record_export(recipe: RecipeConfig, run_id: int, stage: str, export: str) -> str:
    """Copy an exported HF folder to object storage when one is configured, and register it.

    Returns the checkpoint's URI: the local folder, or s3://… when `store.storage` is set.
    """
    import json

    from agentrl_core.checkpoints.atomic import MARKER
    from agentrl_core.checkpoints.storage import storage_from_config

    uri = str(Path(export).resolve())
    if recipe.store.storage:
        storage = storage_from_config(recipe.store, root=Path(recipe.run.root), **aws_block_credentials(recipe))
        uri = storage.put_dir(Path(export), f"{recipe.run.name}/export/{stage}")
        get_run_logger().info("uploaded %s export to %s", stage, uri)
    step = int(json.loads((Path(export) / MARKER).read_text()).get("step", 0))
    with _registry(recipe) as reg:
        reg.add_checkpoint(run_id, stage=stage, step=step, uri=uri, kind="hf", meta={"local": str(export)})
    return uri


def _pass_at(table: dict | float | None, k: int) -> float | None:
    """pass@k at the record's k from EvalSummary's {k: value} table (JSON makes its keys strings)."""
    if table is None or isinstance(table, (int, float)):
        return table
    value = table.get(str(k), table.get(k))
    return None if value is None else float(value)


@task(name="registry-eval", **QUICK)
def record_eval(recipe: RecipeConfig, run_id: int, label: str, checkpoint_uri: str, summary: dict,
                split: str = "test") -> None:
    """Store one evaluation summary (the flow's held-out evaluation) against its checkpoint; `split` names the
    task set when one env setting's "test" is not the only one scored (a curriculum stage's: `stage_split`)."""
    from agentrl_core.store import EvalRecord

    with _registry(recipe) as reg:
        reg.add_eval(EvalRecord(checkpoint_uri=str(checkpoint_uri), env=recipe.env.name, split=split,
                                seed=recipe.eval.seed, k=recipe.eval.k, engine=recipe.rollout.engine.kind,
                                n_tasks=int(summary["n_tasks"]), success_rate=float(summary["success_rate"]),
                                pass_at_k=_pass_at(summary.get("pass_at_k"), recipe.eval.k),
                                reward_mean=summary.get("mean_reward"),
                                metrics={"label": label, **summary}, run=recipe.run.name, step=None))


def stage_split(stage: str) -> str:
    """The registry split of a curriculum stage's own held-out tasks: "test.<stage>" (a digest of the name past the
    column's 32 characters), so a model scored on two stages' tasks keeps both results."""
    import hashlib

    split = f"test.{stage}"
    return split if len(split) <= 32 else f"test.{hashlib.sha256(stage.encode()).hexdigest()[:27]}"
