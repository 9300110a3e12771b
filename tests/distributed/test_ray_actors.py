"""Rollout and trainer actors on a local Ray (127.0.0.1): weights sync, a dead worker is retried, resume.

Marked slow: a local Ray and six actor processes (each imports torch) take ~40 s of CPU.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # read by `import ray`: keeps the local Ray on 127.0.0.1
ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.ray]

from agentrl_core.checkpoints.layout import step_dir
from agentrl_core.config import SamplingConfig
from agentrl_core.grpo.rollout import round_specs
from agentrl_core.distributed.rollout_pool import RolloutPool
from agentrl_core.distributed.rollout_worker import RolloutWorker
from agentrl_core.distributed.trainer_worker import TrainerWorker
from agentrl_core.distributed.weight_sync import StaleWeightsError
from agentrl_core.models import load_model, load_tokenizer
from agentrl_core.models.chat import ChatFormat
from agentrl_core.recipes import load_recipe
from agentrl_core.rollout import Generation, HFEngine
from agentrl_core.grpo import train_grpo

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=8)
TRAINS = ("trainer.optim.lr=0.05", "algorithm.entropy_coef=0.01")
"""A big step and an entropy term, so every update moves the weights even when all rewards are equal."""


@pytest.fixture(scope="module")
def env_server_url():
    """A real env server with countdown only, on 127.0.0.1, stopped after this module."""
    from agentrl_core.env_service import launch_server

    with launch_server(["countdown"], startup_timeout=120) as server:
        yield server.url


@pytest.fixture(scope="module", autouse=True)
def _on_the_local_ray(local_ray):
    """Every test here runs on the package's local Ray (tests/distributed/conftest.py)."""


def test_the_local_ray_listens_on_loopback_only() -> None:
    (node,) = ray.nodes()
    assert node["NodeManagerAddress"] == "127.0.0.1"
    assert ray.get(ray.remote(ray.util.get_node_ip_address).remote()) == "127.0.0.1"  # as a worker sees it
    assert ray.cluster_resources()["CPU"] == max(4, os.cpu_count() or 1)
    ports = _listening_ports_of(_ray_pids())
    assert ports and all(host in ("127.0.0.1", "[::ffff:127.0.0.1]") for host, _ in ports), ports


def _ray_pids() -> set[int]:
    """The pids of the Ray processes this test session started (children of this process, recursively)."""
    pids, todo = set(), [os.getpid()]
    while todo:
        children = Path(f"/proc/{todo.pop()}/task").glob("*/children")
        for path in children:
            for pid in map(int, path.read_text().split()):
                if pid not in pids:
                    pids.add(pid)
                    todo.append(pid)
    return pids


