"""The vLLM rollout engine: token ids in, token ids and log-probs out, through vLLM's offline `LLM`.

Targets vLLM 0.11 and later (V1 engine): prompts go in as `TokensPrompt(prompt_token_ids=...)`, so
nothing is re-tokenized; `SamplingParams(logprobs=0)` returns the sampled token's log-prob at each
step, and the engine is built with `logprobs_mode="processed_logprobs"`, so that log-prob is
log softmax(z / T)[y], the quantity HFEngine and the trainer compute (vLLM's default,
"raw_logprobs", ignores the temperature). With top-k / top-p on, vLLM's processed log-probs are
those of the truncated, renormalised distribution it sampled from; truncated importance sampling
(algorithm.tis_cap) corrects that gap like any other engine/trainer mismatch.

Colocated with training on one GPU (`enable_sleep_mode=True`): `sleep()` before the policy update
frees the KV cache (level 1 also moves the weights to CPU; level 2 drops them), and
`update_weights(named_weights)` after it wakes the weights, loads the trainer's tensors into vLLM's
model (`model.load_weights` on every worker, through `LLM.collective_rpc`), clears the prefix
cache (its KV entries were computed with the old weights) and wakes the KV cache. With one GPU the
engine core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so the tensors are passed by
reference; with tensor parallelism they are serialised to each worker.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

from agentrl_core.config import EngineConfig, SamplingConfig
from agentrl_core.errors import AgentRLError
from agentrl_core.rollout.generation import Generation

log = logging.getLogger(__name__)

__all__ = ["VLLMEngine", "VLLMEngineError", "VLLMUnavailableError", "request_seed"]

VLLM_TARGET = "0.11"
"""The oldest vLLM whose API this engine is written against (V1 engine, logprobs_mode, sleep tags)."""
SYNC_CHUNK_BYTES = 1 << 30
"""Weight sync sends at most this many bytes of tensors per collective_rpc call."""


class VLLMEngineError(AgentRLError, RuntimeError):
    """vLLM answered something the engine cannot use, or was called in the wrong state."""


class VLLMUnavailableError(AgentRLError, ImportError):
    """rollout.engine.kind=vllm but vLLM is not installed or cannot run here; the message says how to fix it."""


def import_vllm() -> Any:
    """The `vllm` module, or VLLMUnavailableError naming the install command."""
    if importlib.util.find_spec("vllm") is None:
        raise VLLMUnavailableError(
            "rollout.engine.kind=vllm needs vLLM (a CUDA GPU extra), which is not installed; install it with: "
            f"pip install 'agentrl[vllm]' (vLLM >= {VLLM_TARGET}), or use rollout.engine.kind=hf")
    return importlib.import_module("vllm")


def request_seed(seed: int, index: int) -> int:
    """The seed of request `index` of a call: (seed * 1_000_003 + index * 7_919) mod 2**31.

    vLLM seeds each request on its own, so the requests of one GRPO group (same prompt) need
    distinct seeds or they would all sample the same reply; a call's seeds are fixed by `seed`.
    """
    return (seed * 1_000_003 + index * 7_919) % 2**31


def _load_weights_on_worker(worker: Any, weights: list[tuple[str, Any]]) -> int:
    """Runs inside each vLLM worker (via collective_rpc): load HF-named tensors into its model."""
    loaded = worker.model_runner.model.load_weights(weights=weights)
    return len(loaded) if loaded is not None else len(weights)


class VLLMEngine:
    """Samples with a vLLM `LLM` over token-id prompts; the `Engine` protocol plus sleep/wake and weight sync."""

    def __init__(self, model_path: str, tokenizer: Any, cfg: EngineConfig, *, dtype: str = "bfloat16",
                 seed: int = 0, stop_token_ids: Sequence[int] = ()) -> None:
        vllm = import_vllm()
        self._vllm, self.cfg = vllm, cfg
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.stop_ids = sorted({int(tokenizer.eos_token_id), *map(int, stop_token_ids)})
        self.max_batch = cfg.max_batch
        self.sleeping: int | None = None
        """The level the engine sleeps at, or None when awake."""
        if cfg.sleep_when_training and cfg.tensor_parallel_size == 1:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # weights passed by reference
        kwargs: dict[str, Any] = {
            "model": str(model_path), "dtype": dtype, "seed": seed, "tensor_parallel_size": cfg.tensor_parallel_size,
            "gpu_memory_utilization": cfg.gpu_memory_utilization, "enable_sleep_mode": cfg.sleep_when_training,
            "enforce_eager": cfg.enforce_eager, "logprobs_mode": "processed_logprobs",
        }
        if cfg.max_model_len is not None:
            kwargs["max_model_len"] = cfg.max_model_len
        self.llm = vllm.LLM(**kwargs)

    # -- generation ------------------------------------------------------------------------------
    def sampling_params(self, sampling: SamplingConfig, seed: int) -> Any:
        """SamplingParams of one request: T = 0 is greedy; top_k 0 = off; stop at EOS / end-of-turn ids."""
        return self._vllm.SamplingParams(
            n=1, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
            max_tokens=sampling.max_new_tokens, seed=seed, logprobs=0, stop_token_ids=list(self.stop_ids),
            detokenize=False)

    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig, seed: int) -> list[Generation]:
        """One reply per prompt, in order; request i of chunk c uses request_seed(seed + c, i)."""
        if self.sleeping is not None:
            raise VLLMEngineError(f"the vLLM engine sleeps (level {self.sleeping}); call update_weights() or "
                                  "wake_up() before generating")
        size = self.max_batch or max(1, len(prompts))
        out: list[Generation] = []
        for c, start in enumerate(range(0, len(prompts), size)):
            out.extend(self._generate_chunk(prompts[start:start + size], sampling, seed + c))
        return out

    def _generate_chunk(self, prompts: Sequence[list[int]], sampling: SamplingConfig, seed: int) -> list[Generation]:
        from vllm.inputs import TokensPrompt

        inputs = [TokensPrompt(prompt_token_ids=[int(t) for t in p]) for p in prompts]
        params = [self.sampling_params(sampling, request_seed(seed, i)) for i in range(len(prompts))]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        if len(outputs) != len(prompts):
            raise VLLMEngineError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
        return [self._generation(o) for o in outputs]

    def _generation(self, output: Any) -> Generation:
        """The first completion of a RequestOutput: ids, each sampled id's log-prob, why it stopped."""
        completion = output.outputs[0]
        ids = [int(t) for t in completion.token_ids]
        if completion.logprobs is None or len(completion.logprobs) != len(ids):
            n = "no" if completion.logprobs is None else len(completion.logprobs)
            raise VLLMEngineError(f"vLLM returned {len(ids)} tokens but {n} log-prob entries (request logprobs=0)")
        logprobs = []
        for t, (tok, step) in enumerate(zip(ids, completion.logprobs)):
            if tok not in step:
                raise VLLMEngineError(f"vLLM's log-probs at position {t} do not include the sampled token {tok}")
            logprobs.append(float(step[tok].logprob))
        return Generation(ids, logprobs, self._finish(completion.finish_reason, ids))

    def _finish(self, reason: str | None, ids: list[int]) -> str:
        if reason == "length":
            return "length"
        if reason == "stop" and ids and ids[-1] in self.stop_ids:
            return "stop"
        raise VLLMEngineError(f"vLLM finished a request with reason {reason!r} (last token "
                              f"{ids[-1] if ids else None}); expected 'length' or a stop token in {self.stop_ids}")

    # -- colocation: sleep, wake, weight sync ------------------------------------------------------
    def sleep(self, level: int | None = None) -> None:
        """Free the GPU for training: level 1 offloads weights to CPU and drops the KV cache, 2 drops both."""
        if not self.cfg.sleep_when_training:
            raise VLLMEngineError("this engine was built without sleep mode (rollout.engine.sleep_when_training=false)")
        if self.sleeping is not None:
            return
        level = self.cfg.sleep_level if level is None else level
        self.llm.sleep(level=level)
        self.sleeping = level

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Reallocate `tags` ("weights", "kv_cache"; None = both); awake once the KV cache is back."""
        if self.sleeping is None:
            return
        self.llm.wake_up(tags=list(tags) if tags is not None else None)
        if tags is None or "kv_cache" in tags:
            self.sleeping = None

    def update_weights(self, named_weights: Iterable[tuple[str, Any]]) -> int:
        """Load the trainer's (HF-named, full) tensors into vLLM; returns how many tensors were sent.

        Order: wake the weights (if asleep), load in chunks of <= SYNC_CHUNK_BYTES, reset the prefix
        cache, wake the KV cache. After a level-2 sleep every weight must be sent (vLLM forgot them).
        """
        asleep = self.sleeping is not None
        if asleep:
            self.wake_up(tags=["weights"])
        sent = 0
        for chunk in _chunks(named_weights, SYNC_CHUNK_BYTES):
            self.llm.collective_rpc(_load_weights_on_worker, args=(chunk,))
            sent += len(chunk)
        if sent == 0:
            raise VLLMEngineError("update_weights got no tensors to load")
        self.llm.reset_prefix_cache()
        if asleep:
            self.wake_up(tags=["kv_cache"])
        return sent


def _chunks(named: Iterable[tuple[str, Any]], max_bytes: int) -> Iterable[list[tuple[str, Any]]]:
    """Group (name, tensor) pairs into lists of at most `max_bytes` (a bigger tensor goes alone)."""
    chunk: list[tuple[str, Any]] = []
    size = 0
    for name, tensor in named:
        nbytes = tensor.numel() * tensor.element_size()
        if chunk and size + nbytes > max_bytes:
            yield chunk
            chunk, size = [], 0
        chunk.append((name, tensor))
        size += nbytes
    if chunk:
        yield chunk
