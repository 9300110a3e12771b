"""The staged-curriculum pipeline (BFCL stage 1 → 2 → 3): each stage a cached task, then evaluation."""

from __future__ import annotations

import json

from prefect import flow, get_run_logger

from agentrl_core.curriculum import (CurriculumConfig, export_dir, export_is_complete, load_curriculum,
                                     model_fingerprint, stage_recipe, stages_until)
from agentrl_core.errors import ConfigError
from tasks.curriculum import curriculum_stage
from tasks.env_server import env_server
from tasks.lifecycle import recipe_lifecycle
from tasks.records import record_eval, record_export, record_stage, stage_split
from tasks.report import report
from tasks.secrets import prepare_secrets
from tasks.training_stages import compute_settings, evaluate, import_model


def _resolve(curriculum: CurriculumConfig | None, curriculum_file: str | None) -> CurriculumConfig:
    if curriculum is not None and curriculum_file:
        raise ConfigError("give either curriculum or curriculum_file, not both")
    return curriculum if curriculum is not None else load_curriculum(curriculum_file or "bfcl")


@flow(name="curriculum", log_prints=True, validate_parameters=True)
def curriculum(curriculum: CurriculumConfig | None = None, curriculum_file: str | None = None,
               overrides: list[str] | None = None, until: str | None = None) -> dict:
    """Train the stages in order, each from the previous stage's export (a stage with `sft.enabled` warm-starts
    with SFT, then GRPO from it); evaluate base and every stage (and, with `evaluate_each_stage`, each stage's
    start, warm start and export on its own held-out tasks as it ends).

    `curriculum_file` is a name in recipes/curricula/ (default `bfcl`) or a YAML path; `overrides`
    (dotted KEY=VALUE) apply to every stage, after the stage's own; `until` names the stage to stop after (a
    later run goes on from there). Re-running after a failure skips the completed stages (cached, their
    reports kept) and resumes the failed one from its last checkpoint.
    """
    cur = stages_until(_resolve(curriculum, curriculum_file), until)
    recipes = [stage_recipe(cur, i, overrides or []) for i in range(len(cur.stages))]
    for recipe in recipes:  # no password in stored parameters; load the Prefect Secret blocks named
        prepare_secrets(recipe, overrides or [], recipe_was_sent=curriculum is not None)
    with recipe_lifecycle(recipes[-1], "curriculum") as run_id:  # ends completed, failed or interrupted
        return _stages(cur, recipes, run_id)


def _stages(cur: CurriculumConfig, recipes: list, run_id: int) -> dict:
    init = base = import_model(recipes[0].model.name)
    recipes = [compute_settings(r, base) for r in recipes]  # auto -> this machine's values (measured once, cached)
    stages, exports, stage_reports = [], {}, {}
    for index, (spec, recipe) in enumerate(zip(cur.stages, recipes)):
        done = export_is_complete(export_dir(recipe, spec.name))
        stage_task = curriculum_stage if done else curriculum_stage.with_options(refresh_cache=True)
        state = stage_task(recipe, spec.name, init, model_fingerprint(init), return_state=True)
        outcome = state.result()
        cached = state.name == "Cached"
        get_run_logger().info("%s: %s (export %s)", spec.name, "cached, skipped" if cached else "trained",
                              outcome["export"])
        record_stage(recipe, run_id, spec.name, index, outcome, recipe.run_dir / spec.name)
        exports[spec.name] = record_export(recipe, run_id, spec.name, outcome["export"])
        stages.append({**outcome, "cached": cached})
        warm = outcome.get("warm_start")
        if warm:
            exports[f"{spec.name}-sft"] = record_export(recipe, run_id, f"{spec.name}-sft", warm)
        if cur.evaluate_each_stage and recipe.eval.enabled:
            kept = _kept_report(recipe, spec.name) if cached else None
            stage_reports[spec.name] = kept or _evaluate_stage(recipe, spec.name, init, warm, outcome["export"],
                                                               run_id, exports)
        init = outcome["export"]
    last = recipes[-1]
    evals: dict[str, dict] = {}
    if cur.evaluate and last.eval.enabled:
        with env_server(last.env) as url:
            for label, model in {"base": base, **{s["name"]: s["export"] for s in stages}}.items():
                evals[label] = evaluate(last, label, model, url)
                record_eval(last, run_id, label, exports.get(label, model), evals[label])
    summary = report(str(last.run_dir), evals, {s["name"]: str(last.run_dir / s["name"]) for s in stages},
                     {s["name"]: s["export"] for s in stages})
    return {"run_dir": str(last.run_dir), "stages": stages, "evals": evals, "report": summary,
            "stage_reports": stage_reports}


def _kept_report(recipe, name: str) -> dict | None:
    """A cached stage's report from the run that trained it (<run>/<stage>/report/), or None when it has none."""
    folder = recipe.run_dir / name / "report"
    if not (folder / "eval.json").is_file():
        return None
    get_run_logger().info("%s: cached, its report kept (%s)", name, folder)
    plot = folder / "curves.png"
    return {"rows": json.loads((folder / "eval.json").read_text())["rows"], "markdown": str(folder / "summary.md"),
            "plot": str(plot) if plot.is_file() else None}


def _evaluate_stage(recipe, name: str, start: str, warm: str | None, export: str, run_id: int,
                    uris: dict[str, str]) -> dict:
    """The model a stage started from ("<stage>-start"), its SFT warm start when it had one ("<stage>-sft") and
    its export ("<stage>-trained") on the stage's own held-out tasks, paired in <run>/<stage>/report/: each
    against the one before (what the warm start added, then what GRPO added) and the export against the start."""
    models = {f"{name}-start": (start, start), f"{name}-sft": (warm, uris.get(f"{name}-sft")),
              f"{name}-trained": (export, uris[name])}
    evals = {}
    with env_server(recipe.env) as url:
        for label, (model, uri) in models.items():
            if model:
                evals[label] = evaluate(recipe, label, model, url)
                record_eval(recipe, run_id, label, uri, evals[label], stage_split(name))
    return report(str(recipe.run_dir / name), evals, {name: str(recipe.run_dir / name)},
                  {name: export, **({f"{name}-sft": warm} if warm else {})})
