"""Our GRPO step against TRL's GRPOTrainer on the same work, in one run, side by side.

The work: SmolLM2-135M-Instruct in fp32, 4 countdown prompts x 4 generations x
64 new tokens, temperature 1, KL beta 0.04 (reference model on), lr 1e-6, 2 threads. The reward is
countdown's (1 solved, 0.1 well-formed, else 0) plus 0.1·(i mod 3) for sample i, as
bench_speed.py does, so advantages are never all zero. Each trainer runs in its own subprocess
(so peak RSS is its own) with the same environment variables (allocator settings included).

Prints time per step (median over steps after the first), tokens/s and peak RSS for both, and
the ratios. Needs `pip install 'trl==1.16.*'` (not a dependency of agentrl).

    .venv/bin/python bench/bench_trl.py [--steps 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import median, peak_rss_gib, print_table, save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402

PROMPTS, GENERATIONS, NEW_TOKENS, BETA, LR = 4, 4, 64, 0.04, 1e-6


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=3, help="optimizer steps per trainer (the first is warm-up)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--gradient-checkpointing", choices=["on", "off"], default="on",
                   help="for both trainers (TRL 1.16 turns it on by default)")
    p.add_argument("--ours-gradient-checkpointing", choices=["on", "off"], default=None,
                   help="ours only (default: --gradient-checkpointing); each side's best is a separate run")
    p.add_argument("--trl-gradient-checkpointing", choices=["on", "off"], default=None,
                   help="TRL only (default: --gradient-checkpointing)")
    p.add_argument("--compute-dtype", choices=["float32", "bfloat16"], default="float32",
                   help="bfloat16: our bf16 autocast and TRL's bf16=True (its CPU autocast), fp32 weights on both")
    p.add_argument("--json", default=None)
    p.add_argument("--only", choices=["ours", "trl"], default=None, help=argparse.SUPPRESS)  # child mode
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    return p.parse_args()


# -- TRL (child process) -----------------------------------------------------------------------------
def countdown_rows(n_prompts: int, steps: int) -> list[dict]:
    """The prompts as TRL's conversational dataset rows: the env's system prompt and first observation."""
    from agentrl_core.envs import make

    env, rows = make("countdown"), []
    for t in range(n_prompts * steps):
        obs, _ = env.reset(task_id=t % n_prompts)
        rows.append({"prompt": [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": obs}],
                     "task_id": t % n_prompts})
    return rows


def countdown_reward(completions: list, task_id: list[int], **_: object) -> list[float]:
    """Countdown's reward for a single reply, plus the same 0.1·(i mod 3) spread as bench_speed."""
    from agentrl_core.envs.countdown import FORMAT_REWARD, judge, make_problem

    out = []
    for i, (completion, tid) in enumerate(zip(completions, task_id)):
        text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
        verdict = judge(text, make_problem(int(tid)))
        base = 1.0 if verdict.solved else FORMAT_REWARD if verdict.well_formed else 0.0
        out.append(base + 0.1 * (i % 3))
    return out


def run_trl(steps: int, threads: int, checkpointing: bool, bf16: bool = False) -> dict:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from agentrl_core.models import resolve_model

    torch.set_num_threads(threads)
    times: list[float] = []
    tokens: list[int] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001, ANN003
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001, ANN003
            times.append(time.perf_counter() - self.t0)

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001, ANN003
            if logs and "num_tokens" in logs:
                tokens.append(int(logs["num_tokens"]))

    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(
            output_dir=out, per_device_train_batch_size=PROMPTS * GENERATIONS, num_generations=GENERATIONS,
            generation_batch_size=PROMPTS * GENERATIONS, max_completion_length=NEW_TOKENS, temperature=1.0,
            beta=BETA, learning_rate=LR, max_steps=steps, use_cpu=True, bf16=bf16, logging_steps=1,
            report_to="none", save_strategy="no", shuffle_dataset=False, seed=0,
            gradient_checkpointing=checkpointing,
        )
        trainer = GRPOTrainer(
            model=str(resolve_model("smollm2-135m-instruct")), reward_funcs=countdown_reward, args=cfg,
            train_dataset=Dataset.from_list(countdown_rows(PROMPTS, steps)), callbacks=[StepTimer()],
        )
        trainer.train()
    per_step_tokens = [b - a for a, b in zip([0, *tokens], tokens)] if tokens else []
    return {"step_times": times, "tokens_per_step": per_step_tokens, "peak_rss_gib": peak_rss_gib()}


