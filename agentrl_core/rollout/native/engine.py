"""The native rollout engine: kept KV caches, continuous batching and packed forwards on CPU or CUDA.

Two ways to use it:
- `generate(prompts, sampling, seed)`, the Engine protocol every caller already uses. Prompts
  that extend an earlier call's context (the next turn of an episode) prefill only their new
  tokens, because finished sequences stay cached until the budget needs their room;
- `submit` / `step` / `release`, the continuous API the agent loop drives: requests join the
  batch whenever they are submitted, leave it as soon as they finish, and the caller steps its
  environments meanwhile (agentrl_core.rollout.continuous).

Cached keys and values are only valid for the weights that computed them. The engine watches
the parameters' version counters (bumped by every in-place update: optimizer steps, weight
loads) and drops the cache when they move; a change in the middle of a generation is an error.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Hashable, Sequence

import torch

from agentrl_core.config import SamplingConfig
from agentrl_core.system.machine_info import available_bytes
from agentrl_core.rollout.generation import Generation
from agentrl_core.rollout.native.forward import PackedForward
from agentrl_core.rollout.native.kv_cache import SlabKVCache
from agentrl_core.rollout.native.prepack import prepack_setting
from agentrl_core.rollout.native.sampler import SamplingParams, sample_rows
from agentrl_core.rollout.native.scheduler import Request, Scheduler
from agentrl_core.rollout.sampling_seeds import make_generator

log = logging.getLogger(__name__)

DEFAULT_KV_CACHE_MB = 2048
"""KV cache budget when none is configured (SmolLM2-135M: ~46 KB per token in fp32, so ~45k tokens)."""


def default_kv_cache_mb(meminfo: str = "/proc/meminfo") -> int:
    """DEFAULT_KV_CACHE_MB, or a quarter of the memory available now if that is less (Linux; else the default)."""
    available = available_bytes(meminfo, cgroup=None)
    if available is None:
        return DEFAULT_KV_CACHE_MB
    return max(64, min(DEFAULT_KV_CACHE_MB, available // 2**20 // 4))


@dataclass
class Finished:
    """A request that completed in a step: its reply, or the error that ended it."""

    rid: int
    key: Hashable | None
    generation: Generation | None
    error: str | None = None


class NativeEngine:
    """Generates from `model` with per-sequence KV caches kept across turns (see the module docstring)."""

    continuous = True
    """The agent loop may drive this engine request by request (submit/step) instead of in lock-step."""

    def __init__(self, model: Any, tokenizer: Any, *, stop_token_ids: Sequence[int] = (), autocast: str = "float32",
                 kv_cache_mb: float | None = None, max_step_tokens: int = 2048, max_batch: int | None = None) -> None:
        prepack_setting()  # a bad $AGENTRL_NATIVE_PREPACK fails here, not later as failed episodes
        self.model, self.autocast = model, autocast
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.stop_ids = frozenset({int(tokenizer.eos_token_id), *map(int, stop_token_ids)})
        cfg = model.config
        heads = cfg.num_attention_heads
        self.cache = SlabKVCache(
            cfg.num_hidden_layers, getattr(cfg, "num_key_value_heads", None) or heads,
            getattr(cfg, "head_dim", None) or cfg.hidden_size // heads, dtype=self._cache_dtype(),
            device=self.device, max_bytes=int((kv_cache_mb or DEFAULT_KV_CACHE_MB) * 2**20))
        self.forward = PackedForward(model, self.cache, autocast)
        self.scheduler = Scheduler(self.cache, max_step_tokens=max_step_tokens, max_running=max_batch)
        self._next_rid = 0
        self._forward_s = 0.0
        self._weights = self._weights_version()

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def max_batch(self) -> int | None:
        """The most requests decoded at once (None: as many as the KV cache holds); the continuous agent loop
        keeps this many episodes open."""
        return self.scheduler.max_running

    def _cache_dtype(self) -> torch.dtype:
        if self.autocast == "bfloat16":
            return torch.bfloat16
        return next(self.model.parameters()).dtype

    # ---- the Engine protocol -------------------------------------------------------------------------

    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig, seed: int) -> list[Generation]:
        """One reply per prompt; prompt i samples with its own generator seeded from (seed, i)."""
        if self.scheduler.running or self.scheduler.waiting:
            raise RuntimeError("generate() was called while continuous requests are in flight")
        rids = [self.submit(p, sampling, generator=make_generator(seed, i, self.device)) for i, p in enumerate(prompts)]
        done: dict[int, Finished] = {}
        while len(done) < len(rids):
            done.update((f.rid, f) for f in self.step())
        errors = [done[r].error for r in rids if done[r].error]
        if errors:
            raise ValueError(errors[0])
        return [done[r].generation for r in rids]

    # ---- the continuous API --------------------------------------------------------------------------

    def submit(self, prompt: Sequence[int], sampling: SamplingConfig, *, key: Hashable | None = None,
               generator: torch.Generator | None = None) -> int:
        """Queue a reply to `prompt` (the whole context); returns its request id. `key` names the
        sequence (e.g. the episode) so `release(key)` can free it when it will not come back."""
        if not prompt:
            raise ValueError("an empty prompt has nothing to continue")
        rid, self._next_rid = self._next_rid, self._next_rid + 1
        params = SamplingParams(sampling.temperature, sampling.top_k, sampling.top_p)
        self.scheduler.waiting.append(Request(rid, list(prompt), params, sampling.max_new_tokens, generator, key))
        return rid

    def has_work(self) -> bool:
        """Whether any submitted request has not finished yet."""
        return bool(self.scheduler.running or self.scheduler.waiting)

    def release(self, key: Hashable) -> None:
        """Free the cached sequence of `key` (an episode that ended)."""
        self.scheduler.drop_idle(key)

    def abort(self) -> None:
        """Forget every request in flight and every cached sequence (after a failed step)."""
        self.scheduler.waiting.clear()
        for req in list(self.scheduler.running):
            self.scheduler.finish(req)
        self.scheduler.drop_idle()

    def sleep(self) -> None:
        """Free the engine's memory while the trainer updates the policy: drop every cached sequence, shrink
        the KV slabs and the weight snapshot; both come back at the next step (after an update the cache
        and snapshot would be stale anyway)."""
        self.invalidate()
        self.cache.clear()
        self.forward.release()

    def invalidate(self) -> None:
        """Drop every cached sequence (e.g. after the weights changed)."""
        if self.scheduler.running:
            raise RuntimeError("cannot drop the KV cache while requests are generating")
        self.scheduler.drop_idle()

    def adopt_weights(self) -> None:
        """Take the model's new weights between two steps *without* draining the batch (an in-flight weight
        update, as in PipelineRL): a request generating goes on with the keys and values its earlier tokens got
        from the older weights; every token sampled from here on uses the new weights, and its log-prob is the
        one it was sampled with, so the trainer's importance weights see exactly the behaviour policy. Idle
        cached sequences (an episode between turns, a finished one kept as a prefix donor) are dropped, so no
        new request starts from the old weights' keys and values: they are prefilled again."""
        self.scheduler.drop_idle()
        self.forward.release()  # a fresh snapshot of the new weights at the next forward
        self._weights = self._weights_version()

    def step(self) -> list[Finished]:
        """Admit what fits, run one packed forward, sample; returns the requests finished by this step."""
        self._check_weights()
        finished = [self._fail(r) for r in self.scheduler.admit()]
        plan = self.scheduler.plan()
        if not plan.segments:
            if self.scheduler.waiting and not self.scheduler.running:
                raise RuntimeError("the KV cache cannot admit any waiting request; raise rollout.engine.kv_cache_mb")
            return finished
        begun = time.perf_counter()
        with torch.no_grad():
            logits = self.forward(plan.segments)
        sampling = self.scheduler.commit(plan)
        tokens, logprobs = sample_rows(logits, [r.params for r in sampling], [r.generator for r in sampling])
        self._forward_s += time.perf_counter() - begun
        for req, tok, lp in zip(sampling, tokens, logprobs):
            req.out_tokens.append(tok)
            req.out_logprobs.append(lp)
            if tok in self.stop_ids or len(req.out_tokens) >= req.max_new_tokens:
                req.finish_reason = "stop" if tok in self.stop_ids else "length"
                self.scheduler.finish(req)
                finished.append(Finished(req.rid, req.key, Generation(req.out_tokens, req.out_logprobs,
                                                                      req.finish_reason)))
        return finished

    def stats(self) -> dict[str, float]:
        """Counters since creation: prefilled, reused and copied prompt tokens, evictions, steps, cache size,
        and the seconds spent in forwards and sampling (`forward_s`: a rollout's time less this is time
        spent waiting on environments and in the agent loop)."""
        out = {k: float(v) for k, v in self.scheduler.stats.items()}
        out["forward_s"] = self._forward_s
        out["kv_cache_mb"] = self.cache.bytes / 2**20
        return out

    @staticmethod
    def _fail(req: Request) -> Finished:
        return Finished(req.rid, req.key, None, req.error)

    def _weights_version(self) -> tuple[int, ...]:
        return tuple(p._version for p in self.model.parameters())

    def _check_weights(self) -> None:
        version = self._weights_version()
        if version == self._weights:
            return
        if any(r.seq is not None for r in self.scheduler.running):
            raise RuntimeError("the model's weights changed while the engine was generating")
        self.scheduler.drop_idle()
        self.forward.release()  # a fresh snapshot at the next forward
        self._weights = version
