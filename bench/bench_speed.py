"""Speed and memory of one GRPO step on the demo model: rollout and training tokens/s, step time, peak RSS.

The work: SmolLM2-135M, 4 prompts x 4 samples x 64 new tokens, KL beta 0.04
(reference model on). Prints a table; --json saves the figures and --baseline compares with a saved run
(e.g. the same script on another commit, or another allocator/precision). --engine picks the rollout
engine (auto = native here), --ppo-epochs and --old-logprobs measure what the engine's log-probs save.

    .venv/bin/python bench/bench_speed.py --steps 3 [--compute-dtype bfloat16] [--engine hf] [--ppo-epochs 2
        --old-logprobs engine] [--json out.json] [--baseline old.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench._common import load_baseline, median, peak_rss_gib, print_table, save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402
from agentrl_core.config import AlgorithmConfig, EngineConfig, OptimConfig, SamplingConfig  # noqa: E402
from agentrl_core.system.machine_info import describe_cpu  # noqa: E402
from agentrl_core.envs import make  # noqa: E402
from agentrl_core.models import load_model, load_tokenizer, resolve_model  # noqa: E402
from agentrl_core.models.chat import ChatFormat  # noqa: E402
from agentrl_core.models.compute_settings import choose_compute_dtype  # noqa: E402
from agentrl_core.rollout import EpisodeSpec, LoopLimits, run_episodes  # noqa: E402
from agentrl_core.rollout.engine_factory import make_engine  # noqa: E402
from agentrl_core.training.optim import build_optimizer  # noqa: E402
from agentrl_core.training.policy_update import UpdateContext, policy_update  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--kl", type=float, default=0.04)
    p.add_argument("--compute-dtype", dest="autocast", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="auto: what model.compute_dtype: auto picks on this machine (as `agentrl run` does)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--gradient-checkpointing", action="store_true", help="recompute activations in backward (less memory)")
    p.add_argument("--engine", default="auto", choices=["auto", "native", "hf"], help="rollout engine")
    p.add_argument("--ppo-epochs", type=int, default=1)
    p.add_argument("--old-logprobs", default="recompute", choices=["recompute", "engine"])
    p.add_argument("--shared-prefix", default="on", choices=["on", "off"],
                   help="run each group's prompt once in the training forward (trainer.shared_prefix)")
    p.add_argument("--json")
    p.add_argument("--baseline")
    return p.parse_args()


def one_step(step: int, args, policy, ref, engine, chat, opt, sched) -> dict[str, float]:
    specs = [EpisodeSpec(task_id=t, group=t, sample=s) for t in range(args.prompts) for s in range(args.samples)]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=args.new_tokens)
    t0 = time.perf_counter()
    policy.eval()
    trajs = run_episodes(engine, chat, lambda: make("countdown"), specs, sampling, LoopLimits(1, 4096), seed=step)
    t1 = time.perf_counter()
    if hasattr(engine, "sleep"):  # as grpo_step does: the engine gives its memory back during the update
        engine.sleep()
    policy.train()
    cfg = AlgorithmConfig(kl_coef=args.kl)
    ctx = UpdateContext(policy, opt, sched, cfg, 1.0, 4096, engine.pad_id, 1.0, ref, args.autocast,
                        old_logprobs=args.old_logprobs, shared_prefix=args.shared_prefix == "on")
    for i, t in enumerate(trajs):  # rewards with spread, so the loss is not trivially zero
        t.reward = t.reward + 0.1 * (i % 3)
    policy_update(ctx, trajs, epochs=args.ppo_epochs)
    t2 = time.perf_counter()
    gen = sum(t.response_tokens for t in trajs)
    total = sum(len(t.token_ids) for t in trajs)
    return {"rollout_s": t1 - t0, "train_s": t2 - t1, "step_s": t2 - t0, "rollout_tokens_per_s": gen / (t1 - t0),
            "train_tokens_per_s": total / (t2 - t1), "tokens_per_step": float(total)}


def main() -> None:
    args = parse()
    torch.set_num_threads(args.threads)
    path = resolve_model(args.model)
    if args.autocast == "auto":
        args.autocast = choose_compute_dtype(path).dtype
    policy, tok = load_model(path), load_tokenizer(path)
    if args.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
    ref = load_model(path).requires_grad_(False) if args.kl > 0 else None
    engine = make_engine(EngineConfig(kind=args.engine), policy, tok, autocast=args.autocast)
    chat = ChatFormat(tok)
    opt, sched = build_optimizer(policy, OptimConfig(lr=1e-6), args.steps)
    runs = [one_step(s, args, policy, ref, engine, chat, opt, sched) for s in range(args.steps)]
    figures = {k: median([r[k] for r in runs]) for k in runs[0]}
    figures["peak_rss_gib"] = peak_rss_gib()
    print(describe_cpu())
    print_table(f"GRPO step, {args.prompts}x{args.samples}x{args.new_tokens} tokens, kl={args.kl}, "
                f"compute_dtype={args.autocast}, engine={type(engine).__name__}, ppo_epochs={args.ppo_epochs}, "
                f"old_logprobs={args.old_logprobs}, shared_prefix={args.shared_prefix} (median of {args.steps})",
                figures, load_baseline(args.baseline))
    save_json(args.json, {"args": vars(args), "figures": figures, "runs": runs,
                          "texts": {"compute_dtype": args.autocast, "engine": type(engine).__name__}})


if __name__ == "__main__":
    run_recorded("speed", main)
