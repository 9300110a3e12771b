"""Every training feature on the Ray executor, end to end on the package's local Ray (tiny model, real env server):
DAPO's dynamic sampling, R3L's reflect-then-retry, the experience pool, LoRA (merged weights to the workers), the
DeepSpeed trainer. Each is a property of an executor, not of a loop: the one loop drives them all.

Marked slow: each test is a short GRPO stage with a trainer actor and a rollout worker (~15-40 s of CPU).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.ray]

from agentrl_core.checkpoints.layout import step_dir  # noqa: E402
from agentrl_core.config import SamplingConfig  # noqa: E402
from agentrl_core.distributed.rollout_pool import RolloutPool  # noqa: E402
from agentrl_core.grpo import train_grpo  # noqa: E402
from agentrl_core.models import load_model, load_tokenizer  # noqa: E402
from agentrl_core.models.chat import ChatFormat  # noqa: E402
from agentrl_core.recipes import load_recipe  # noqa: E402
from agentrl_core.rollout import HFEngine  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _on_the_local_ray(local_ray):
    """Every test here runs on the package's local Ray (tests/distributed/conftest.py)."""


@pytest.fixture(scope="module")
def env_server_url():
    from agentrl_core.env_service import launch_server

    with launch_server(["countdown", "household"], startup_timeout=120) as server:
        yield server.url


def ray_recipe(name: str, model: Path, root: Path, *extra: str):
    return load_recipe(name, [
        f"model.name={model}", f"run.root={root}", "trainer.steps=2", "trainer.save_every=1",
        "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.sampling.max_new_tokens=6", "env.max_turns=2",
        "model.compute_dtype=float32", "env.train_tasks=8", "trainer.memory_gb=null", "distributed.backend=ray",
        *extra])


def run(cfg, model: Path, url: str, stage: Path, **kw) -> list[dict]:
    result = train_grpo(cfg, init_model=model, env_url=url, stage_dir=stage, **kw)
    assert result.steps == cfg.trainer.steps
    return [json.loads(x) for x in (stage / "metrics.jsonl").read_text().splitlines()]


def test_dynamic_sampling_refills_on_ray(tiny_model_path, env_server_url, tmp_path):
    # a random tiny model's countdown groups are all 0: every round is flat, so the refills run to their limit
    cfg = ray_recipe("countdown_dapo", tiny_model_path, tmp_path, "algorithm.dynamic_sampling_max_rounds=2",
                     "algorithm.entropy_coef=0.01")
    lines = run(cfg, tiny_model_path, env_server_url, tmp_path / "grpo")
    assert all(m["rollout_rounds"] == 2.0 and m["samples_trained"] == 0.0 for m in lines)
    logged = (tmp_path / "grpo" / "rollout_log" / "step_000001.parquet")
    import pyarrow.parquet as pq

    groups = set(pq.read_table(logged).column("group").to_pylist())
    assert any(g >= 1_000_000 for g in groups)  # the refill round's groups were played (on the worker) and logged


def test_r3l_retries_on_the_rollout_workers(tiny_model_path, env_server_url, tmp_path):
    cfg = ray_recipe("household_grpo", tiny_model_path, tmp_path, "algorithm.r3l_retry=true",
                     "algorithm.advantage=r3l", "algorithm.policy_loss=opmd", "algorithm.r3l_max_reflection_tokens=16",
                     "trainer.steps=1")
    lines = run(cfg, tiny_model_path, env_server_url, tmp_path / "grpo")
    import pyarrow.parquet as pq

    trajs = pq.read_table(tmp_path / "grpo" / "rollout_log" / "step_000001.parquet").to_pylist()
    roles = [json.loads(t["extra"])["r3l"]["role"] for t in trajs]
    assert roles.count("attempt") == 4  # played through R3L on the worker (a random model's reflections rarely
    # parse, so its retries are rare: that they retry is tests/rollout/test_r3l.py's job, with a scripted engine)
    assert lines[0]["r3l/reflections"] >= 1 and "r3l/retries" in lines[0]


