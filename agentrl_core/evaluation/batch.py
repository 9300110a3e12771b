"""Batch evaluation: checkpoints × environments × seeds, k samples per task, recorded in the run registry.

A job is one (checkpoint, env, seed); its registry key is (checkpoint_uri, env, split, seed, k,
engine), so a grid run twice evaluates nothing the second time, and a batch that stops half-way
keeps every job that finished (each is recorded the moment it ends).

Seeds: grid seed s is both the environment reset seed of every episode of the job (all k samples of
a task reset with seed s, so they are k attempts at the same task, as pass@k assumes) and the
base of its sampling seeds: sample j samples with seed s·k + j. Seeds s ≠ s' thus draw disjoint
sampling seeds ({s·k … s·k+k−1}), so the spread over seeds measures sampling variance, not shared
draws; seed 0 uses seeds 0 … k−1, as `evaluate_model` with EvalConfig(seed=0) does. (Countdown
ignores the reset seed: its tasks are fixed by the task id.) A job whose every episode failed
outside the model raises EvalJobFailed and records nothing, so an outage is retried, never scored.

Engines (`agentrl_core.rollout.engine_factory.make_engine`): "auto", "native" and "hf" load the checkpoint in
this process; "vllm" loads it into vLLM (the GPU extra); "openai" talks to `engine.url` (any OpenAI-compatible
server that serves the checkpoint under its URI as model name, e.g. vLLM started with
`--model <uri>`) or, with no URL, starts agentrl's own server for each checkpoint and stops it
after that checkpoint's jobs.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import Field, field_validator

from agentrl_core.config import EngineConfig, EvalConfig, SamplingConfig, Section
from agentrl_core.errors import AgentRLError
from agentrl_core.evaluation.metrics import EvalSummary, summarize
from agentrl_core.evaluation.runner import episode_results, play_eval_episodes
from agentrl_core.rollout import Engine, LoopLimits, write_trajectories
from agentrl_core.system.safe_names import SafeName
from agentrl_core.store import CheckpointRecord, EvalRecord

log = logging.getLogger(__name__)

__all__ = ["EvalGrid", "EvalJob", "EvalJobFailed", "open_engine", "pending_checkpoints", "plan_grid", "run_eval_job", "run_grid"]


class EvalJobFailed(AgentRLError, RuntimeError):
    """Every episode of a job failed outside the model (engine or env errors): nothing is recorded,
    so the next batch tries the job again."""


class EvalGrid(Section):
    """What to evaluate: every checkpoint on every env with every seed, k samples per task."""

    checkpoints: list[str] = Field(min_length=1)
    """Hugging Face model folders to evaluate (paths or file:// URIs, as the registry records them)."""
    envs: list[SafeName] = Field(min_length=1)
    """Registered environment names."""
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    """Seed s: env reset seed s, and sample j samples with seed s·k + j (see the module docstring)."""
    k: int = Field(1, ge=1)
    """Samples per task (pass@k uses all of them)."""
    split: SafeName = "test"
    """Task split to evaluate on."""
    n_tasks: int = Field(24, ge=1)
    """How many tasks of the split (the first n)."""
    engine: EngineConfig = EngineConfig()
    """The engine: kind auto/native/hf (in this process), vllm (GPU extra) or openai. openai with `url` talks to
    a server serving each checkpoint under its URI as model name; openai without `url` starts
    agentrl's own server per checkpoint. `max_batch` sets the prompts per generate call."""
    server_threads: int | None = Field(None, ge=1)
    """engine openai without url: torch CPU threads of the server started per checkpoint
    (None = torch's choice; 1 is much faster on a CPU shared with other busy processes)."""
    api_key_env: str = "OPENAI_API_KEY"
    """engine openai with url: environment variable holding the server's bearer key (unset = none)."""
    sampling: SamplingConfig = SamplingConfig(temperature=1.0)
    """How the engine samples (temperature 0 makes the k samples identical)."""
    max_turns: int = Field(8, ge=1, le=100)
    """Most model turns per episode."""
    max_context_tokens: int = Field(2048, ge=64)
    """An episode whose context would exceed this is truncated."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Parameter dtype of the loaded model (hf, vllm, and the server started for openai); a GPU wants bfloat16."""
    compute_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Matmul precision of an in-process engine (auto/native/hf): auto = this machine's measured choice
    (agentrl_core.models.compute_settings), as training uses."""
    out_dir: Path | None = None
    """If set, each job's trajectories go to <out_dir>/<job slug>/trajectories.parquet."""

    @field_validator("checkpoints", "envs", "seeds")
    @classmethod
    def _distinct(cls, values: list) -> list:
        if len(set(values)) != len(values):
            raise ValueError(f"list each entry once (a repeat would evaluate the same job twice), got {values}")
        return values


@dataclass(frozen=True)
class EvalJob:
    """One unit of work: a checkpoint on one env with one seed; run/step come from the registry."""

    checkpoint_uri: str
    env: str
    seed: int
    split: str
    k: int
    engine: str
    run: str | None = None
    step: int | None = None

    @property
    def key(self) -> dict[str, Any]:
        """The registry's idempotency key of this job."""
        return {"checkpoint_uri": self.checkpoint_uri, "env": self.env, "split": self.split, "seed": self.seed,
                "k": self.k, "engine": self.engine}

    @property
    def slug(self) -> str:
        """A file-name label of the job: the checkpoint folder's name and a hash of its full URI (two runs'
        "step-10" folders stay apart), then env, split, seed, k and engine."""
        name = re.sub(r"[^A-Za-z0-9._-]", "_", self.checkpoint_uri.rstrip("/").rsplit("/", 1)[-1]) or "model"
        digest = hashlib.sha1(self.checkpoint_uri.encode()).hexdigest()[:8]
        return f"{name}-{digest}-{self.env}-{self.split}-s{self.seed}-k{self.k}-{self.engine}"


class EvalRegistry(Protocol):
    """The part of the run registry (`agentrl_core.store`) batch evaluation uses."""

    def checkpoints(self, *, run: str | None = None, kind: str | None = None) -> list[CheckpointRecord]: ...
    def has_eval(self, *, checkpoint_uri: str, env: str, split: str, seed: int, k: int, engine: str) -> bool: ...
    def add_eval(self, record: EvalRecord) -> int: ...
    def unevaluated(self, *, env: str, split: str, seed: int, k: int, engine: str,
                    kind: str | None = "hf") -> list[CheckpointRecord]: ...


def local_model_path(uri: str) -> str:
    """A local model folder from a checkpoint URI: a path, file://, or s3:// (downloaded once, see `fetch_s3`)."""
    if uri.startswith("file://"):
        return uri.removeprefix("file://")
    if uri.startswith("s3://"):
        return str(fetch_s3(uri))
    if "://" in uri:
        raise ValueError(f"checkpoint {uri!r}: only local paths, file:// and s3:// URIs can be evaluated; "
                         "or serve it and use engine kind openai with a url")
    return uri


def fetch_s3(uri: str) -> Path:
    """Download the exported checkpoint at `uri` into $AGENTRL_HOME/checkpoints/<hash> (once; a complete
    copy is reused). Endpoint and credentials: the usual AWS settings (AWS_ENDPOINT_URL, AWS_*, ~/.aws)."""
    import hashlib

    from agentrl_core.checkpoints.storage import open_storage
    from agentrl_core.system.home import agentrl_home

    cache = agentrl_home() / "checkpoints"
    dest = cache / hashlib.sha256(uri.encode()).hexdigest()[:20]
    if (dest / "config.json").is_file():
        return dest
    bucket = uri.removeprefix("s3://").split("/", 1)[0]
    return open_storage(f"s3://{bucket}", root=cache).get_dir(uri, dest)


def plan_grid(grid: EvalGrid, registry: EvalRegistry) -> list[EvalJob]:
    """The grid's jobs (checkpoint-major order) minus those the registry already holds."""
    known = {c.uri: c for c in registry.checkpoints()}
    jobs = []
    for uri, env, seed in itertools.product(grid.checkpoints, grid.envs, grid.seeds):
        ckpt = known.get(uri)
        job = EvalJob(uri, env, seed, grid.split, grid.k, grid.engine.kind,
                      run=getattr(ckpt, "run", None), step=getattr(ckpt, "step", None))
        if not registry.has_eval(**job.key):
            jobs.append(job)
    return jobs


@contextmanager
def open_engine(grid: EvalGrid, checkpoint_uri: str) -> Iterator[tuple[Engine, Any]]:
    """(engine, tokenizer) for one checkpoint, built by `make_engine`; what it started ends on exit."""
    from agentrl_core.models import load_model, load_tokenizer, resolve_model
    from agentrl_core.rollout.engine_factory import make_engine

    path = resolve_model(local_model_path(checkpoint_uri))
    tokenizer = load_tokenizer(path)
    cfg = grid.engine
    from agentrl_core.engine_registry import ENGINE_BUILDERS

    if cfg.kind in ("auto", "native", "hf") or cfg.kind in ENGINE_BUILDERS:  # engines that sample a model here
        compute = grid.compute_dtype
        if compute == "auto":
            from agentrl_core.models.compute_settings import choose_compute_dtype

            compute = choose_compute_dtype(path).dtype
        yield make_engine(cfg, load_model(path, dtype=grid.dtype), tokenizer, autocast=compute), tokenizer
    elif cfg.kind == "vllm":
        yield make_engine(cfg, None, tokenizer, model_path=path, dtype=grid.dtype), tokenizer
    else:
        with _openai_url(grid, checkpoint_uri, path) as (url, api_key):
            engine = make_engine(cfg.model_copy(update={"url": url}), None, tokenizer, served_model=checkpoint_uri,
                                 api_key=api_key)
            try:
                yield engine, tokenizer
            finally:
                engine.close()


@contextmanager
def _openai_url(grid: EvalGrid, checkpoint_uri: str, path: Path) -> Iterator[tuple[str, str | None]]:
    """(base URL, API key): grid.engine.url, or agentrl's own server started for this checkpoint."""
    if grid.engine.url is not None:
        from agentrl_core.secrets import reveal

        yield reveal(grid.engine.url, "engine.url"), os.environ.get(grid.api_key_env) or None
        return
    from agentrl_core.serving import launch_openai_server

    with launch_openai_server(path, served_model_name=checkpoint_uri, dtype=grid.dtype,
                              max_batch=grid.engine.max_batch or 32, threads=grid.server_threads) as server:
        from agentrl_core.web.auth import server_token

        yield server.url, server_token()  # the server requires the run's token, when there is one


def run_eval_job(job: EvalJob, env_url: str, grid: EvalGrid, *, engine: Engine | None = None,
                 tokenizer: Any = None) -> EvalRecord:
    """Evaluate one job and return its registry EvalRecord (not yet added).

    Pass `engine` and `tokenizer` to reuse an open engine (run_grid opens one per checkpoint);
    otherwise the job opens its own with `open_engine`.
    """
    if engine is None or tokenizer is None:
        with open_engine(grid, job.checkpoint_uri) as (own_engine, own_tokenizer):
            return run_eval_job(job, env_url, grid, engine=own_engine, tokenizer=own_tokenizer)
    cfg = EvalConfig(k=job.k, seed=job.seed * job.k, sampling=grid.sampling)
    trajs = play_eval_episodes(engine, tokenizer, env_name=job.env, env_url=env_url, cfg=cfg, n_tasks=grid.n_tasks,
                               limits=LoopLimits(grid.max_turns, grid.max_context_tokens), split=job.split,
                               env_seed=job.seed)
    if grid.out_dir is not None:
        write_trajectories(Path(grid.out_dir) / job.slug / "trajectories.parquet", trajs, model=job.checkpoint_uri)
    if all(t.error is not None for t in trajs):  # an outage, not a score of 0: keep the job pending
        raise EvalJobFailed(f"every episode of {job.slug} failed; first error: {trajs[0].error}")
    return eval_record(job, summarize(episode_results(trajs), k=job.k), grid)


def eval_record(job: EvalJob, summary: EvalSummary, grid: EvalGrid) -> EvalRecord:
    """The registry row of a finished job: headline numbers plus the full summary and settings in `metrics`."""
    metrics = {**summary.to_dict(), "sampling": grid.sampling.model_dump(), "max_turns": grid.max_turns,
               "sampling_seeds": [job.seed * job.k + j for j in range(job.k)]}
    return EvalRecord(checkpoint_uri=job.checkpoint_uri, env=job.env, split=job.split, seed=job.seed, k=job.k,
                      engine=job.engine, n_tasks=summary.n_tasks, success_rate=summary.success_rate,
                      pass_at_k=summary.pass_at_k.get(job.k), reward_mean=summary.mean_reward, metrics=metrics,
                      run=job.run, step=job.step)


def run_grid(grid: EvalGrid, registry: EvalRegistry, env_urls: Mapping[str, str],
             on_result: Callable[[EvalRecord], None] | None = None) -> list[EvalRecord]:
    """Evaluate every job of the grid the registry does not hold yet; returns the new records.

    Each record is added to the registry as soon as its job ends, before `on_result` sees it, so an
    interruption (an exception, a killed process) loses at most the job in progress. Jobs of one
    checkpoint share one engine (one model load, or one server).
    """
    jobs = plan_grid(grid, registry)
    missing = sorted({job.env for job in jobs} - set(env_urls))
    if missing:
        raise ValueError(f"no env server URL for {missing}: pass env_urls={{name: url}} for every env of the grid")
    done: list[EvalRecord] = []
    for uri, group in itertools.groupby(jobs, key=lambda job: job.checkpoint_uri):
        with open_engine(grid, uri) as (engine, tokenizer):
            for job in group:
                record = run_eval_job(job, env_urls[job.env], grid, engine=engine, tokenizer=tokenizer)
                record_id = registry.add_eval(record)
                log.info("evaluated %s (registry id %s): success %s", job.slug, record_id, record.success_rate)
                done.append(record)
                if on_result is not None:
                    on_result(record)
    return done


def pending_checkpoints(registry: EvalRegistry, envs: Sequence[str], seeds: Sequence[int], k: int, split: str,
                        engine: str) -> list[CheckpointRecord]:
    """Exported HF checkpoints (kind "hf") missing an evaluation for at least one env × seed.

    The union over env × seed of `registry.unevaluated(...)`, in the registry's order (run, step).
    """
    missing = {ckpt.uri for env in envs for seed in seeds
               for ckpt in registry.unevaluated(env=env, split=split, seed=seed, k=k, engine=engine, kind="hf")}
    return [ckpt for ckpt in registry.checkpoints(kind="hf") if ckpt.uri in missing]
