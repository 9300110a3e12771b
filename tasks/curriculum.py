"""The curriculum stage task: cached and persisted, so a re-run skips the stages that completed."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import INPUTS, TASK_SOURCE

from agentrl_core.config import RecipeConfig
from agentrl_core.curriculum import run_stage
from agentrl_core.system.stop_signals import run_interruptible
from tasks.gpu import stage_gpus
from tasks.training_stages import TRANSIENT, _progress_callback

# The key: the stage's recipe, its name, its starting model and that model's fingerprint, and this
# task's source. A stage that failed has no cache record, so a re-run trains it again — resuming
# from its own last checkpoint (train_grpo resumes automatically).
STAGE_CACHE = INPUTS + TASK_SOURCE


@task(name="curriculum-stage", cache_policy=STAGE_CACHE, persist_result=True, **TRANSIENT)
def curriculum_stage(recipe: RecipeConfig, name: str, init_model: str, init_fingerprint: str) -> dict:
    """Train stage `name` from `init_model` (its SFT warm start first when `sft.enabled`, then GRPO) and export
    it; returns the StageOutcome as a dict."""
    del init_fingerprint  # part of the cache key only
    on_sft_step = (_progress_callback(f"{name}-sft-progress", f"{name} SFT optimizer steps")
                   if recipe.sft.enabled else None)
    with stage_gpus(recipe):
        outcome = run_interruptible(run_stage, recipe, name, init_model,  # Ctrl-C stops it within seconds
                                    on_step=_progress_callback(f"{name}-progress", f"{name} GRPO steps"),
                                    on_sft_step=on_sft_step)
    return outcome.to_dict()