def test_the_experience_pool_on_ray(tiny_model_path, env_server_url, tmp_path):
    cfg = ray_recipe("household_grpo", tiny_model_path, tmp_path, "experience.enabled=true", "experience.mode=all",
                     "experience.summarise_failures=true", "algorithm.entropy_coef=0.01")
    lines = run(cfg, tiny_model_path, env_server_url, tmp_path / "grpo")
    # the driver summarised step 1 into the pool it started; step 2's episodes were played with retrieved lessons
    assert lines[0]["exp/summarised"] > 0 and lines[1]["exp/pool_size"] > 0
    import pyarrow.parquet as pq

    second = pq.read_table(tmp_path / "grpo" / "rollout_log" / "step_000002.parquet").to_pylist()
    assert any("xperience" in json.dumps(t["messages"]) for t in second)


def test_lora_trains_adapters_and_the_workers_sample_the_merged_weights(tiny_model_path, env_server_url, tmp_path):
    cfg = ray_recipe("countdown_grpo", tiny_model_path, tmp_path, "model.lora.enabled=true", "model.lora.r=4",
                     "trainer.optim.lr=5e-2", "algorithm.entropy_coef=0.1", "algorithm.rollout_filter_ratio=0.5")
    pools: list[RolloutPool] = []
    original = RolloutPool.__init__

    def keep(pool, *args, **kwargs):
        original(pool, *args, **kwargs)
        pools.append(pool)

    probe = ChatFormat(load_tokenizer(tiny_model_path)).prompt_ids([{"role": "user", "content": "3 4 8 1 -> 24?"}])
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=8)
    replies = []

    def on_step(step, total, metrics):
        replies.append(ray.get(pools[-1].workers[0].generate.remote([probe], greedy, 0))[0])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RolloutPool, "__init__", keep)
        lines = run(cfg, tiny_model_path, env_server_url, tmp_path / "grpo", on_step=on_step)
    assert [m["samples_trained"] for m in lines] == [2.0, 2.0]  # RAGEN's filter on Ray: 1 of the 2 groups of 2 trains
    ckpt = step_dir(tmp_path / "grpo" / "checkpoints", 2) / "model"
    assert (ckpt / "adapter_model.safetensors").exists()  # the trainer trained and saved adapters
    from agentrl_core.checkpoints import export_hf

    merged = export_hf(step_dir(tmp_path / "grpo" / "checkpoints", 2), tmp_path / "export")
    local = HFEngine(load_model(merged), load_tokenizer(merged)).generate([probe], greedy, 0)[0]
    assert replies[-1].token_ids == local.token_ids  # the worker holds base + adapters merged, as exported
    assert torch.allclose(torch.tensor(replies[-1].logprobs), torch.tensor(local.logprobs), atol=1e-4)


def test_the_deepspeed_trainer_on_ray(tiny_model_path, env_server_url, tmp_path):
    pytest.importorskip("deepspeed")
    cfg = ray_recipe("countdown_grpo", tiny_model_path, tmp_path, "trainer.backend=deepspeed",
                     "trainer.deepspeed.zero_stage=2", "trainer.deepspeed.allow_cpu=true",
                     "trainer.deepspeed.bf16=false", "algorithm.entropy_coef=0.01")
    lines = run(cfg, tiny_model_path, env_server_url, tmp_path / "grpo")
    assert all(m["grad_norm"] > 0 for m in lines)
    ckpt = step_dir(tmp_path / "grpo" / "checkpoints", 2)
    assert (ckpt / "deepspeed").is_dir() and (ckpt / "model" / "model.safetensors").exists()


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_an_opening_prompt_over_the_context_stops_the_run_before_any_step(tiny_model_path, env_server_url, tmp_path,
                                                                          backend):
    from agentrl_core.errors import PromptTooLongError

    cfg = ray_recipe("countdown_grpo", tiny_model_path, tmp_path, "rollout.max_context_tokens=64",
                     f"distributed.backend={backend}")  # countdown's opening prompts are ~85 tokens
    with pytest.raises(PromptTooLongError, match=r"4 of 4 episodes opened with a prompt of "
                                                 r"rollout.max_context_tokens=64 tokens or more"):
        train_grpo(cfg, init_model=tiny_model_path, env_url=env_server_url, stage_dir=tmp_path / "grpo")
    assert not (tmp_path / "grpo" / "checkpoints").exists() or not any((tmp_path / "grpo" / "checkpoints").iterdir())
