"""Batch evaluation: a 2 checkpoints × countdown × 2 seeds grid, k=2, with a real env server and SQLite registry."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

from agentrl_core.config import EngineConfig, SamplingConfig
from agentrl_core.env_service import launch_server
from agentrl_core.envs.countdown import FORMAT_REWARD, solve
from agentrl_core.evaluation.batch import (
    EvalGrid,
    EvalJob,
    EvalJobFailed,
    local_model_path,
    pending_checkpoints,
    plan_grid,
    run_eval_job,
    run_grid,
)
from agentrl_core.models import load_tokenizer
from agentrl_core.rollout import Generation, read_trajectories
from agentrl_core.store import EvalRecord, open_registry

FAST = SamplingConfig(temperature=1.0, max_new_tokens=6)


# -- the run registry: real, SQLite in the test's folder -------------------------------------------
@pytest.fixture
def new_registry():
    """`new_registry(root)` opens a fresh SQLite registry under root; all are closed after the test."""
    opened = []

    def make(root: Path):
        opened.append(open_registry(f"sqlite:///{root}/r.db", root))
        return opened[-1]

    yield make
    for reg in opened:
        reg.close()


def register_checkpoint(reg, run: str, step: int, uri: str, kind: str = "hf") -> None:
    run_id = reg.ensure_run(run, recipe={})
    reg.add_checkpoint(run_id, stage="grpo", step=step, uri=uri, kind=kind)


# -- fixtures -------------------------------------------------------------------------------------
@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny models on a shared 2-core CPU run ~7x faster on one thread (no spinning workers)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def countdown_url():
    with launch_server(["countdown"]) as server:
        yield server.url


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tiny_model_path) -> list[str]:
    """Two tiny random Llamas (different weights) with the SmolLM2 tokenizer, saved as HF folders."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig.from_pretrained(tiny_model_path)
    root = tmp_path_factory.mktemp("ckpts")
    paths = []
    for step, seed in ((10, 1), (20, 2)):
        out = root / f"step-{step}"
        shutil.copytree(tiny_model_path, out, ignore=shutil.ignore_patterns("*.safetensors"))
        torch.manual_seed(seed)
        LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
        paths.append(str(out))
    return paths


def grid_of(checkpoints: list[str], **overrides) -> EvalGrid:
    kwargs = {"checkpoints": checkpoints, "envs": ["countdown"], "seeds": [0, 1], "k": 2, "n_tasks": 2,
              "max_turns": 2, "sampling": FAST, "engine": EngineConfig(max_batch=8)}
    return EvalGrid(**{**kwargs, **overrides})


@pytest.fixture
def registry_with(new_registry):
    """`registry_with(root, checkpoints)`: a registry holding them as run r1's exported steps 10, 20."""
    def make(root: Path, checkpoints: list[str]):
        reg = new_registry(root)
        for step, uri in zip((10, 20), checkpoints):
            register_checkpoint(reg, "r1", step, uri)
        return reg

    return make


# -- tests ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_grid_is_idempotent_and_reevaluates_only_what_is_missing(tmp_path, registry_with, checkpoints, countdown_url):
    reg = registry_with(tmp_path, checkpoints)
    grid = grid_of(checkpoints, out_dir=tmp_path / "trajs")
    first = run_grid(grid, reg, {"countdown": countdown_url})
    assert [(r.checkpoint_uri, r.seed) for r in first] == [(c, s) for c in checkpoints for s in (0, 1)]
    stored = reg.evals(env="countdown")
    assert len(stored) == 4
    for r in stored:
        assert (r.split, r.k, r.engine, r.n_tasks, r.run) == ("test", 2, "auto", 2, "r1")
        assert r.step == {checkpoints[0]: 10, checkpoints[1]: 20}[r.checkpoint_uri]
        assert r.metrics["n_episodes"] == 4 and r.metrics["sampling_seeds"] == [2 * r.seed, 2 * r.seed + 1]
        assert 0.0 <= r.success_rate <= 1.0 and 0.0 <= r.pass_at_k <= 1.0 and r.reward_mean is not None
    slug = EvalJob(checkpoints[1], "countdown", 1, "test", 2, "auto").slug
    assert re.fullmatch(r"step-20-[0-9a-f]{8}-countdown-test-s1-k2-auto", slug)
    trajs = read_trajectories(tmp_path / "trajs" / slug / "trajectories.parquet")
    assert sorted(t.sample for t in trajs) == [0, 0, 1, 1] and len({t.task_id for t in trajs}) == 2

    assert run_grid(grid, reg, {"countdown": countdown_url}) == []  # everything is there: nothing runs
    assert reg.delete_eval(checkpoint_uri=checkpoints[1], env="countdown", split="test", seed=1, k=2, engine="auto")
    again = run_grid(grid, reg, {"countdown": countdown_url})
    assert [(r.checkpoint_uri, r.seed) for r in again] == [(checkpoints[1], 1)]
    assert len(reg.evals()) == 4


