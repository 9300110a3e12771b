"""The training pipeline: env server (+ experience pool) → tasks → SFT → GRPO → export → evaluate → report."""

from __future__ import annotations

from prefect import flow, get_run_logger

from agentrl_core.config import RecipeConfig
from agentrl_core.config_checks import check_rl_stage
from agentrl_core.recipes import resolve_recipe
from agentrl_core.evaluation.validation import best_checkpoint
from tasks.env_server import env_server
from tasks.experience import experience_pool
from tasks.lifecycle import recipe_lifecycle
from tasks.records import record_eval, record_export, record_stage
from tasks.report import report
from tasks.secrets import prepare_secrets
from tasks.training_stages import (
    compute_settings,
    evaluate,
    export_checkpoint,
    grpo_stage,
    import_model,
    load_tasks,
    sft_stage,
)


@flow(name="train", log_prints=True, validate_parameters=True)
def train(recipe: RecipeConfig | None = None, recipe_file: str | None = None, overrides: list[str] | None = None) -> dict:
    """Train an agent on one environment with an SFT warm-start and GRPO, then evaluate base/SFT/GRPO.

    The recipe is `recipe` (the form in the UI), or the YAML `recipe_file` (a path or a name in
    recipes/), with dotted `overrides` applied on top (e.g. ["trainer.steps=8"]). Runs, stages,
    checkpoints, metrics and evaluations go to the run registry (`store.registry_url`), exports to
    `store.storage` when set.
    """
    sent = recipe is not None
    recipe = resolve_recipe(recipe, recipe_file, overrides or [])
    prepare_secrets(recipe, overrides or [], recipe_was_sent=sent)  # no password in stored parameters; load blocks
    check_rl_stage(recipe)  # refuse trainer.steps=0 before any work
    with recipe_lifecycle(recipe, "train") as run_id:  # ends completed, failed or interrupted; signals handled
        return _pipeline(recipe, run_id)


def _pipeline(recipe: RecipeConfig, run_id: int) -> dict:
    run_dir = recipe.run_dir
    base = import_model(recipe.model.name)
    recipe = compute_settings(recipe, base)  # model.compute_dtype/cpu_threads auto -> this machine's values
    with env_server(recipe.env) as url, experience_pool(recipe) as recipe:
        load_tasks(recipe, url)
        start, exports, uris = base, {}, {}
        for index, stage in enumerate(["sft", "grpo"] if recipe.sft.enabled else ["grpo"]):
            run_stage = sft_stage if stage == "sft" else grpo_stage
            outcome = run_stage(recipe, start, url)
            record_stage(recipe, run_id, stage, index, outcome, run_dir / stage)
            start = exports[stage] = export_checkpoint(outcome["checkpoint"], str(run_dir / "export" / stage))
            uris[stage] = record_export(recipe, run_id, stage, start)
        best = best_checkpoint(run_dir / "grpo") if recipe.trainer.export_best else None
        if best is not None:  # the best validated GRPO checkpoint, beside the last one
            folder = run_dir / "export" / f"grpo-best-{best.name}"  # named by step: a later best is another export
            exports["grpo-best"] = export_checkpoint(str(best), str(folder))
            uris["grpo-best"] = record_export(recipe, run_id, "grpo-best", exports["grpo-best"])
        evals = {}
        if recipe.eval.enabled:
            for label, model in {"base": base, **exports}.items():
                evals[label] = evaluate(recipe, label, model, url)
                record_eval(recipe, run_id, label, uris.get(label, model), evals[label])
    stage_dirs = {s: str(run_dir / s) for s in exports}
    summary = report(str(run_dir), evals, stage_dirs, exports)
    get_run_logger().info("report: %s", summary["markdown"])
    return {"run_dir": str(run_dir), "exports": exports, "checkpoints": uris, "evals": evals, "report": summary}