# -- ours (child process): the same step bench_speed.py times --------------------------------------
def run_ours(steps: int, threads: int, checkpointing: bool, bf16: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ours.json"
        cmd = [sys.executable, str(ROOT / "bench" / "bench_speed.py"), "--no-record", "--steps", str(steps),
               "--threads", str(threads), "--prompts", str(PROMPTS), "--samples", str(GENERATIONS), "--new-tokens", str(NEW_TOKENS),
               "--kl", str(BETA), "--json", str(out), "--compute-dtype", "bfloat16" if bf16 else "float32"]
        cmd += ["--gradient-checkpointing"] if checkpointing else []
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        data = json.loads(out.read_text())
    runs = data["runs"]
    return {"step_times": [r["step_s"] for r in runs], "tokens_per_step": [int(r["tokens_per_step"]) for r in runs],
            "peak_rss_gib": data["figures"]["peak_rss_gib"]}


def _checkpointing(args: argparse.Namespace, side: str) -> bool:
    own = getattr(args, f"{side}_gradient_checkpointing")
    return (own or args.gradient_checkpointing) == "on"


def child(args: argparse.Namespace) -> int:
    bf16 = args.compute_dtype == "bfloat16"
    gc = _checkpointing(args, args.only)
    result = run_trl(args.steps, args.threads, gc, bf16) if args.only == "trl" else \
        run_ours(args.steps, args.threads, gc, bf16)
    Path(args.out).write_text(json.dumps(result))
    return 0


def measure(which: str, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{which}.json"
        gc = "on" if _checkpointing(args, which) else "off"
        subprocess.run([sys.executable, __file__, "--no-record", "--only", which, "--out", str(out), "--steps", str(args.steps),
                        "--threads", str(args.threads), "--gradient-checkpointing", gc,
                        "--compute-dtype", args.compute_dtype], check=True, env=dict(os.environ))
        return json.loads(out.read_text())


def summarise(result: dict) -> dict[str, float]:
    steady = result["step_times"][1:] or result["step_times"]
    toks = result["tokens_per_step"][1:] or result["tokens_per_step"]
    step_s = median(steady)
    return {"step_s": step_s, "tokens_per_s": median([float(t) for t in toks]) / step_s if toks else float("nan"),
            "peak_rss_gib": float(result["peak_rss_gib"])}


def main() -> int:
    args = parse()
    if args.only:
        return child(args)
    ours, trl = summarise(measure("ours", args)), summarise(measure("trl", args))
    figures = {f"ours_{k}": v for k, v in ours.items()} | {f"trl_{k}": v for k, v in trl.items()}
    # the two trainers sample different completions (lengths differ), so the speed-up is per token, not per step
    figures["speedup_tokens_per_s"] = ours["tokens_per_s"] / trl["tokens_per_s"]
    figures["memory_ratio_ours_over_trl"] = ours["peak_rss_gib"] / trl["peak_rss_gib"]
    gc = {side: "on" if _checkpointing(args, side) else "off" for side in ("ours", "trl")}
    print_table(f"GRPO step: agentrl vs TRL, {PROMPTS}x{GENERATIONS}x{NEW_TOKENS} tokens, beta={BETA}, "
                f"{args.threads} threads, {args.compute_dtype}, gradient checkpointing ours {gc['ours']} / "
                f"TRL {gc['trl']} (median after the first step)", figures)
    save_json(args.json, {"args": vars(args), "figures": figures})
    return 0


if __name__ == "__main__":
    sys.exit(run_recorded("trl", main))