def test_an_interrupted_grid_keeps_what_finished(tmp_path, registry_with, checkpoints, countdown_url):
    reg = registry_with(tmp_path, checkpoints)
    grid = grid_of(checkpoints)
    seen = []

    def stop_after_first(record):
        seen.append(record)
        raise KeyboardInterrupt("the batch is killed")

    with pytest.raises(KeyboardInterrupt):
        run_grid(grid, reg, {"countdown": countdown_url}, on_result=stop_after_first)
    assert [(r.checkpoint_uri, r.seed) for r in reg.evals()] == [(checkpoints[0], 0)] == [(r.checkpoint_uri, r.seed) for r in seen]
    assert [(j.checkpoint_uri, j.seed) for j in plan_grid(grid, reg)] == [(checkpoints[0], 1)] + [(checkpoints[1], s) for s in (0, 1)]


def test_plan_grid_orders_jobs_and_takes_run_and_step_from_the_registry(tmp_path, registry_with, checkpoints):
    reg = registry_with(tmp_path, checkpoints[:1])
    jobs = plan_grid(grid_of(checkpoints, envs=["countdown", "maze"], seeds=[3]), reg)
    assert [(j.checkpoint_uri, j.env, j.seed, j.run, j.step) for j in jobs] == [
        (checkpoints[0], "countdown", 3, "r1", 10), (checkpoints[0], "maze", 3, "r1", 10),
        (checkpoints[1], "countdown", 3, None, None), (checkpoints[1], "maze", 3, None, None)]


def test_missing_env_url_fails_before_any_work(tmp_path, registry_with, checkpoints):
    with pytest.raises(ValueError, match=r"no env server URL for \['countdown'\]"):
        run_grid(grid_of(checkpoints), registry_with(tmp_path, checkpoints), {"maze": "http://127.0.0.1:1"})


def test_checkpoint_uris_resolve_to_local_folders_or_are_refused():
    # s3:// is downloaded (tests/flows/test_eval_flows.py does it against moto); other schemes are refused
    assert local_model_path("file:///a/b") == "/a/b" and local_model_path("/a/b") == "/a/b"
    with pytest.raises(ValueError, match="only local paths, file:// and s3://"):
        local_model_path("gs://bucket/ckpt")


def test_pending_checkpoints_lists_only_exported_ones_not_fully_evaluated(tmp_path, new_registry):
    reg = new_registry(tmp_path)
    for step, uri, kind in ((10, "/c/10", "hf"), (20, "/c/20", "hf"), (30, "/c/30", "hf"), (30, "/c/30-train", "train")):
        register_checkpoint(reg, "r1", step, uri, kind)
    for uri, seeds in (("/c/10", (0, 1)), ("/c/20", (0,))):  # 10 done; 20 misses seed 1; 30 is new
        for seed in seeds:
            reg.add_eval(EvalRecord(checkpoint_uri=uri, env="countdown", split="test", seed=seed, k=2, engine="hf",
                                    n_tasks=2, success_rate=0.5, pass_at_k=0.5, reward_mean=0.5, run="r1"))
    pending = pending_checkpoints(reg, ["countdown"], [0, 1], k=2, split="test", engine="hf")
    assert [c.uri for c in pending] == ["/c/20", "/c/30"]
    assert [c.uri for c in pending_checkpoints(reg, ["countdown"], [0], 2, "test", "hf")] == ["/c/30"]
    assert len(pending_checkpoints(reg, ["countdown"], [0], 1, "test", "hf")) == 3  # another k is another eval


