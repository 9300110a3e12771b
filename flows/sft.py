"""The multi-turn SFT pipeline (as in verl for AgentGym): supervised fine-tuning, export, then evaluation of the result."""

from __future__ import annotations

from prefect import flow

from agentrl_core.config import RecipeConfig
from agentrl_core.recipes import resolve_recipe
from tasks.env_server import env_server
from tasks.lifecycle import recipe_lifecycle
from tasks.records import record_eval, record_export, record_stage
from tasks.report import report
from tasks.secrets import prepare_secrets
from tasks.training_stages import (
    compute_settings,
    evaluate,
    export_checkpoint,
    import_model,
    load_tasks,
    sft_stage,
)


@flow(name="sft", log_prints=True, validate_parameters=True)
def sft(recipe: RecipeConfig | None = None, recipe_file: str | None = None, overrides: list[str] | None = None) -> dict:
    """Fine-tune on `sft.dataset` (chat JSONL or AgentGym trajectories) or on expert demonstrations,
    export the result, and evaluate base and SFT models on the held-out tasks."""
    sent = recipe is not None
    recipe = resolve_recipe(recipe, recipe_file, overrides or [])
    prepare_secrets(recipe, overrides or [], recipe_was_sent=sent)  # no password in stored parameters; load blocks
    with recipe_lifecycle(recipe, "sft") as run_id:  # ends completed, failed or interrupted; signals handled
        return _pipeline(recipe, run_id)


def _pipeline(recipe: RecipeConfig, run_id: int) -> dict:
    base = import_model(recipe.model.name)
    recipe = compute_settings(recipe, base)  # model.compute_dtype/cpu_threads auto -> this machine's values
    with env_server(recipe.env) as url:
        load_tasks(recipe, url)
        outcome = sft_stage(recipe, base, url)
        record_stage(recipe, run_id, "sft", 0, outcome, recipe.run_dir / "sft")
        export = export_checkpoint(outcome["checkpoint"], str(recipe.run_dir / "export" / "sft"))
        uri = record_export(recipe, run_id, "sft", export)
        evals = {}
        if recipe.eval.enabled:
            for label, model in {"base": base, "sft": export}.items():
                evals[label] = evaluate(recipe, label, model, url)
                record_eval(recipe, run_id, label, uri if label == "sft" else model, evals[label])
    summary = report(str(recipe.run_dir), evals, {"sft": str(recipe.run_dir / "sft")}, {"sft": export})
    return {"run_dir": str(recipe.run_dir), "export": export, "checkpoint": uri, "evals": evals, "report": summary}
