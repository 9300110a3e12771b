"""The rollout worker: a model, an HF engine and the agent loop, playing episodes against the env server."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from agentrl_core.config import RecipeConfig, SamplingConfig
from agentrl_core.distributed.inflight import InflightEngine
from agentrl_core.distributed.weight_sync import UNSYNCED, materialised
from agentrl_core.env_service import EnvClient, RemoteEnv
from agentrl_core.system.machine_info import peak_resident_bytes
from agentrl_core.models import load_model, load_tokenizer
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import EpisodeSpec, Generation, Trajectory
from agentrl_core.rollout.training_round import play_round
from agentrl_core.rollout.engine_factory import make_engine
from agentrl_core.secrets import adopt_worker_environment

ENGINE_COUNTERS = ("prefilled_tokens", "reused_tokens", "evictions", "forward_s")
"""The native engine's running counts a step reports (as rollout/<name>; grpo.local keeps the same list)."""

log = logging.getLogger(__name__)


def worker_engine(cfg: RecipeConfig, folder: str, tokenizer: Any, device: str) -> tuple[Any, Any]:
    """(engine, the model it samples or None) through the same factory as the in-process executor: native and hf
    sample a model this worker holds (loaded here, new weights copied into it); vLLM loads its own copy from the
    folder (new weights sent with its `update_weights`) and needs no second one."""
    if cfg.rollout.engine.kind == "vllm":
        return make_engine(cfg.rollout.engine, None, tokenizer, model_path=folder, dtype=cfg.model.dtype,
                           seed=cfg.trainer.seed), None
    model = load_model(folder, dtype=cfg.model.dtype, device=device)
    return make_engine(cfg.rollout.engine, model, tokenizer, autocast=cfg.model.compute_dtype), model


def actor_device() -> str:
    """"cuda" when Ray gave this actor a GPU (it sets CUDA_VISIBLE_DEVICES), else "cpu"."""
    import ray

    return "cuda" if ray.get_gpu_ids() else "cpu"


class RolloutWorker:
    """Holds the policy for sampling; `ray.remote(RolloutWorker)` makes it an actor.

    It starts from `init_model` at version UNSYNCED; the driver syncs the trainer's weights in
    before the first rollout, so it never samples from weights the trainer does not hold.
    """

    def __init__(self, init_model: str | Mapping[str, bytes], env_url: str, cfg: RecipeConfig,
                 device: str | None = None, environment: Mapping[str, str] | None = None) -> None:
        """`init_model`: a model folder, or its files (weight_sync.folder_files, through the object store:
        no path shared with the driver); `device` None: the GPU Ray assigned to this actor, else the CPU;
        `environment`: the run's secret variables (agentrl_core.secrets.worker_environment), adopted first."""
        adopt_worker_environment(environment)
        torch.manual_seed(cfg.trainer.seed)
        self.cfg = cfg
        with materialised(init_model) as folder:  # a copy sent through Ray is removed once loaded
            tokenizer = load_tokenizer(folder)
            engine, self.model = worker_engine(cfg, folder, tokenizer, device or actor_device())
        self.engine = InflightEngine(engine, self.model)  # weights may arrive while it plays (offer_weights)
        self.chat = ChatFormat(tokenizer)
        self.client = EnvClient(env_url, timeout=cfg.env.request_timeout_s)

    def run(self, specs: Sequence[EpisodeSpec], seed: int, sampling: SamplingConfig | None = None,
            max_live: int | None = None) -> list[Trajectory]:
        """Play every spec to its end (rollout.sampling, R3L's retries when on; or `sampling`: the validation's; at
        most `max_live` episodes open at once); one trajectory (R3L: plus its retries) per spec, in order. Weights offered meanwhile (offer_weights) are
        taken between decode steps; each turn records its weights' versions."""
        if self.engine.offered_version() == UNSYNCED:
            raise RuntimeError("rollout before the first weight sync: the driver must sync the trainer's weights first")
        factory = lambda: RemoteEnv(self.client, self.cfg.env.name)  # noqa: E731
        return play_round(self.engine, self.chat, factory, specs, seed, self.cfg, sampling, max_live)

    def engine_counters(self) -> dict[str, float]:
        """The engine's running counts (the native engine's prefilled and reused tokens, evictions, forward
        seconds); {} for an engine that keeps none."""
        stats = getattr(self.engine, "stats", None)
        return {k: float(v) for k, v in stats().items() if k in ENGINE_COUNTERS} if callable(stats) else {}

    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig, seed: int) -> list[Generation]:
        """The engine's replies (tokens and their log-probs) to raw prompts: a probe of what the weights say."""
        return self.engine.generate(list(prompts), sampling, seed)

    def load_weights(self, version: int, state_dict: Mapping[str, torch.Tensor]) -> int:
        """Take the trainer's weights of `version` (must be newer than the held one) now, between rollouts
        (the synchronous loop; the native engine's KV caches belong to the old weights and are dropped);
        returns it."""
        self.engine.load_now(version, state_dict)
        if self.model is not None:
            self.model.eval()
        return version

    def offer_weights(self, version: int, state_dict: Mapping[str, torch.Tensor]) -> int:
        """Take `version` in flight: a rollout under way switches to it at its next decode step (a later `run`
        at its first); the asynchronous loop calls it while `run` plays (the actor runs two calls at once,
        see remote_rollout_worker). Returns it."""
        self.engine.offer(version, state_dict)
        return version

    def weights_version(self) -> int:
        """The newest version this worker was given (applied, or parked until its next decode step)."""
        return self.engine.offered_version()

    def peak_rss_gib(self) -> float:
        """This worker process's peak resident memory so far (its engine's KV caches included), GiB."""
        return peak_resident_bytes() / 2**30

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self.client.close()


def remote_rollout_worker(options: dict[str, Any]) -> Any:
    """The actor class with Ray options (resources, scheduling strategy) applied. Two calls may run at once, so
    `offer_weights` reaches a worker busy in `run`; the driver never has two `run` calls of one worker out."""
    import ray

    return ray.remote(RolloutWorker).options(max_concurrency=2, **options)