class SolveOnEvenSeeds:
    """A scripted engine: solves the countdown prompt when the sampling seed is even, else answers wrong."""

    def __init__(self, tokenizer):
        self.tok = tokenizer

    @staticmethod
    def wrong(nums, target):
        """A well-formed answer (each number once) that misses the target: a sum or a product."""
        a, b, c = nums
        return f"{a} + {b} + {c}" if a + b + c != target else f"{a} * {b} * {c}"

    def generate(self, prompts, sampling, seed):
        out = []
        for p in prompts:
            text = self.tok.decode(p)
            numbers, target = re.findall(r"Numbers: \[([\d, ]+)\]\. Target: (\d+)", text)[-1]
            nums = tuple(int(n) for n in numbers.split(","))
            answer = solve(nums, int(target)) if seed % 2 == 0 else self.wrong(nums, int(target))
            ids = self.tok.encode(f"<answer>{answer}</answer>", add_special_tokens=False) + [self.tok.eos_token_id]
            out.append(Generation(ids, [0.0] * len(ids), "stop"))
        return out


def test_job_records_hand_computed_rates_with_the_seed_scheme(tmp_path, tiny_model_path, countdown_url):
    """Seed 1, k=2: sample 0 samples with seed 2 (even: solves at once), sample 1 with seed 3, then
    3 + 1000 (odd: three wrong but well-formed answers). Per task c=1 of n=2, so success 0.5,
    pass@2 = 1 − C(1,2)/C(2,2) = 1, pass@1 = 0.5, reward (1 + FORMAT_REWARD) / 2."""
    tok = load_tokenizer(tiny_model_path)
    grid = grid_of([str(tiny_model_path)], seeds=[1], max_turns=3)
    job = EvalJob(str(tiny_model_path), "countdown", 1, "test", 2, "hf", run="r9", step=7)
    record = run_eval_job(job, countdown_url, grid, engine=SolveOnEvenSeeds(tok), tokenizer=tok)
    assert (record.success_rate, record.pass_at_k, record.n_tasks) == (0.5, 1.0, 2)
    assert record.reward_mean == pytest.approx((1 + FORMAT_REWARD) / 2)
    assert record.metrics["pass_at_k"] == {"1": 0.5, "2": 1.0} and record.metrics["mean_steps"] == 2.0
    assert (record.run, record.step, record.seed, record.metrics["sampling_seeds"]) == ("r9", 7, 1, [2, 3])


class Broken:
    def generate(self, prompts, sampling, seed):
        raise RuntimeError("CUDA out of memory")


def test_a_job_whose_every_episode_failed_is_not_recorded(tiny_model_path, countdown_url):
    tok = load_tokenizer(tiny_model_path)
    job = EvalJob(str(tiny_model_path), "countdown", 0, "test", 2, "hf")
    with pytest.raises(EvalJobFailed, match="engine failed: RuntimeError: CUDA out of memory"):
        run_eval_job(job, countdown_url, grid_of([str(tiny_model_path)]), engine=Broken(), tokenizer=tok)


def test_grid_lists_must_not_repeat():
    with pytest.raises(ValueError, match="list each entry once"):
        EvalGrid(checkpoints=["/a", "/a"], envs=["countdown"])


@pytest.mark.slow
def test_openai_engine_matches_hf_against_our_own_server(tmp_path, registry_with, checkpoints, countdown_url):
    """engine=openai with no URL serves the checkpoint with agentrl's server: same tokens as in-process HF."""
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=6)
    records, reg = {}, registry_with(tmp_path, checkpoints)
    for engine in ("hf", "openai"):
        grid = grid_of(checkpoints[:1], seeds=[0], k=1, engine=EngineConfig(kind=engine, max_batch=8), sampling=greedy,
                       out_dir=tmp_path / engine,
                       server_threads=1)
        (records[engine],) = run_grid(grid, reg, {"countdown": countdown_url})
    assert [(r.engine, r.step) for r in reg.evals()] == [("hf", 10), ("openai", 10)]  # the engine is part of the key
    hf, oa = (read_trajectories(tmp_path / e / EvalJob(checkpoints[0], "countdown", 0, "test", 1, e).slug
                                / "trajectories.parquet") for e in ("hf", "openai"))
    assert [t.token_ids for t in hf] == [t.token_ids for t in oa] and len(hf) == 2
    assert records["openai"].success_rate == records["hf"].success_rate
    assert records["openai"].reward_mean == records["hf"].reward_mean
