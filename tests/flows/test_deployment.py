"""`prefect deployment run` through a real local Prefect server and process worker, as the README says:
train-alfworld (with the experience pool), bfcl-curriculum and batch-eval run to completion, and
nightly-eval has its 02:00 runs scheduled by the server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from agentrl_core.store import open_registry
from agentrl_core.web.ports import free_port
from tests.prefect_home import seed_home

ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).with_name("prefect"))
pytestmark = pytest.mark.slow



def _prefect(env: dict, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([PREFECT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "prefect server exited during startup"
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError("prefect server did not become healthy")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def prefect_env(home, api_url: str, **extra: str) -> dict[str, str]:
    """This process's environment without PREFECT_* settings, pointed at a private Prefect home and API on
    127.0.0.1, with analytics off and a worker that polls every 2 s (plus `extra`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_API_URL=api_url, PREFECT_SERVER_ANALYTICS_ENABLED="false",
               DO_NOT_TRACK="1", PREFECT_SERVER_UI_V2_ENABLED="false", PREFECT_WORKER_QUERY_SECONDS="2",
               PWD=str(ROOT), **extra)
    return env


@pytest.fixture(scope="module")
def stack(tmp_path_factory, prefect_database):
    """A Prefect server on 127.0.0.1, the `local` process pool, `prefect deploy --all` and a worker."""
    home = seed_home(tmp_path_factory.mktemp("prefect-home"), prefect_database)
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = prefect_env(home, url, PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS="2")
    logs = [open(home / "server.log", "w"), open(home / "worker.log", "w")]
    server = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT,
                              env=env, stdout=logs[0], stderr=subprocess.STDOUT)
    worker = None
    try:
        _wait_healthy(url, server)
        created = _prefect(env, "work-pool", "create", "local", "--type", "process")
        assert created.returncode == 0, created.stdout + created.stderr
        deployed = _prefect(env, "--no-prompt", "deploy", "--all")
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        for name in ("train/train-alfworld", "curriculum/bfcl-curriculum", "batch-eval/batch-eval",
                     "nightly-eval/nightly-eval", "sft/sft", "convert-checkpoint/convert-checkpoint"):
            assert name in deployed.stdout, deployed.stdout
        worker = subprocess.Popen([PREFECT, "worker", "start", "--pool", "local"], cwd=ROOT, env=env,
                                  stdout=logs[1], stderr=subprocess.STDOUT)
        yield {"env": env, "api": url, "home": home}
    finally:
        if worker is not None:
            _stop(worker)
        _stop(server)
        for f in logs:
            f.close()


def _run(stack: dict, deployment: str, params: dict, timeout: float = 900) -> str:
    run = _prefect(stack["env"], "deployment", "run", deployment, "--params", json.dumps(params), "--watch",
                   "--watch-timeout", str(int(timeout)), timeout=timeout + 60)
    out = run.stdout + run.stderr
    worker_log = (stack["home"] / "worker.log").read_text()[-4000:]
    assert run.returncode == 0 and "Completed" in out, out[-3000:] + worker_log
    return out


def test_train_alfworld_with_the_experience_pool(stack, tiny_model_path, tmp_path):
    root = tmp_path / "runs"
    # games 0, 1, 6 and 7 are won by the expert in 4 steps, so 5 turns are enough for the SFT demos; the tiny model
    # (the real tokenizer and chat template): what is tested is the deployment's pipeline, not what the model learns
    overrides = [f"model.name={tiny_model_path}", f"run.root={root}", "run.name=alf", "env.train_ids=0-1,6-7", "env.test_tasks=1", "env.max_turns=5",
                 "sft.demos=2", "sft.epochs=1", "sft.batch_size=2", "trainer.steps=1", "rollout.tasks_per_step=1",
                 "rollout.group_size=2", "rollout.sampling.max_new_tokens=8", "eval.sampling.max_new_tokens=8"]
    _run(stack, "train/train-alfworld", {"overrides": overrides})
    with open_registry(None, root) as reg:
        run = reg.run("alf")
        assert run is not None and run.status == "completed"
        assert [s.name for s in reg.stages("alf")] == ["sft", "grpo"]
        assert sorted(c.stage for c in reg.checkpoints(run="alf", kind="hf")) == ["grpo", "sft"]
        assert {e.metrics["label"] for e in reg.evals(run="alf")} == {"base", "sft", "grpo"}
        assert {m.name for m in reg.metrics(run="alf", stage="grpo")} >= {"reward_mean", "exp/pool_size"}
    assert (root / "alf" / "experience.db").exists()  # the pool the flow started kept its store in the run folder


def test_bfcl_curriculum_runs_three_stages(stack, tiny_model_path, tmp_path):
    root = tmp_path / "runs"
    overrides = [f"model.name={tiny_model_path}", f"run.root={root}", "run.name=cur", "trainer.steps=1",
                 "trainer.save_every=1", "rollout.tasks_per_step=1", "rollout.group_size=2",
                 "rollout.sampling.max_new_tokens=8", "env.max_turns=2", "env.test_tasks=1",
                 "eval.sampling.max_new_tokens=8"]  # the recipe's context: every stage's opening prompts fit it
    _run(stack, "curriculum/bfcl-curriculum", {"overrides": overrides})
    for stage in ("stage1", "stage2", "stage3"):
        assert (root / "cur" / "export" / stage / "COMPLETE").exists()
    with open_registry(None, root) as reg:
        assert [s.name for s in reg.stages("cur")] == ["stage1", "stage2", "stage3"]
        assert {e.metrics["label"] for e in reg.evals(run="cur")} == {"base", "stage1", "stage2", "stage3"}


def test_batch_eval_is_idempotent(stack, embedded_model_path, tiny_model_path, tmp_path):
    root = tmp_path / "runs"
    grid = {"checkpoints": [str(embedded_model_path), str(tiny_model_path)], "envs": ["household"], "seeds": [0, 1],
            "k": 1, "n_tasks": 2, "max_turns": 2, "sampling": {"temperature": 0.0, "max_new_tokens": 8}}
    params = {"grid": grid, "root": str(root), "report_dir": str(tmp_path / "board")}
    _run(stack, "batch-eval/batch-eval", params)
    with open_registry(None, root) as reg:
        first = {(e.checkpoint_uri, e.seed): e.id for e in reg.evals(env="household")}
    assert len(first) == 4
    assert "household" in (tmp_path / "board" / "leaderboard.md").read_text()
    _run(stack, "batch-eval/batch-eval", params)  # everything is in the registry: nothing evaluated again
    with open_registry(None, root) as reg:
        assert {(e.checkpoint_uri, e.seed): e.id for e in reg.evals(env="household")} == first


def test_nightly_eval_is_scheduled_at_two(stack):
    api = stack["api"]
    dep = httpx.get(f"{api}/deployments/name/nightly-eval/nightly-eval", timeout=10).json()
    deadline, runs = time.monotonic() + 60, []
    while not runs and time.monotonic() < deadline:
        body = {"flow_runs": {"deployment_id": {"any_": [dep["id"]]}, "state": {"type": {"any_": ["SCHEDULED"]}}}}
        runs = httpx.post(f"{api}/flow_runs/filter", json=body, timeout=10).json()
        time.sleep(1)
    assert runs, "the server scheduled no nightly-eval runs"
    starts = [datetime.fromisoformat(r["expected_start_time"].replace("Z", "+00:00")) for r in runs]
    assert all((t.hour, t.minute, t.second) == (2, 0, 0) for t in starts), starts
