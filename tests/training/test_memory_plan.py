"""The memory budget sizes the KV cache, micro-batches and checkpointing by the formulas of its docstring."""

from __future__ import annotations

import json
import logging
import mmap

import pytest

from agentrl_core.errors import ConfigError
from agentrl_core.system.machine_info import peak_resident_bytes, reset_peak_resident
from agentrl_core.recipes import load_recipe
from agentrl_core.training import memory_plan as mp
from agentrl_core.grpo import train_grpo

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


def _concurrent(budget_gib: float, workers: int, **kw):
    args = dict(budget=int(budget_gib * GIB), source="test", resident=GIB // 2, weight_bytes=4, compute_bf16=True,
                reference=False, kv_cache_mb=2048, micro_batch_tokens=4096, longest_row=2048, checkpointing=False)
    return mp.plan_concurrent(SHAPE, workers=workers, **(args | kw))


def test_rollout_workers_beside_the_trainer_are_summed_not_alternated():
    roomy = _concurrent(32, workers=2)
    assert (roomy.kv_cache_mb, roomy.micro_batch_tokens, roomy.rollout_workers) == (2048, 4096, 2)
    # three runtimes; trainer weights + 2 workers' weights + the object store's published copy; AdamW moments
    assert roomy.persistent == 3 * (GIB // 2) + 4 * SHAPE.params * 4 + 8 * SHAPE.trainable
    assert roomy.rollout_fixed == 2 * (2 * SHAPE.params + mp.E_STEP * 2048)
    tight = _concurrent(9, workers=2)
    free = int(0.9 * 9 * GIB) - tight.persistent
    one_row = tight.bytes_per_token * 2048
    assert tight.kv_cache_mb == int((free - tight.rollout_fixed - tight.update_fixed - one_row)
                                    / (mp.KV_GROWTH * 2)) // MIB < 2048
    # both sides at once fit: the caches of every worker and the update's micro-batch
    assert tight.peak == (tight.persistent + tight.rollout_fixed + int(mp.KV_GROWTH * tight.kv_cache_mb * MIB) * 2
                          + tight.update_fixed + tight.bytes_per_token * tight.micro_batch_tokens)
    assert tight.peak <= 0.9 * tight.budget and tight.micro_batch_tokens >= 2048
    assert "2 rollout workers and the trainer at once" in tight.describe() and "MiB each" in tight.describe()
    # the same budget in one alternating process gives a larger cache: the phases do not add up there
    assert _plan(9).kv_cache_mb > tight.kv_cache_mb


def test_a_concurrent_budget_too_small_names_the_workers():
    with pytest.raises(ConfigError, match="too small for 4 rollout workers beside an update of one 2048-token row"):
        _concurrent(5, workers=4)


def test_the_run_peak_adds_the_trainer_and_every_worker(caplog):
    plan = _concurrent(9, workers=2)
    metrics = {"memory/peak_rss_gib": 3.0, "memory/rollout_peak_rss_gib": 2.0}
    with caplog.at_level(logging.WARNING, logger="agentrl_core.training.memory_plan"):
        assert mp.check_run_peak(plan, 1, metrics) == {"memory/run_peak_gib": 7.0}
        assert not caplog.text
        over = {"memory/peak_rss_gib": 5.0, "memory/rollout_peak_rss_gib": 2.5}
        assert mp.check_run_peak(plan, 2, over) == {"memory/run_peak_gib": 10.0}
    assert "step 2: the trainer's and 2 rollout workers' peaks add up to 10.00 GiB" in caplog.text
    assert mp.check_run_peak(None, 3, metrics) == {} and mp.check_run_peak(_plan(9), 3, metrics) == {}


def _touched(n_bytes: int) -> None:
    """Make `n_bytes` resident, then hand them back to the OS: an anonymous mapping, every page written, then
    unmapped. Not a Python object: malloc may keep a freed buffer in its heap (what a worker's earlier tests
    did to its allocator decides), and then the peak could not restart lower."""
    with mmap.mmap(-1, n_bytes) as pages:
        pages[::mmap.PAGESIZE] = b"\x01" * (n_bytes // mmap.PAGESIZE)


def test_the_peak_restarts_from_what_is_resident_now():
    _touched(512 * MIB)
    before = peak_resident_bytes()
    if not reset_peak_resident():
        pytest.skip("/proc/self/clear_refs cannot be written here")
    assert peak_resident_bytes() < before - 384 * MIB  # the freed 512 MiB are no longer this peak


def test_a_grpo_stage_reports_its_own_peak_not_an_earlier_stages(tiny_model_path, env_server_url, tmp_path):
    if not reset_peak_resident():
        pytest.skip("/proc/self/clear_refs cannot be written here")
    _touched(1024 * MIB)  # an earlier stage in this process that peaked 1 GiB higher, then freed it
    lifetime = peak_resident_bytes()
    cfg = load_recipe("household_grpo", [
        f"model.name={tiny_model_path}", f"run.root={tmp_path}", "trainer.steps=1", "rollout.tasks_per_step=2",
        "rollout.group_size=2", "rollout.sampling.max_new_tokens=6", "env.max_turns=2",
        "model.compute_dtype=float32", "trainer.memory_gb=null"])
    train_grpo(cfg, init_model=tiny_model_path, env_url=env_server_url, stage_dir=tmp_path / "grpo")
    metrics = json.loads((tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()[-1])
    for key in ("memory/peak_rss_gib", "memory/rollout_peak_rss_gib"):
        assert 0 < metrics[key] * GIB < lifetime - 512 * MIB, key
