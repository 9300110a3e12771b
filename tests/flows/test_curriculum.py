"""The staged curriculum: stage recipes, the cache key's model fingerprint, and kill → re-trigger resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from agentrl_core.curriculum import load_curriculum, model_fingerprint, stage_recipe
from agentrl_core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_bfcl_curriculum_stages_follow_seed_004():
    cur = load_curriculum("bfcl")
    recipes = [stage_recipe(cur, i) for i in range(3)]
    assert [r.env.kwargs["stage"] for r in recipes] == [1, 2, 3]
    assert [r.rollout.tasks_per_step for r in recipes] == [16, 32, 32]
    for r in recipes:
        assert (r.trainer.optim.lr, r.algorithm.kl_coef, r.algorithm.entropy_coef, r.trainer.optim.grad_clip) == \
            (1e-6, 0.1, 0.001, 1.0)
        assert r.env.name == "bfcl" and not r.sft.enabled


def test_caller_overrides_have_the_last_word():
    cur = load_curriculum("bfcl")
    r = stage_recipe(cur, 0, ["rollout.tasks_per_step=2", "trainer.steps=1"])
    assert (r.rollout.tasks_per_step, r.trainer.steps, r.env.kwargs["stage"]) == (2, 1, 1)


def test_bad_curricula_are_refused_clearly(tmp_path: Path):
    with pytest.raises(ConfigError, match="not found; give a YAML path or one of: bfcl"):
        load_curriculum("nope")
    dup = tmp_path / "dup.yaml"
    dup.write_text(yaml.safe_dump({"base_recipe": "household_grpo", "stages": [{"name": "a"}, {"name": "a"}]}))
    with pytest.raises(ConfigError, match="stage names must be unique"):
        load_curriculum(dup)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"base_recipe": "household_grpo", "stages": [{"name": "a", "overrides": ["x=1"]}]}))
    with pytest.raises(ConfigError, match="unknown key 'x'"):
        stage_recipe(load_curriculum(bad), 0)


def test_fingerprint_changes_with_the_model_files(tmp_path: Path):
    (tmp_path / "model.safetensors").write_bytes(b"abc")
    first = model_fingerprint(tmp_path)
    assert model_fingerprint(tmp_path) == first
    (tmp_path / "model.safetensors").write_bytes(b"abcd")
    assert model_fingerprint(tmp_path) != first


def _curriculum_file(tmp: Path) -> Path:
    path = tmp / "cur.yaml"
    path.write_text(yaml.safe_dump({"base_recipe": "household_grpo", "evaluate": False, "stages": [
        {"name": "s1", "overrides": ["trainer.steps=2", "trainer.save_every=1"]},
        {"name": "s2", "overrides": ["trainer.steps=10", "trainer.save_every=1", "trainer.keep_last=3"]},
        {"name": "s3", "overrides": ["trainer.steps=1"]},
    ]}))
    return path


def _command(cur: Path, model: Path, root: Path) -> list[str]:
    overrides = [f"model.name={model}", f"run.root={root}", "run.name=cur", "env.max_turns=2",
                 "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.sampling.max_new_tokens=4",
                 "model.compute_dtype=float32", "eval.enabled=false", "sft.enabled=false"]
    code = ("import json, sys; from flows.curriculum import curriculum; "
            f"r = curriculum(curriculum_file={str(cur)!r}, overrides={overrides!r}); "
            "print('RESULT ' + json.dumps([{k: s[k] for k in ('name', 'cached', 'resumed_from', 'steps')} "
            "for s in r['stages']]))")
    return [sys.executable, "-c", code]


def _complete_steps(ckpts: Path) -> list[int]:
    return sorted(int(p.name.split("_")[1]) for p in ckpts.glob("step_*") if (p / "COMPLETE").exists())


@pytest.mark.slow
def test_killed_curriculum_skips_done_stages_and_resumes_the_failed_one(tiny_model_path: Path, tmp_path: Path,
                                                                        prefect_home: Path):
    cur, root = _curriculum_file(tmp_path), tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(prefect_home), PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1",
               PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120", PYTHONPATH=str(ROOT))
    s2 = root / "cur" / "s2" / "checkpoints"
    first = subprocess.Popen(_command(cur, tiny_model_path, root), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 400
    while not [s for s in _complete_steps(s2) if s >= 2] and time.monotonic() < deadline:
        assert first.poll() is None, "the first run ended before stage 2 could be killed"
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    killed_at = max(_complete_steps(s2))
    assert 2 <= killed_at < 10
    s1_metrics = (root / "cur" / "s1" / "metrics.jsonl").read_text()
    second = subprocess.run(_command(cur, tiny_model_path, root), cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=600)
    assert second.returncode == 0, second.stderr[-4000:]
    stages = json.loads(next(line for line in second.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert [(s["name"], s["cached"]) for s in stages] == [("s1", True), ("s2", False), ("s3", False)]
    assert stages[1]["resumed_from"] >= killed_at and stages[1]["steps"] == 10
    assert (root / "cur" / "s1" / "metrics.jsonl").read_text() == s1_metrics  # stage 1 did not train again
    steps = [json.loads(x)["step"] for x in (root / "cur" / "s2" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 11))  # stage 2 went on from its checkpoint: no step lost or logged twice
    assert (root / "cur" / "export" / "s3" / "COMPLETE").exists()
    from agentrl_core.store import open_registry

    with open_registry(None, root) as reg:  # SIGKILL left it running; the run that finished ended it
        assert reg.run("cur").status == "completed"
