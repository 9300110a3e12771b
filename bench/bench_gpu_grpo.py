"""GPU figure: GRPO steps in bf16 on a random ~0.5B Qwen2.5-shaped model; tokens/s and model-FLOPs utilisation.

Needs only torch and transformers (the GPU machines have no pydantic/Prefect, so nothing from
agentrl_core is imported). One step = rollout (HF `generate`, sampling, every reply exactly
--new-tokens long) + training (forward/backward over the whole rollout batch in micro-batches of
--micro sequences, GRPO loss, grad clip, AdamW). The first step warms up and is not counted.

    peak      = bf16 matmul rate measured on this card: 2·n³ FLOP per n×n @ n×n product, CUDA-event timed
    N         = parameters (tied embedding counted once: the output head is a real matmul)
    MFU_train = 6·N·(training tokens/s) / peak          (forward 2N + backward 4N per token)
    MFU_roll  = 2·N·(generated tokens/s) / peak         (decode is memory-bound: expect it low)
    GRPO loss = -(1/T) Σ_t min(ρ_t A_i, clip(ρ_t, 1-ε, 1+ε) A_i),  ρ_t = exp(logπ - logπ_old),
                A_i = (r_i - mean_group r) / (std_group r + 1e-6), r_i random (the step's cost does
                not depend on the rewards' values)

    python bench/bench_gpu_grpo.py                 # 8 prompts x 8 samples, 256 + 256 tokens
    python bench/bench_gpu_grpo.py --grad-ckpt --micro 32
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch


def add_batch_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The step's shape: tasks, group, prompt and reply lengths, training micro-batch (shared with
    bench_gpu_async.py)."""
    p.add_argument("--prompts", type=int, default=8, help="tasks per step")
    p.add_argument("--group", type=int, default=8, help="samples per prompt (the GRPO group)")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--micro", type=int, default=16, help="sequences per training micro-batch")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = add_batch_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    p.add_argument("--steps", type=int, default=4, help="GRPO steps, the first one a warm-up")
    p.add_argument("--matmul-n", type=int, default=8192)
    p.add_argument("--grad-ckpt", action="store_true", help="gradient checkpointing in training")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def require_cuda() -> torch.device:
    if not torch.cuda.is_available():
        sys.exit("bench_gpu_grpo.py measures a CUDA GPU and none is visible (torch.cuda.is_available() is False); "
                 "run it on a GPU machine. For CPU figures use bench/ scripts that name the CPU.")
    return torch.device("cuda")


def matmul_peak_tflops(n: int, iters: int = 30) -> float:
    """Best-of-3 bf16 rate of n×n @ n×n on this card, in TFLOP/s (2·n³ FLOP per product)."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    best = 0.0
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            a @ b
        end.record()
        torch.cuda.synchronize()
        best = max(best, 2 * n**3 * iters / (start.elapsed_time(end) / 1e3) / 1e12)
    return best


def build_model(device: torch.device, grad_ckpt: bool) -> torch.nn.Module:
    """Qwen2.5-0.5B's shape (24 layers, d=896, 14 heads / 2 KV heads, MLP 4864, vocab 151936, tied), random."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                      num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=4096,
                      rope_theta=1_000_000.0, tie_word_embeddings=True, use_cache=True)
    cfg._attn_implementation = "sdpa"
    model = Qwen2ForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
    if grad_ckpt:
        model.gradient_checkpointing_enable()
    return model


def rollout(model: torch.nn.Module, prompts: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Sample exactly `new_tokens` per row (min_new_tokens = max_new_tokens); [B, P + R]."""
    model.eval()
    with torch.no_grad():
        return model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                              temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=new_tokens,
                              min_new_tokens=new_tokens, pad_token_id=0)


def group_advantages(rewards: torch.Tensor, group: int) -> torch.Tensor:
    r = rewards.view(-1, group)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)).view(-1)


def response_logprobs(model: torch.nn.Module, seqs: torch.Tensor, resp: int) -> torch.Tensor:
    """log π(y_t | y_<t) of the last `resp` tokens: [b, resp], only the needed logits computed."""
    logits = model(input_ids=seqs, logits_to_keep=resp + 1).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, seqs[:, -resp:, None]).squeeze(-1)


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, seqs: torch.Tensor, adv: torch.Tensor,
               resp: int, micro: int, eps: float = 0.2) -> float:
    """Accumulate the GRPO loss over micro-batches (normalised by the whole batch), clip, AdamW; the loss."""
    model.train()
    total = 0.0
    for start in range(0, seqs.shape[0], micro):
        logp = response_logprobs(model, seqs[start:start + micro], resp)
        ratio = torch.exp(logp - logp.detach())
        a = adv[start:start + micro, None]
        obj = torch.minimum(ratio * a, ratio.clamp(1 - eps, 1 + eps) * a)
        loss = -obj.sum() / (seqs.shape[0] * resp)
        loss.backward()
        total += float(loss.detach())
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return total


def timed(fn, *args):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn(*args)
    torch.cuda.synchronize()
    return out, time.perf_counter() - t


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    device = require_cuda()
    torch.manual_seed(args.seed)
    peak = matmul_peak_tflops(args.matmul_n)
    model = build_model(device, args.grad_ckpt)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=True)
    batch = args.prompts * args.group
    rows = []
    for step in range(args.steps):
        prompts = torch.randint(1, 151936, (args.prompts, args.prompt_len), device=device)
        prompts = prompts.repeat_interleave(args.group, dim=0)
        seqs, t_roll = timed(rollout, model, prompts, args.new_tokens)
        adv = group_advantages(torch.rand(batch, device=device), args.group)
        loss, t_train = timed(train_step, model, opt, seqs, adv, args.new_tokens, args.micro)
        rows.append({"step": step, "rollout_s": t_roll, "train_s": t_train, "loss": loss})
        print(json.dumps(rows[-1]), flush=True)
    measured = rows[1:] or rows
    t_roll = statistics.median(r["rollout_s"] for r in measured)
    t_train = statistics.median(r["train_s"] for r in measured)
    roll_tps = batch * args.new_tokens / t_roll
    train_tps = batch * (args.prompt_len + args.new_tokens) / t_train
    result = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "params": n_params,
        "batch_sequences": batch, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
        "micro": args.micro, "grad_ckpt": args.grad_ckpt, "matmul_peak_tflops": round(peak, 1),
        "rollout_tokens_per_s": round(roll_tps, 1), "train_tokens_per_s": round(train_tps, 1),
        "mfu_train": round(6 * n_params * train_tps / (peak * 1e12), 4),
        "mfu_rollout": round(2 * n_params * roll_tps / (peak * 1e12), 4),
        "step_s_median": round(t_roll + t_train, 3), "rollout_share": round(t_roll / (t_roll + t_train), 3),
        "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
    }
    print("RESULT " + json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
