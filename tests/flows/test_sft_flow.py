"""The sft flow for real (Prefect test harness): SFT, export, evaluation of base and SFT, all in the registry."""

from __future__ import annotations

import pytest

from agentrl_core.store import open_registry
from tests.flows.conftest import tiny_overrides

pytestmark = pytest.mark.slow


def test_sft_flow_trains_exports_and_evaluates(prefect_harness, tiny_model_path, tmp_path):
    from flows.sft import sft

    root = tmp_path / "runs"
    out = sft(recipe_file="household_grpo", overrides=tiny_overrides(tiny_model_path, root) + ["env.test_tasks=1"])
    assert set(out["evals"]) == {"base", "sft"}
    assert (root / "tiny" / "export" / "sft" / "COMPLETE").exists()
    with open_registry(None, root) as reg:
        assert reg.run("tiny").status == "completed"
        assert [(c.stage, c.uri) for c in reg.checkpoints(run="tiny", kind="hf")] == [("sft", out["checkpoint"])]
        assert {e.metrics["label"] for e in reg.evals(run="tiny")} == {"base", "sft"}
        assert {m.name for m in reg.metrics(run="tiny", stage="sft")} >= {"loss"}