def _listening_ports_of(pids: set[int]) -> list[tuple[str, str]]:
    """(host, port) of every TCP socket in LISTEN state owned by `pids` (from `ss -ltnp`)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True, timeout=30).stdout
    found = []
    for line in out.splitlines():
        owners = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if owners & pids:
            host, _, port = line.split()[3].rpartition(":")
            found.append((host, port))
    return found


def recipe(model: Path, root: Path, *extra: str):
    return load_recipe("countdown_grpo", [
        f"model.name={model}", f"run.root={root}", "trainer.steps=2", "trainer.save_every=1",
        "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.sampling.max_new_tokens=6", "env.max_turns=2",
        "model.compute_dtype=float32", "env.train_tasks=8", "distributed.backend=ray", *extra])


def prompt(model: Path) -> list[int]:
    return ChatFormat(load_tokenizer(model)).prompt_ids([{"role": "user", "content": "Reach 24 with 3 4 8 and 1."}])


def local_greedy(model_dir: Path, ids: list[int]) -> Generation:
    return HFEngine(load_model(model_dir), load_tokenizer(model_dir)).generate([ids], GREEDY, 0)[0]


def same(a: Generation, b: Generation) -> bool:
    """The same tokens with the same log-probs (to float noise): the same weights in use."""
    return a.token_ids == b.token_ids and torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)


def test_workers_refuse_to_roll_out_unsynced_and_to_go_back_a_version(tiny_model_path, env_server_url, tmp_path):
    """The actor classes without Ray: the version protocol on the worker side."""
    cfg = recipe(tiny_model_path, tmp_path)
    trainer = TrainerWorker(cfg, str(tiny_model_path), str(tmp_path / "grpo"), device="cpu")
    worker = RolloutWorker(str(tiny_model_path), env_server_url, cfg, device="cpu")
    specs, seed = round_specs([0, 1], 0, 0, cfg)
    assert worker.weights_version() == -1 and trainer.start_step() == 0
    with pytest.raises(RuntimeError, match="before the first weight sync"):
        worker.run(specs, seed)
    assert worker.load_weights(0, trainer.state_dict()) == 0
    trajs = worker.run(specs, seed)
    assert [(t.group, t.sample) for t in trajs] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    with pytest.raises(StaleWeightsError, match="already holds version 0"):
        worker.load_weights(0, trainer.state_dict())
    trainer.close()
    worker.close()


@pytest.fixture(scope="module")
def ray_run(tiny_model_path, env_server_url, tmp_path_factory):
    """A 2-step GRPO stage with the ray backend and one rollout worker; after each step the rollout
    worker's greedy reply to a fixed prompt and its weights version are probed."""
    root = tmp_path_factory.mktemp("ray")
    cfg = recipe(tiny_model_path, root, *TRAINS)
    pools: list[RolloutPool] = []
    original = RolloutPool.__init__

    def keep(pool, *args, **kwargs):
        original(pool, *args, **kwargs)
        pools.append(pool)

    probes = []

    def on_step(step, total, m):
        worker = pools[-1].workers[0]
        probes.append((step, total, ray.get(worker.weights_version.remote()),
                       ray.get(worker.generate.remote([prompt(tiny_model_path)], GREEDY, 0))[0]))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RolloutPool, "__init__", keep)
        result = train_grpo(cfg, init_model=tiny_model_path, env_url=env_server_url, stage_dir=root / "grpo",
                            on_step=on_step)
    return root / "grpo", result, probes


def test_each_step_the_rollout_worker_generates_with_the_trainers_new_weights(ray_run, tiny_model_path):
    stage, _, probes = ray_run
    ids = prompt(tiny_model_path)
    assert [(s, t, v) for s, t, v, _ in probes] == [(1, 2, 1), (2, 2, 2)]  # after update k, version k is out
    first, second = probes[0][3], probes[1][3]
    assert same(first, local_greedy(step_dir(stage / "checkpoints", 1) / "model", ids))  # the trainer's step 1
    assert same(second, local_greedy(step_dir(stage / "checkpoints", 2) / "model", ids))  # and step 2
    assert not same(first, local_greedy(tiny_model_path, ids))  # the update really moved the worker's weights


def files(stage: Path) -> set[str]:
    return {str(p.relative_to(stage)) for p in stage.rglob("*") if p.is_file() and "tensorboard" not in p.parts}


def metrics(stage: Path) -> list[dict]:
    return [json.loads(x) for x in (stage / "metrics.jsonl").read_text().splitlines()]


