"""Validation during GRPO: val/* metrics every N steps on training-range tasks never trained on, the best kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl_core.checkpoints import export_hf
from agentrl_core.env_service import EnvClient
from agentrl_core.recipes import load_recipe
from agentrl_core.tasksets import resolve_task_ids
from agentrl_core.grpo import train_grpo
from agentrl_core.errors import ConfigError
from agentrl_core.evaluation.validation import BestCheckpoint, best_checkpoint, held_back_ids, is_due, validation_ids
from tests.training.test_recipes_train import tiny


def _cfg(model: Path, root: Path, *extra: str):
    return load_recipe("countdown_grpo", tiny(model, root) + ["trainer.steps=3", "trainer.save_every=3",
                                                              "env.test_tasks=4", "trainer.val_tasks=6", *extra])


def test_validation_tasks_come_from_the_training_range_and_are_never_trained_on(
        tiny_model_path: Path, env_server_url: str, tmp_path: Path):
    cfg = _cfg(tiny_model_path, tmp_path, "trainer.val_every=1", "env.train_tasks=20")
    with EnvClient(env_server_url) as client:
        ids, trained = validation_ids(cfg, client), resolve_task_ids(cfg.env, client, "train")
        train_split, test_split = client.task_ids("countdown", "train"), client.task_ids("countdown", "test")
        ranged = validation_ids(_cfg(tiny_model_path, tmp_path, "trainer.val_every=1", "env.train_ids=0-9,50-59"),
                                client)
    assert len(ids) == 6 and set(ids) <= set(train_split) and not set(ids) & set(trained)
    assert not set(ids) & set(test_split)
    assert ids == list(train_split)[-6:]  # the tail of the range: more training tasks do not move it
    assert ranged == list(train_split)[-6:]
    assert [is_due(_cfg(tiny_model_path, tmp_path, "trainer.val_every=2"), s) for s in range(4)] == [
        True, False, True, True]  # before training, every 2 steps, and the last step


@pytest.mark.slow
def test_grpo_logs_validation_and_keeps_the_best_checkpoint(tiny_model_path: Path, env_server_url: str,
                                                           tmp_path: Path):
    cfg = _cfg(tiny_model_path, tmp_path, "trainer.val_every=2", "trainer.export_best=true")
    stage = tmp_path / "grpo"
    train_grpo(cfg, init_model=tiny_model_path, env_url=env_server_url, stage_dir=stage)
    rows = [json.loads(x) for x in (stage / "metrics.jsonl").read_text().splitlines()]
    val = {r["step"]: r for r in rows if "val/success_rate" in r}
    assert sorted(val) == [0, 2, 3]
    for r in val.values():
        assert r["val/n_tasks"] == 6 and r["val/success_low"] <= r["val/success_rate"] <= r["val/success_high"]
    assert all("val/success_rate" not in r for r in rows if r["step"] == 1)
    record = json.loads((stage / "best.json").read_text())
    best_rate = max(r["val/success_rate"] for r in val.values())
    first_best = min(s for s, r in val.items() if r["val/success_rate"] == best_rate)
    assert record["step"] == first_best and record["val/success_rate"] == best_rate
    found = best_checkpoint(stage)
    assert found is not None and found.name.endswith(f"{first_best:06d}")
    out = export_hf(found, tmp_path / "export" / "grpo-best")
    assert (out / "config.json").is_file()
    assert BestCheckpoint(stage).step == first_best  # a resumed run compares against it


def test_validation_needs_untrained_training_range_tasks():
    assert held_back_ids([1, 2, 3, 4], [1, 4], 5, "toy") == [2, 3]
    with pytest.raises(ConfigError, match="lower env.train_tasks"):
        held_back_ids([1, 2], [2, 1], 4, "toy")


def test_export_best_needs_validation(tiny_model_path: Path, tmp_path: Path):
    with pytest.raises(ValueError, match="val_every"):
        _cfg(tiny_model_path, tmp_path, "trainer.export_best=true")


@pytest.mark.slow
def test_a_wall_time_budget_stops_after_the_step_that_crosses_it(tiny_model_path: Path, env_server_url: str,
                                                                  tmp_path: Path):
    cfg = _cfg(tiny_model_path, tmp_path, "trainer.max_minutes=0.0001", "trainer.val_every=10")
    result = train_grpo(cfg, init_model=tiny_model_path, env_url=env_server_url, stage_dir=tmp_path / "grpo")
    rows = [json.loads(x) for x in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert result.steps == 1 and Path(result.checkpoint).name.endswith("000001")
    assert [r["step"] for r in rows] == [0, 1] and "val/success_rate" in rows[-1]  # validated where it stopped
