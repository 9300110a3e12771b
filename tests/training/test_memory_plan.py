"""The memory budget sizes the KV cache, micro-batches and checkpointing by the formulas of its docstring."""

from __future__ import annotations

import logging

import pytest

from agentrl_core.errors import ConfigError
from agentrl_core.recipes import load_recipe
from agentrl_core.training import memory_plan as mp

GIB, MIB = 2**30, 2**20
SHAPE = mp.ModelShape(params=100_000_000, trainable=100_000_000, layers=30, hidden=500, intermediate=1500, vocab=1000,
                      heads=8)


def _plan(budget_gib: float, **kw):
    args = dict(budget=int(budget_gib * GIB), source="test", resident=GIB // 2, weight_bytes=4, compute_bf16=True,
                reference=False, native_engine=True, kv_cache_mb=2048, micro_batch_tokens=4096, longest_row=2048,
                checkpointing=False)
    return mp.plan_memory(SHAPE, **(args | kw))


def test_a_roomy_budget_keeps_the_configured_sizes_and_the_sums_match_the_formulas():
    plan = _plan(16)
    assert (plan.kv_cache_mb, plan.micro_batch_tokens, plan.gradient_checkpointing) == (2048, 4096, False)
    assert plan.persistent == GIB // 2 + 4 * SHAPE.params + 8 * SHAPE.trainable
    assert plan.rollout_fixed == 2 * SHAPE.params + mp.E_STEP * 2048  # the bf16 snapshot, one engine step
    assert plan.update_fixed == 4 * SHAPE.trainable + 2 * SHAPE.params + 3 * mp.CHUNK * SHAPE.vocab * 4
    assert plan.bytes_per_token == int(30 * mp.K * 2000 + mp.Q0 * 8 * 2048)
    assert _plan(16, reference=True).persistent == plan.persistent + 4 * SHAPE.params


def test_a_tight_budget_shrinks_the_cache_and_the_micro_batches_to_fit():
    plan = _plan(7, kv_cache_mb=8192)
    free = int(0.9 * 7 * GIB) - plan.persistent
    assert plan.kv_cache_mb == int((free - plan.rollout_fixed) / mp.KV_GROWTH) // MIB < 8192
    assert plan.micro_batch_tokens == (free - plan.update_fixed) // plan.bytes_per_token
    assert 2048 <= plan.micro_batch_tokens < 4096 and not plan.gradient_checkpointing
    peak = plan.persistent + max(plan.rollout_fixed + int(mp.KV_GROWTH * plan.kv_cache_mb * MIB),
                                 plan.update_fixed + plan.bytes_per_token * plan.micro_batch_tokens)
    assert peak <= 0.9 * plan.budget
    assert "7.00 GiB (test)" in plan.describe() and f"{plan.kv_cache_mb} MiB" in plan.describe()


def test_checkpointing_goes_on_when_the_longest_row_does_not_fit_without_it():
    row = 2048
    plan = _plan(3.5, longest_row=row)
    assert plan.gradient_checkpointing and plan.bytes_per_token == mp.activation_bytes(SHAPE, True, row, True)
    assert plan.bytes_per_token < mp.activation_bytes(SHAPE, False, row, True) and plan.micro_batch_tokens >= row
    assert not _plan(16, longest_row=row).gradient_checkpointing


def test_a_budget_that_cannot_hold_the_run_is_refused_with_what_to_change():
    with pytest.raises(ConfigError, match=r"memory budget 1.50 GiB \(test\) is too small for the rollout"):
        _plan(1.5)
    with pytest.raises(ConfigError, match="one 400000-token row.*trainer.memory_gb.*max_context_tokens"):
        _plan(3.5, longest_row=400_000)


def test_the_recipe_gets_the_plan_and_the_plan_reads_the_model_config(embedded_model_path):
    cfg = load_recipe("household_grpo", ["trainer.memory_gb=12", "algorithm.kl_coef=0.01"])
    plan = mp.memory_plan_for(cfg, embedded_model_path, native_engine=True)
    shape = mp.ModelShape.of(embedded_model_path)
    assert 130e6 < shape.params < 140e6 and (shape.layers, shape.hidden) == (30, 576)  # SmolLM2-135M
    assert plan.budget == 12 * GIB and plan.source == "trainer.memory_gb"
    assert plan.persistent >= 4 * shape.params * 2 + 8 * shape.params  # policy + reference + AdamW
    planned = mp.apply_plan(cfg, plan)
    assert planned.rollout.engine.kv_cache_mb == plan.kv_cache_mb
    assert planned.trainer.micro_batch_tokens == plan.micro_batch_tokens
    assert planned.model.gradient_checkpointing == plan.gradient_checkpointing
    assert cfg.trainer.micro_batch_tokens == 4096  # the recipe itself is not changed


def test_an_unset_budget_is_a_share_of_what_the_process_could_hold(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 16000000 kB\nMemAvailable: 8388608 kB\n")
    assert mp.available_bytes(str(meminfo), str(tmp_path / "no-cgroup")) == 8 * GIB
    (tmp_path / "memory.max").write_text(str(6 * GIB))
    (tmp_path / "memory.current").write_text(str(2 * GIB))
    assert mp.available_bytes(str(meminfo), str(tmp_path)) == 4 * GIB  # the cgroup's room is smaller
    budget, source = mp.budget_of(None)
    assert budget == pytest.approx(mp.AUTO_SHARE * (mp.available_bytes() + mp.resident_bytes()), rel=0.05)
    assert "available" in source and mp.budget_of(2.5) == (int(2.5 * GIB), "trainer.memory_gb")


def test_a_step_over_the_budget_is_named_in_a_warning(caplog):
    over = mp.MemoryPlan(budget=1, source="trainer.memory_gb", persistent=0, rollout_fixed=0, update_fixed=0,
                         kv_cache_mb=64, micro_batch_tokens=64, gradient_checkpointing=False, bytes_per_token=1)
    with caplog.at_level(logging.WARNING, logger="agentrl_core.training.memory_plan"):
        metrics = mp.check_peak(over, step=3)
    assert metrics["memory/peak_rss_gib"] > 0.05  # this process's real peak
    assert "step 3: peak resident memory" in caplog.text and "trainer.memory_gb" in caplog.text
    caplog.clear()
    assert mp.check_peak(None, step=4) and not caplog.text


def test_a_run_without_a_budget_that_looks_too_small_warns_and_keeps_the_recipe(embedded_model_path, monkeypatch,
                                                                                 caplog):
    monkeypatch.setattr(mp, "available_bytes", lambda *a, **k: 0)  # as if the machine had nothing left
    monkeypatch.setattr(mp, "resident_bytes", lambda: GIB)
    cfg = load_recipe("household_grpo")
    with caplog.at_level(logging.WARNING, logger="agentrl_core.training.memory_plan"):
        assert mp.memory_plan_for(cfg, embedded_model_path, native_engine=True) is None
    assert "is too small" in caplog.text and "trainer.memory_gb" in caplog.text
    with pytest.raises(ConfigError, match=r"memory budget 1.00 GiB \(trainer.memory_gb\) is too small"):
        mp.memory_plan_for(load_recipe("household_grpo", ["trainer.memory_gb=1"]), embedded_model_path,
                           native_engine=True)
