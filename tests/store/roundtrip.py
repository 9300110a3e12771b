"""One pass over the registry's core API with hand-computed expectations, run on SQLite and PostgreSQL."""

from __future__ import annotations

import math
from dataclasses import FrozenInstanceError

import pytest

from agentrl_core.store import EvalRecord, Registry, RegistryError


def _runs_and_stages(reg: Registry, name: str) -> int:
    run_id = reg.ensure_run(name, recipe={"lr": 1e-5, "stages": ["sft", "rl"]}, flow_run_id="flow-1")
    assert reg.ensure_run(name, recipe={"lr": 2e-5}) == run_id  # same name → same id, recipe replaced
    reg.set_run_status(run_id, "failed")
    assert reg.run(name).status == "failed"
    assert reg.ensure_run(name, recipe={"lr": 2e-5}) == run_id
    record = reg.run(name)
    assert (record.status, record.recipe, record.flow_run_id) == ("running", {"lr": 2e-5}, "flow-1")
    assert record.created_at.tzinfo is not None and record.updated_at >= record.created_at
    rl = reg.ensure_stage(run_id, "rl", 1)
    sft = reg.ensure_stage(run_id, "sft", 0)
    assert reg.ensure_stage(run_id, "rl", 1) == rl and rl != sft
    reg.set_stage_status(sft, "running")
    reg.set_stage_status(sft, "completed", checkpoint_uri=f"file:///{name}/sft/hf")
    stages = reg.stages(name)
    assert [(s.name, s.index, s.status) for s in stages] == [("sft", 0, "completed"), ("rl", 1, "pending")]
    assert stages[0].checkpoint_uri == f"file:///{name}/sft/hf"
    assert stages[0].started_at <= stages[0].finished_at and stages[1].started_at is None
    return run_id


def _checkpoints(reg: Registry, name: str, run_id: int) -> None:
    uris = [f"file:///{name}/rl/step_{s:06d}" for s in (10, 20)]
    first = reg.add_checkpoint(run_id, stage="rl", step=10, uri=uris[0], kind="train", meta={"loss": 0.5})
    assert reg.add_checkpoint(run_id, stage="rl", step=10, uri=uris[0], kind="train") == first
    reg.add_checkpoint(run_id, stage="rl", step=20, uri=uris[1], kind="train")
    reg.add_checkpoint(run_id, stage="export", step=20, uri=f"file:///{name}/hf", kind="hf", meta={"dtype": "bf16"})
    with pytest.raises(RegistryError, match="already recorded"):
        reg.add_checkpoint(run_id, stage="rl", step=30, uri=uris[0], kind="train")
    records = reg.checkpoints(run=name)
    assert [(c.step, c.kind) for c in records] == [(10, "train"), (20, "train"), (20, "hf")]
    assert records[0].meta == {"loss": 0.5} and records[0].run == name
    assert [c.uri for c in reg.checkpoints(run=name, kind="hf")] == [f"file:///{name}/hf"]
    with pytest.raises(FrozenInstanceError):
        records[0].step = 11


def _metrics(reg: Registry, name: str, run_id: int) -> None:
    reg.log_metrics(run_id, stage="rl", step=1, metrics={"loss": 1.5, "reward": 0.25})
    reg.log_metrics(run_id, stage="rl", step=2, metrics={"loss": 1.25, "kl": math.nan})
    reg.log_metrics(run_id, stage="rl", step=1, metrics={"loss": 1.0})  # upsert: replaces step 1's loss
    reg.log_metrics(run_id, stage="sft", step=1, metrics={"loss": 3.0})
    got = [(m.stage, m.name, m.step, m.value) for m in reg.metrics(run=name)]
    assert got == [("rl", "kl", 2, None), ("rl", "loss", 1, 1.0), ("rl", "loss", 2, 1.25), ("rl", "reward", 1, 0.25),
                   ("sft", "loss", 1, 3.0)]
    assert [m.value for m in reg.metrics(run=name, stage="rl", names=["loss"])] == [1.0, 1.25]


def _evals(reg: Registry, name: str) -> None:
    uri = f"file:///{name}/hf"
    key = {"checkpoint_uri": uri, "env": "countdown", "split": "test", "seed": 0, "k": 2, "engine": "hf"}
    assert not reg.has_eval(**key)
    assert [c.uri for c in reg.unevaluated(env="countdown", split="test", seed=0, k=2, engine="hf", run=name)] == [uri]
    record = EvalRecord(uri, "countdown", "test", 0, 2, "hf", n_tasks=4, success_rate=0.5, pass_at_k=0.75,
                        reward_mean=0.4, metrics={"mean_steps": 3.0}, run=name, step=20)
    first = reg.add_eval(record)
    assert reg.has_eval(**key) and not reg.has_eval(**{**key, "seed": 1})
    assert reg.unevaluated(env="countdown", split="test", seed=0, k=2, engine="hf", run=name) == []
    again = EvalRecord(**{**record.key(), "n_tasks": 4, "success_rate": 0.25, "pass_at_k": 0.5, "reward_mean": None,
                          "metrics": {}, "run": name, "step": 20})
    assert reg.add_eval(again) == first  # same key → same row, values replaced
    reg.add_eval(EvalRecord(uri, "countdown", "test", 1, 2, "hf", 4, 1.0, 1.0, 1.0, run=None))
    stored = reg.evals(checkpoint_uri=uri)
    assert [(e.seed, e.success_rate, e.reward_mean, e.run) for e in stored] == [(0, 0.25, None, name), (1, 1.0, 1.0, None)]
    assert stored[0].id == first and stored[0].step == 20 and stored[0].created_at.tzinfo is not None
    assert [e.seed for e in reg.evals(run=name)] == [0]
    assert reg.delete_eval(**key) and not reg.delete_eval(**key)
    assert [e.seed for e in reg.evals(env="countdown", checkpoint_uri=uri)] == [1]


def exercise_core_api(reg: Registry, name: str = "run-a") -> None:
    """Runs, stages, checkpoints, metrics and eval results: every call, its idempotency and its records."""
    run_id = _runs_and_stages(reg, name)
    _checkpoints(reg, name, run_id)
    _metrics(reg, name, run_id)
    _evals(reg, name)
