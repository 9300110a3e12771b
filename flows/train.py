"""The training pipeline: env server → tasks → SFT → GRPO → export → evaluate → report."""

from __future__ import annotations

from prefect import flow, get_run_logger

from agentrl_core.config import RecipeConfig
from agentrl_core.recipes import resolve_recipe
from tasks.env_server import env_server
from tasks.report import report
from tasks.stages import evaluate, export_checkpoint, grpo_stage, import_model, load_tasks, sft_stage


@flow(name="train", log_prints=True, validate_parameters=True)
def train(recipe: RecipeConfig | None = None, recipe_file: str | None = None, overrides: list[str] | None = None) -> dict:
    """Train an agent on one environment with an SFT warm-start and GRPO, then evaluate base/SFT/GRPO.

    The recipe is `recipe` (the form in the UI), or the YAML `recipe_file` (a path or a name in
    recipes/), with dotted `overrides` applied on top (e.g. ["trainer.steps=8"]).
    """
    recipe = resolve_recipe(recipe, recipe_file, overrides or [])
    run_dir = recipe.run_dir
    base = import_model(recipe.model.name)
    with env_server(recipe.env) as url:
        load_tasks(recipe, url)
        start, exports = base, {}
        if recipe.sft.enabled:
            sft = sft_stage(recipe, base, url)
            start = exports["sft"] = export_checkpoint(sft["checkpoint"], str(run_dir / "export" / "sft"))
        grpo = grpo_stage(recipe, start, url)
        exports["grpo"] = export_checkpoint(grpo["checkpoint"], str(run_dir / "export" / "grpo"))
        evals = {}
        if recipe.eval.enabled:
            for label, model in {"base": base, **exports}.items():
                evals[label] = evaluate(recipe, label, model, url)
    stage_dirs = {s: str(run_dir / s) for s in ("sft", "grpo")}
    summary = report(str(run_dir), evals, stage_dirs, exports)
    get_run_logger().info("report: %s", summary["markdown"])
    return {"run_dir": str(run_dir), "exports": exports, "evals": evals, "report": summary}
