"""The Hugging Face transformers rollout engine: batched sampling over token ids, with log-probs."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from agentrl_core.config import SamplingConfig
from agentrl_core.models import mixed_precision
from agentrl_core.rollout.generation import Generation


class HFEngine:
    """Samples with `model.generate` on left-padded batches.

    Log-probs are log softmax(logits / T) of the sampled token from the raw logits (T = 1 when
    greedy), the same quantity the trainer computes, so their ratio is 1 up to numerics.
    """

    def __init__(self, model: Any, tokenizer: Any, *, stop_token_ids: Sequence[int] = (), max_batch: int = 32,
                 autocast: str = "float32") -> None:
        self.model = model
        self.autocast = autocast
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.stop_ids = sorted({int(tokenizer.eos_token_id), *map(int, stop_token_ids)})
        self.max_batch = max_batch

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig, seed: int) -> list[Generation]:
        """Sample one reply per prompt, in chunks of `max_batch`; chunk c uses seed + c."""
        out: list[Generation] = []
        for c, start in enumerate(range(0, len(prompts), self.max_batch)):
            out.extend(self._generate_chunk(prompts[start:start + self.max_batch], sampling, seed + c))
        return out

    def _left_pad(self, prompts: Sequence[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        return ids.to(self.device), mask.to(self.device)

    def _sampling_kwargs(self, sampling: SamplingConfig) -> dict[str, Any]:
        if sampling.temperature <= 0:
            return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
        return {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p,
                "top_k": sampling.top_k or None}

    @torch.no_grad()
    def _generate_chunk(self, prompts: Sequence[list[int]], sampling: SamplingConfig, seed: int) -> list[Generation]:
        ids, mask = self._left_pad(prompts)
        torch.manual_seed(seed)
        with mixed_precision.autocast(self.model, self.autocast):
            out = self._sample(ids, mask, sampling)
        new = out.sequences[:, ids.shape[1]:]
        temperature = sampling.temperature if sampling.temperature > 0 else 1.0
        logprobs = _chosen_logprobs(out.logits, new, temperature)
        return [self._trim(new[i].tolist(), logprobs[i].tolist()) for i in range(len(prompts))]

    def _sample(self, ids: torch.Tensor, mask: torch.Tensor, sampling: SamplingConfig) -> Any:
        return self.model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=sampling.max_new_tokens,
            eos_token_id=self.stop_ids, pad_token_id=self.pad_id, output_logits=True,
            return_dict_in_generate=True, **self._sampling_kwargs(sampling),
        )

    def _trim(self, tokens: list[int], logprobs: list[float]) -> Generation:
        """Cut a reply after its first stop token (the rest is padding)."""
        for j, tok in enumerate(tokens):
            if tok in self.stop_ids:
                return Generation(tokens[:j + 1], logprobs[:j + 1], "stop")
        return Generation(tokens, logprobs, "length")


def _chosen_logprobs(step_logits: Sequence[torch.Tensor], new: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(z_t / T)[y_t] for each generated position t: [B, steps]."""
    cols = []
    for t, logits in enumerate(step_logits):
        logp = torch.log_softmax(logits.float() / temperature, dim=-1)
        cols.append(logp.gather(-1, new[:, t:t + 1]))
    return torch.cat(cols, dim=1) if cols else torch.zeros((new.shape[0], 0))