def test_ray_backend_writes_what_the_local_backend_writes(ray_run, tiny_model_path, env_server_url, tmp_path):
    stage, result, _ = ray_run
    assert result.steps == 2 and result.resumed_from == 0
    assert Path(result.checkpoint) == stage / "checkpoints" / Path(result.checkpoint).name
    local_cfg = recipe(tiny_model_path, tmp_path, *TRAINS, "distributed.backend=local")
    train_grpo(local_cfg, init_model=tiny_model_path, env_url=env_server_url, stage_dir=tmp_path / "grpo")
    assert files(stage) == files(tmp_path / "grpo")
    ray_m, local_m = metrics(stage), metrics(tmp_path / "grpo")
    # one loop, the same metrics: the engine's counters come from the workers, the memory peaks from each side
    assert set(ray_m[0]) == set(local_m[0]), set(ray_m[0]) ^ set(local_m[0])
    assert {"rollout/prefilled_tokens", "rollout/retries", "memory/rollout_peak_rss_gib", "lag/max",
            "time/step_s", "time/trainer_wait_s"} <= set(ray_m[0])
    assert ray_m[0]["rollout/prefilled_tokens"] > 0
    planned = not torch.cuda.is_available()  # the local Ray's memory plan sums the trainer's and the worker's peaks
    for r in ray_m if planned else []:
        assert r["memory/run_peak_gib"] == pytest.approx(r["memory/peak_rss_gib"] + r["memory/rollout_peak_rss_gib"])
    for r, loc in zip(ray_m, local_m):  # one worker: the same episodes, seeds and update as the local loop
        assert r["rollout/retries"] == 0.0 and r["lag/max"] == 0.0
        for key in ("reward_mean", "response_length", "turns_mean", "samples_trained"):
            assert r[key] == loc[key], key
        assert r["loss"] == pytest.approx(loc["loss"], abs=1e-4)
    # and the same weights: the trainer actor runs the same update in its own process (its own thread count, so
    # float sums may round differently: 1e-5 relative covers that; a different update would be orders larger)
    from safetensors.torch import load_file

    ray_w = load_file(step_dir(stage / "checkpoints", 2) / "model" / "model.safetensors")
    local_w = load_file(step_dir(tmp_path / "grpo" / "checkpoints", 2) / "model" / "model.safetensors")
    assert ray_w.keys() == local_w.keys()
    for key in ray_w:
        torch.testing.assert_close(ray_w[key], local_w[key], rtol=1e-5, atol=1e-6, msg=key)


def test_on_ray_the_loop_validates_keeps_the_best_and_honours_the_time_limit(tiny_model_path, env_server_url,
                                                                            tmp_path):
    cfg = recipe(tiny_model_path, tmp_path, *TRAINS, "trainer.steps=3", "trainer.val_every=1", "trainer.val_tasks=3",
                 "trainer.export_best=true", "trainer.max_minutes=0.0001")
    result = train_grpo(cfg, init_model=tiny_model_path, env_url=env_server_url, stage_dir=tmp_path / "grpo")
    lines = metrics(tmp_path / "grpo")
    assert result.steps == 1 and [m["step"] for m in lines] == [0, 1]  # out of time after step 1: saved there
    assert Path(result.checkpoint).name.endswith("1")
    assert all(m["val/n_tasks"] == 3.0 for m in lines)  # the starting policy, then the step's
    best = json.loads((tmp_path / "grpo" / "best.json").read_text())
    assert best["step"] in (0, 1) and (tmp_path / "grpo" / "best").is_dir()


def test_a_killed_rollout_worker_is_reported_and_the_step_retried_then_resume(ray_run, tiny_model_path,
                                                                            env_server_url, tmp_path, monkeypatch,
                                                                            caplog):
    stage = tmp_path / "grpo"
    shutil.copytree(ray_run[0], stage)
    killed: list[int] = []
    original = RolloutPool.run

    def run_then_kill(pool, specs, seed):  # the actor dies while its rollout call is in flight
        if not killed:
            killed.append(ray.get(pool.workers[0].pid.remote()))
            pool.workers[0] = _KillAfterSubmit(pool, 0)
        return original(pool, specs, seed)

    monkeypatch.setattr(RolloutPool, "run", run_then_kill)
    cfg = recipe(tiny_model_path, tmp_path, *TRAINS, "trainer.steps=3", "distributed.rollout_workers=2")
    with caplog.at_level(logging.ERROR, logger="agentrl_core.distributed"):
        result = train_grpo(cfg, init_model=tiny_model_path, env_url=env_server_url, stage_dir=stage)
    assert result.resumed_from == 2 and result.steps == 3 and Path(result.checkpoint).name.endswith("3")
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("step 3: rollout workers [0] died" in e and "rollout-worker-0" in e for e in errors), errors
    assert any("rollout-worker-0 died in the rollout of step 3" in e for e in errors), errors
    lines = metrics(stage)
    assert [m["step"] for m in lines] == [1, 2, 3] and lines[2]["rollout/retries"] == 1.0
    assert lines[2]["samples_trained"] == 4.0  # every episode of the step came back after the retry


