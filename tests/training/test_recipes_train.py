"""Every recipe in recipes/ trains for two GRPO steps (tiny model, real env server), and the Trinity-RFT R3L grid's
algorithm grid differs only in the algorithm section."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path

import pytest
import yaml

from agentrl_core.recipes import RECIPES_DIR, load_recipe
from agentrl_core.grpo import train_grpo
from tests.envs.conftest import every_env

pytestmark = pytest.mark.slow  # a real engine, JVM, database, planner or training run: seconds each

RECIPES = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))
GRID = ["alfworld_grpo", "alfworld_opmd", "alfworld_raft", "alfworld_opmd_reweight_adv", "alfworld_opmd_r3l"]
INSTALLED = {p.values[0] for p in every_env() if not p.marks}


def tiny(model: Path, root: Path) -> list[str]:
    return [f"model.name={model}", f"run.root={root}", "trainer.steps=2", "trainer.save_every=2",
            "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.sampling.max_new_tokens=6",
            "env.max_turns=2", "model.compute_dtype=float32", "algorithm.success_threshold=0.0",
            "trainer.memory_gb=null"]  # a recipe's budget is for its real model, not this test process's


@pytest.fixture(scope="module")
def recipe_env_url(env_server_url: str):
    """The env server a recipe runs against, as `agentrl run` starts it: the shared one for a recipe without
    env.kwargs, else one started with them (one per env and kwargs, kept for the module)."""
    from agentrl_core.env_service import launch_server

    with contextlib.ExitStack() as stack:
        started: dict[str, str] = {}

        def url(env: str, kwargs: dict) -> str:
            if not kwargs:
                return env_server_url
            key = json.dumps([env, kwargs], sort_keys=True)
            if key not in started:
                started[key] = stack.enter_context(launch_server([env], env_kwargs={env: kwargs})).url
            return started[key]
        yield url


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_trains_two_steps(name: str, tiny_model_path: Path, recipe_env_url, tmp_path: Path) -> None:
    cfg = load_recipe(name, tiny(tiny_model_path, tmp_path))
    if cfg.env.name not in INSTALLED:
        pytest.skip(f"{cfg.env.name}'s extra is not installed")
    result = train_grpo(cfg, init_model=tiny_model_path, env_url=recipe_env_url(cfg.env.name, cfg.env.kwargs),
                        stage_dir=tmp_path / "grpo")
    assert result.steps == 2 and Path(result.checkpoint).name.endswith("2")
    recorded = json.loads((tmp_path / "grpo" / "algorithm.json").read_text())  # what the numbers came from
    assert recorded == json.loads(cfg.algorithm.model_dump_json())
    logged = [json.loads(x) for x in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    validated = bool(cfg.trainer.val_every)  # a recipe that validates logs its check before step 1 as step 0
    assert [m["step"] for m in logged] == [0, 1, 2] if validated else [1, 2]
    if validated:
        assert "val/success_rate" in logged[0] and "val/success_rate" in logged[-1]  # before step 1 and at the last
    lines = [m for m in logged if m["step"] > 0]
    for m in lines:
        assert all(math.isfinite(v) for v in m.values() if isinstance(v, float)), m
        if cfg.algorithm.dynamic_sampling:  # a random tiny model rarely gets a group with reward spread
            assert 1 <= m["rollout_rounds"] <= cfg.algorithm.dynamic_sampling_max_rounds
            if m["samples_trained"] == 0:  # no informative group: every refill round was tried
                assert m["rollout_rounds"] == cfg.algorithm.dynamic_sampling_max_rounds
        else:  # RAFT's threshold is lowered above so its filter keeps samples
            assert m["samples_trained"] > 0 and m["rollout_rounds"] == 1


def test_the_grid_differs_only_in_the_algorithm_section() -> None:
    docs = {n: yaml.safe_load((RECIPES_DIR / f"{n}.yaml").read_text()) for n in GRID}
    strip = lambda d: {k: v for k, v in d.items() if k != "algorithm"} | {"run": {**d["run"], "name": None}}  # noqa: E731
    first = strip(docs[GRID[0]])
    assert all(strip(d) == first for d in docs.values())
    assert len({json.dumps(d["algorithm"], sort_keys=True) for d in docs.values()}) == len(GRID)


def test_dynamic_sampling_drops_flat_groups_and_refills(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrl_core.rollout import Trajectory
    from agentrl_core.grpo import rollout as grpo

    def traj(group: int, reward: float) -> Trajectory:
        return Trajectory(task_id=group, env="countdown", group=group, sample=0, token_ids=[1, 2, 3],
                          loss_mask=[0, 1, 1], logprobs=[0.0, -1.0, -1.0], reward=reward)

    rounds = {  # round -> groups (id -> rewards): round 0 has one flat and one informative group
        0: {0: [1.0, 1.0], 1: [0.0, 1.0]},
        1: {1_000_000: [0.0, 0.0]},
        2: {2_000_000: [0.5, 0.0], 2_000_001: [1.0, 0.0]},
    }
    calls = []

    def fake_round(executor, factory, tasks, step, round_, cfg):  # noqa: ANN001
        calls.append((round_, len(tasks)))
        return [traj(g, r) for g, rs in rounds[round_].items() for r in rs]

    monkeypatch.setattr(grpo, "_rollout_round", fake_round)
    cfg = load_recipe("countdown_dapo", ["rollout.tasks_per_step=2", "algorithm.dynamic_sampling_max_rounds=3"])
    every, train, used = grpo.rollout_batch(None, None, list(range(100)), 0, cfg)
    assert calls == [(0, 2), (1, 1), (2, 1)]  # refills ask for the missing number of groups
    assert used == 3 and len(every) == 10
    assert sorted({t.group for t in train}) == [1, 2_000_000]  # flat groups dropped; truncated to 2 groups
    assert len(train) == 4  # whole groups


def test_a_lora_run_trains_adapters_and_exports_a_merged_model(tiny_model_path: Path, env_server_url: str,
                                                               tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from agentrl_core.checkpoints import export_hf

    overrides = tiny(tiny_model_path, tmp_path) + ["model.lora.enabled=true", "model.lora.r=4",
                                                   "algorithm.kl_coef=0.01", "algorithm.entropy_coef=0.1",
                                                   "trainer.optim.lr=1e-2"]  # entropy: a gradient whatever the rewards
    cfg = load_recipe("countdown_grpo", overrides)
    result = train_grpo(cfg, init_model=tiny_model_path, env_url=env_server_url, stage_dir=tmp_path / "grpo")
    model_dir = Path(result.checkpoint) / "model"
    assert (model_dir / "adapter_model.safetensors").exists() and not (model_dir / "model.safetensors").exists()
    merged = export_hf(result.checkpoint, tmp_path / "export")
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    base, trained = (AutoModelForCausalLM.from_pretrained(p).eval() for p in (tiny_model_path, merged))
    with torch.no_grad():
        assert not torch.equal(base(ids).logits, trained(ids).logits)  # the adapters learned something
