"""The rollout worker: a model, an HF engine and the agent loop, playing episodes against the env server."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from agentrl_core.config import RecipeConfig, SamplingConfig
from agentrl_core.distributed.weight_sync import UNSYNCED, accept, load_into, materialised
from agentrl_core.envs import EnvClient, RemoteEnv
from agentrl_core.models import load_model, load_tokenizer
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import EpisodeSpec, Generation, LoopLimits, Trajectory, run_episodes
from agentrl_core.rollout.engines import make_engine
from agentrl_core.secrets import adopt_worker_environment

log = logging.getLogger(__name__)


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
            self.model = load_model(folder, dtype=cfg.model.dtype, device=device or actor_device())
            tokenizer = load_tokenizer(folder)
        self.engine = make_engine(cfg.rollout.engine, self.model, tokenizer, autocast=cfg.model.compute_dtype)
        self.chat = ChatFormat(tokenizer)
        self.client = EnvClient(env_url, timeout=cfg.env.request_timeout_s)
        self.version = UNSYNCED

    def run(self, specs: Sequence[EpisodeSpec], seed: int) -> list[Trajectory]:
        """Play every spec to its end with the current weights; one trajectory per spec, in order."""
        if self.version == UNSYNCED:
            raise RuntimeError("rollout before the first weight sync: the driver must sync the trainer's weights first")
        limits = LoopLimits(self.cfg.env.max_turns, self.cfg.rollout.max_context_tokens)
        factory = lambda: RemoteEnv(self.client, self.cfg.env.name)
        return run_episodes(self.engine, self.chat, factory, list(specs), self.cfg.rollout.sampling, limits, seed=seed)

    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig, seed: int) -> list[Generation]:
        """The engine's replies (tokens and their log-probs) to raw prompts: a probe of what the weights say."""
        return self.engine.generate(list(prompts), sampling, seed)

    def load_weights(self, version: int, state_dict: Mapping[str, torch.Tensor]) -> int:
        """Take the trainer's weights of `version` (must be newer than the held one); returns it."""
        accept(self.version, version)
        load_into(self.model, state_dict)
        if hasattr(self.engine, "invalidate"):  # the native engine's KV caches belong to the old weights
            self.engine.invalidate()
        self.model.eval()
        self.version = version
        return version

    def weights_version(self) -> int:
        return self.version

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self.client.close()


def remote_rollout_worker(options: dict[str, Any]) -> Any:
    """The actor class with Ray options (resources, scheduling strategy) applied."""
    import ray

    return ray.remote(RolloutWorker).options(**options)