class _KillAfterSubmit:
    """Stands in for pool.workers[index]: its next `run` call is submitted, then the actor killed (and the
    pool given its real handle back)."""

    def __init__(self, pool: RolloutPool, index: int) -> None:
        self.pool, self.index, self.handle = pool, index, pool.workers[index]

    @property
    def run(self):
        outer = self

        class _Method:
            def remote(self, *args):
                ref = outer.handle.run.remote(*args)
                ray.kill(outer.handle)
                outer.pool.workers[outer.index] = outer.handle
                return ref

        return _Method()


ASYNC = ("algorithm.tis_cap=2.0", "trainer.steps=3")


@pytest.fixture(scope="module")
def async_pair(tiny_model_path, env_server_url, tmp_path_factory):
    """The same 3-step run twice with truncated importance sampling on: the synchronous loop, and the
    asynchronous one with max_policy_lag 0."""
    root = tmp_path_factory.mktemp("async")
    out = {}
    for name, extra in (("sync", ()), ("lag0", ("distributed.max_policy_lag=0",))):
        cfg = recipe(tiny_model_path, root / name, *TRAINS, *ASYNC, *extra)
        train_grpo(cfg, init_model=tiny_model_path, env_url=env_server_url, stage_dir=root / name / "grpo")
        out[name] = root / name / "grpo"
    return out


def test_lag_0_through_the_async_machinery_reproduces_the_synchronous_loop(async_pair):
    sync, lag0 = metrics(async_pair["sync"]), metrics(async_pair["lag0"])
    assert [m["step"] for m in lag0] == [1, 2, 3]
    for s, a in zip(sync, lag0):
        for key in ("reward_mean", "response_length", "turns_mean", "samples_trained", "loss", "grad_norm",
                    "entropy", "rollout_logp_diff"):
            assert a[key] == s[key], key
        assert a["lag/max"] == 0.0 and a["lag/last_mean"] == 0.0
        assert {"time/trainer_wait_s", "time/rollout_wait_s"} <= set(a)
    last = step_dir(async_pair["sync"] / "checkpoints", 3) / "model"
    from safetensors.torch import load_file

    a, b = load_file(last / "model.safetensors"), load_file(step_dir(async_pair["lag0"] / "checkpoints", 3) / "model"
                                                          / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_lag_1_stays_in_its_bound_and_a_killed_rollout_worker_is_replaced_without_losing_the_step(
        tiny_model_path, env_server_url, tmp_path, monkeypatch, caplog):
    original, launches = RolloutPool.launch, []

    def launch_then_kill(pool, specs, seed):  # the second step's rollout loses worker 0 while in flight
        launches.append(seed)
        if len(launches) == 2:
            pool.workers[0] = _KillAfterSubmit(pool, 0)
        return original(pool, specs, seed)

    monkeypatch.setattr(RolloutPool, "launch", launch_then_kill)
    cfg = recipe(tiny_model_path, tmp_path, *TRAINS, *ASYNC, "trainer.steps=4", "distributed.max_policy_lag=1",
                 "distributed.rollout_workers=2")
    with caplog.at_level(logging.ERROR, logger="agentrl_core.distributed"):
        result = train_grpo(cfg, init_model=tiny_model_path, env_url=env_server_url, stage_dir=tmp_path / "grpo")
    assert result.steps == 4
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("step 2: rollout workers [0] died" in e for e in errors), errors
    lines = metrics(tmp_path / "grpo")
    assert [m["step"] for m in lines] == [1, 2, 3, 4]
    assert [m["rollout/retries"] for m in lines] == [0.0, 1.0, 0.0, 0.0]
    assert all(m["samples_trained"] == 4.0 for m in lines)  # every episode of every step came back
    assert launches[1] == launches[2]  # the step was replayed with its own seed
    assert lines[0]["lag/max"] == 0.0  # the first batch: nothing ran ahead of it
    assert all(0.0 <= m["lag/last_mean"] <= m["lag/mean"] <= m["lag/max"] <= 1.0 for m in lines)
    from agentrl_core.rollout.io import read_trajectories

    trajs = read_trajectories(tmp_path / "grpo" / "rollout_log" / "step_000004.parquet")
    assert all(t.extra["weight_versions"] for t in trajs if not t.error)
