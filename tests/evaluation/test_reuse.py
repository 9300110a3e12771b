"""eval.reuse: an evaluation that would play exactly the same episodes is read back, never a different one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from agentrl_core.evaluation import reuse
from agentrl_core.evaluation.metrics import EpisodeResult, summarize
from agentrl_core.recipes import load_recipe


def _recipe(root: Path, *extra: str):
    return load_recipe("household_grpo", [f"run.root={root}", "eval.reuse=true", "env.test_tasks=4", *extra])


def _player(out_dir: Path, calls: list[str], errors: int = 0):
    def play():
        calls.append(str(out_dir))
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / reuse.TRAJECTORIES).write_bytes(f"episodes #{len(calls)}".encode())
        results = [EpisodeResult(task_id=t, sample=0, reward=float(t % 2), success=t % 2 == 1, steps=3,
                                 error="env died" if t < errors else None) for t in range(4)]
        return summarize(results)
    return play


def test_the_same_evaluation_is_read_back_and_any_difference_plays_again(tiny_model_path: Path, tmp_path: Path):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_path, model)
    calls: list[str] = []

    def run(cfg, label: str, ids=(0, 1, 2, 3)):
        out = tmp_path / label
        return reuse.evaluate_or_reuse(cfg, model, list(ids), out, _player(out, calls)), out

    cfg = _recipe(tmp_path / "runs")
    first, _ = run(cfg, "a")
    second, out = run(_recipe(tmp_path / "runs", "run.name=other", "trainer.seed=7"), "b")  # not part of the episodes
    assert len(calls) == 1 and second == first
    assert (out / reuse.TRAJECTORIES).read_bytes() == b"episodes #1"  # the first run's episodes, in the second's folder
    assert json.loads((out / reuse.REUSED).read_text())["entry"].startswith(str(tmp_path / "runs" / ".eval-cache"))
    for label, changed, ids in (("seed", _recipe(tmp_path / "runs", "eval.seed=5"), (0, 1, 2, 3)),
                                ("tokens", _recipe(tmp_path / "runs", "eval.sampling.max_new_tokens=7"), (0, 1, 2, 3)),
                                ("turns", _recipe(tmp_path / "runs", "env.max_turns=3"), (0, 1, 2, 3)),
                                ("env", _recipe(tmp_path / "runs", "env.kwargs.max_steps=5"), (0, 1, 2, 3)),
                                ("tasks", cfg, (0, 1, 2, 4))):
        before = len(calls)
        run(changed, label, ids)
        assert len(calls) == before + 1, label
    (model / "config.json").write_text((model / "config.json").read_text() + "\n")  # other bytes: another model
    run(cfg, "model")
    assert len(calls) == 7
    run(_recipe(tmp_path / "runs", "eval.reuse=false"), "off")
    assert len(calls) == 8


def test_an_unfinished_or_failed_evaluation_is_not_reused(tiny_model_path: Path, tmp_path: Path):
    calls: list[str] = []
    cfg = _recipe(tmp_path / "runs")
    out = tmp_path / "out"
    summary = reuse.evaluate_or_reuse(cfg, tiny_model_path, [0, 1, 2, 3], out, _player(out, calls, errors=1))
    assert summary.n_errors == 1
    reuse.evaluate_or_reuse(cfg, tiny_model_path, [0, 1, 2, 3], out, _player(out, calls))
    assert len(calls) == 2  # the env's failures need not recur: played again, and this one is kept
    entry = next((tmp_path / "runs" / reuse.CACHE_DIR).iterdir())
    (entry / reuse.SUMMARY).unlink()  # as if stopped between its two files
    reuse.evaluate_or_reuse(cfg, tiny_model_path, [0, 1, 2, 3], out, _player(out, calls))
    assert len(calls) == 3


def test_the_pipelines_evaluation_reuses_a_real_one(tiny_model_path: Path, env_server_url: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch):
    from tasks import training_stages

    overrides = [f"run.root={tmp_path}", "eval.reuse=true", "env.test_tasks=3", "env.max_turns=2",
                 "eval.sampling.max_new_tokens=6", "model.compute_dtype=float32"]
    first = training_stages._evaluate(load_recipe("household_grpo", [*overrides, "run.name=one"]), "base",
                                      str(tiny_model_path), env_server_url)
    monkeypatch.setattr(training_stages, "evaluate_model", lambda *a, **k: pytest.fail("played again"))
    again = training_stages._evaluate(load_recipe("household_grpo", [*overrides, "run.name=two"]), "base",
                                      str(tiny_model_path), env_server_url)
    assert again == first and first.n_episodes == 3
    # household counts the commands it does not accept: every evaluation reports their share per episode
    rates = [json.loads(e)["invalid_actions"] / n for e, n in zip(*pq.read_table(
        tmp_path / "one" / "eval" / "base" / reuse.TRAJECTORIES, columns=["extra", "num_turns"]).to_pydict().values())]
    assert first.metrics["invalid_action_rate"]["n"] == 3
    assert first.metrics["invalid_action_rate"]["mean"] == pytest.approx(sum(rates) / 3)
    played, read = (pq.read_table(tmp_path / name / "eval" / "base" / reuse.TRAJECTORIES) for name in ("one", "two"))
    assert played.equals(read)
