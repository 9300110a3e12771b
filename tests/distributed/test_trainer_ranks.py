"""A trainer sharded over several Ray actors (distributed.trainer_workers): ZeRO over a gloo group on the CPU.

The spike: the same update on the same batch by one trainer actor and by two ranks (each its share of the
micro-batches, gradients summed) gives the same loss and the same weights, within float summation order; then a
whole GRPO stage over two ranks, its checkpoint and its resume, and a resume with another N refused.

Marked slow: each case starts trainer actors that initialise DeepSpeed (~20-40 s of CPU).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")
pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.slow, pytest.mark.ray]

from agentrl_core.checkpoints.layout import step_dir  # noqa: E402
from agentrl_core.distributed.trainer_worker import TrainerWorker, rendezvous  # noqa: E402
from agentrl_core.distributed.executor import TrainerStartError  # noqa: E402
from agentrl_core.grpo import train_grpo  # noqa: E402
from agentrl_core.recipes import load_recipe  # noqa: E402
from agentrl_core.rollout import Trajectory  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _on_the_local_ray(local_ray):
    """Every test here runs on the package's local Ray (tests/distributed/conftest.py)."""


@pytest.fixture(scope="module")
def env_server_url():
    from agentrl_core.env_service import launch_server

    with launch_server(["countdown"], startup_timeout=120) as server:
        yield server.url


def recipe(model: Path, root: Path, *extra: str):
    return load_recipe("countdown_grpo", [
        f"model.name={model}", f"run.root={root}", "trainer.steps=2", "trainer.save_every=1",
        "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.sampling.max_new_tokens=6", "env.max_turns=2",
        "model.compute_dtype=float32", "env.train_tasks=8", "distributed.backend=ray", "trainer.backend=deepspeed",
        "trainer.deepspeed.allow_cpu=true", "trainer.deepspeed.bf16=false", "trainer.micro_batch_tokens=64",
        "trainer.optim.lr=1e-2", "algorithm.entropy_coef=0.01", *extra])


def batch(seed: int = 0, vocab: int = 400) -> list[Trajectory]:
    """Eight trajectories of four groups, rewards with spread: several micro-batches at a 64-token budget."""
    rng, out = random.Random(seed), []
    for i, reward in enumerate([1.0, 0.0, 0.5, 0.0, 1.0, 1.0, 0.0, 0.2]):
        t = Trajectory(task_id=i // 2, env="scripted", group=i // 2, sample=i % 2)
        t.append([rng.randrange(3, vocab) for _ in range(rng.randint(20, 28))], trainable=False)
        t.prompt_len = len(t.token_ids)
        n = rng.randint(5, 10)
        t.append([rng.randrange(3, vocab) for _ in range(n)], trainable=True, logprobs=[-1.0] * n)
        t.reward = reward
        out.append(t)
    return out


def one_update(cfg, model: Path, stage: Path, world: int) -> tuple[dict, dict[str, torch.Tensor]]:
    """One update on `batch()` by `world` trainer actors; (rank 0's metrics, the weights after it)."""
    remote = ray.remote(TrainerWorker).options(num_cpus=1)
    master = ray.get(ray.remote(rendezvous).remote()) if world > 1 else None
    ranks = [remote.remote(cfg, str(model), str(stage), device="cpu", rank=r, world=world, master=master)
             for r in range(world)]
    try:
        metrics = ray.get([r.update.remote(batch()) for r in ranks])
        weights = ray.get([r.state_dict.remote() for r in ranks])[0]
    finally:
        for r in ranks:
            ray.kill(r)
    return metrics[0], weights


@pytest.mark.parametrize("stage", [2, 3])
def test_two_ranks_give_one_ranks_update(tiny_model_path, tmp_path, stage):
    cfg = recipe(tiny_model_path, tmp_path, f"trainer.deepspeed.zero_stage={stage}")
    one, w1 = one_update(cfg, tiny_model_path, tmp_path / "one", 1)
    two, w2 = one_update(cfg, tiny_model_path, tmp_path / "two", 2)
    assert one["micro_batches"] == two["micro_batches"] >= 3  # the same micro-batches, shared out over two ranks
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-5)  # each rank's share summed over the ranks
    assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-4)  # the ranks' gradients summed, not averaged
    assert two["entropy"] == pytest.approx(one["entropy"], rel=1e-5)  # diagnostics over every rank's tokens
    # the weights after the AdamW step: its first step moves each weight by lr·g/(|g| + eps), so a weight whose
    # gradient is at summation-noise level moves by an arbitrary fraction of lr either way whatever the
    # equivalence; the update as a whole is what must agree: ‖Δθ_2 − Δθ_1‖ / ‖Δθ_1‖ (Δθ = θ after − θ before)
    from agentrl_core.models import load_model

    start = load_model(tiny_model_path).state_dict()
    off = sum(float((w2[k].float() - w1[k].float()).pow(2).sum()) for k in w1)
    moved = sum(float((w1[k].float() - start[k].float()).pow(2).sum()) for k in w1)
    assert moved > 0 and (off / moved) ** 0.5 < 1e-3, (off / moved) ** 0.5


def test_a_stage_over_two_trainer_workers_checkpoints_and_resumes_with_the_same_n(tiny_model_path, env_server_url,
                                                                                 tmp_path):
    cfg = recipe(tiny_model_path, tmp_path, "distributed.trainer_workers=2", "trainer.deepspeed.zero_stage=3")
    stage = tmp_path / "grpo"
    result = train_grpo(cfg, init_model=tiny_model_path, env_url=env_server_url, stage_dir=stage)
    assert result.steps == 2
    ckpt = step_dir(stage / "checkpoints", 2)
    assert (ckpt / "model" / "model.safetensors").exists()
    shards = sorted(p.name for p in (ckpt / "deepspeed").rglob("*optim_states.pt"))
    assert len(shards) == 2, shards  # one ZeRO shard per rank
    lines = [json.loads(x) for x in (stage / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]  # rank 0 alone logs
    assert {"memory/trainer_peak_rss_gib/rank_0", "memory/trainer_peak_rss_gib/rank_1"} <= set(lines[0])
    resumed = train_grpo(recipe(tiny_model_path, tmp_path, "distributed.trainer_workers=2",
                                "trainer.deepspeed.zero_stage=3", "trainer.steps=3"),
                         init_model=tiny_model_path, env_url=env_server_url, stage_dir=stage)
    assert resumed.resumed_from == 2 and resumed.steps == 3
    with pytest.raises(TrainerStartError, match="written by 2 trainer worker"):
        train_grpo(recipe(tiny_model_path, tmp_path, "trainer.deepspeed.zero_stage=3", "trainer.steps=4"),
                   init_model=tiny_model_path, env_url=env_server_url, stage_dir=stage)
