"""The train flow, run for real through Prefect (test harness), on a tiny model and the real env server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from prefect import get_client

from flows.train import train
from tests.flows.conftest import tiny_overrides


@pytest.fixture(scope="module")
def tiny_run(prefect_harness, tiny_model_path, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    state = train(recipe_file="household_grpo", overrides=tiny_overrides(tiny_model_path, root), return_state=True)
    return root / "tiny", state


@pytest.mark.slow
def test_flow_completes_and_writes_every_stage(tiny_run):
    run_dir, state = tiny_run
    assert state.is_completed(), state
    result = state.result()
    assert set(result["evals"]) == {"base", "sft", "grpo"}
    for label in ("sft", "grpo"):
        export = Path(result["exports"][label])
        assert (export / "model.safetensors").exists() and (export / "COMPLETE").exists()
    assert (run_dir / "grpo" / "rollout_log" / "step_000001.parquet").exists()
    assert (run_dir / "sft" / "demos.parquet").exists()
    assert (run_dir / "report" / "summary.md").read_text().count("|") > 10
    assert (run_dir / "report" / "curves.png").stat().st_size > 1000
    rows = json.loads((run_dir / "report" / "eval.json").read_text())["rows"]
    assert [r["model"] for r in rows] == ["base", "sft", "grpo"]
    assert all(r["n_errors"] == 0 for r in rows)
    from agentrl_core.store import open_registry

    with open_registry(None, run_dir.parent) as reg:
        assert reg.run("tiny").status == "completed"


async def _artifacts():
    async with get_client() as client:
        return await client.read_artifacts()


def test_flow_publishes_artifacts(tiny_run):
    _, state = tiny_run
    arts = asyncio.run(_artifacts())
    keys = {a.key for a in arts if a.flow_run_id == state.state_details.flow_run_id}
    assert {"evaluation", "run-summary", "checkpoint-grpo", "grpo-progress"} <= keys


@pytest.mark.slow
def test_rerun_resumes_instead_of_retraining(tiny_run, tiny_model_path):
    run_dir, _ = tiny_run
    before = (run_dir / "grpo" / "metrics.jsonl").read_text()
    state = train(recipe_file="household_grpo", overrides=tiny_overrides(tiny_model_path, run_dir.parent),
                  return_state=True)
    assert state.is_completed()
    assert (run_dir / "grpo" / "metrics.jsonl").read_text() == before  # nothing trained twice


def test_bad_recipe_fails_before_any_work(prefect_harness, tmp_path):
    state = train(recipe_file="household_grpo", overrides=["env.name=nope", f"run.root={tmp_path}"],
                  return_state=True)
    assert state.is_failed()
    with pytest.raises(Exception, match="household"):
        state.result()
    assert not any(tmp_path.iterdir())
