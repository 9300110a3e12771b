"""GPU figure: asynchronous GRPO in one process against the synchronous loop; steps per hour.

The GPU machines have no Ray (and no pydantic), so this runs the asynchronous schedule of
`agentrl_core/distributed/async_loop.py` in one process with torch and transformers only: a rollout
thread samples on its own copy of the policy, on its own CUDA stream, while the main thread trains;
the model, rollout, loss and optimizer are `bench_gpu_grpo.py`'s (random-initialised weights, a
Qwen2.5-0.5B-shaped model; throughput does not depend on the weights).

Schedule (as on Ray). Version v = the weights after v updates; the trainer trains step t's batch at
version t and then offers version t + 1 (a copy of its weights) to the rollout thread. The rollout of
step s starts once the newest version offered, w, has s − w <= k (k = --lags); it takes w between
rollouts (HF `generate` cannot switch weights between decode steps: the lock-step path). A batch's lag
= t − (the version that sampled it) <= k. k = 0 is the synchronous schedule through the same
machinery: the same samples and final weights as `sync` (bit for bit on a CPU; a GPU's
non-deterministic atomics in the backward pass may break the tie there, which the table shows).
Prompts and rewards come from per-step generators, so each mode trains on the same data.

    steps/hour  = 3600 · (n − 1) / (end of the last update − end of the first), the first step a warm-up
    trainer wait = seconds the trainer sat idle for its batch; rollout wait = the rollout thread held back
                   by the lag bound

    python bench/bench_gpu_async.py                       # sync, k = 0, 1, 2; 8 prompts x 8, 256 + 256 tokens
    python bench/bench_gpu_async.py --lags 1 2 --steps 8 --new-tokens 512
    python bench/bench_gpu_async.py --device cpu --tiny   # the schedule on a 2-layer toy model (no GPU)
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import queue
import statistics
import sys
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_gpu_grpo import add_batch_args, build_model, group_advantages, rollout, train_step  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = add_batch_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    p.add_argument("--steps", type=int, default=6, help="GRPO steps per mode, the first one a warm-up (at least 2)")
    p.add_argument("--lags", type=int, nargs="+", default=[0, 1, 2], help="max_policy_lag of each async mode")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--tiny", action="store_true", help="a 2-layer toy model (the schedule's check, not a figure)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-6, help="AdamW's learning rate (bench_gpu_grpo's)")
    p.add_argument("--json", help="also write the result here")
    args = p.parse_args(argv)
    if args.steps < 2:
        p.error(f"--steps must be at least 2 (the first is a warm-up), got {args.steps}")
    if any(k < 0 for k in args.lags):
        p.error(f"--lags must be >= 0, got {args.lags}")
    return args


def device_of(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_gpu_async.py measures a CUDA GPU and none is visible (torch.cuda.is_available() is False); "
                 "run it on a GPU machine, or check the schedule on the CPU with --device cpu --tiny")
    return torch.device(name)


def tiny_model(device: torch.device) -> torch.nn.Module:
    """A 2-layer Qwen2 of width 64 over 512 tokens, fp32: the schedule's check on a CPU."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      tie_word_embeddings=True, use_cache=True)
    return Qwen2ForCausalLM(cfg).to(device)


def new_model(args: argparse.Namespace, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(args.seed)
    return tiny_model(device) if args.tiny else build_model(device, grad_ckpt=False)


def step_data(args: argparse.Namespace, vocab: int, step: int,
              device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s prompts [prompts·group, prompt_len] and rewards, from a generator of its own: every mode
    sees the same data whatever order its threads draw in."""
    gen = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
    prompts = torch.randint(1, vocab, (args.prompts, args.prompt_len), generator=gen)
    rewards = torch.rand(args.prompts * args.group, generator=gen)
    return prompts.repeat_interleave(args.group, dim=0).to(device), rewards.to(device)


def finish(device: torch.device) -> None:
    """Wait for this thread's current stream (never the whole device: the other thread's work goes on)."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


def optimizer(model: torch.nn.Module, args: argparse.Namespace, device: torch.device) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=args.lr, fused=device.type == "cuda")


def fingerprint(*tensors: torch.Tensor) -> str:
    """A hash of the tensors' bytes: equal hashes, bit-identical tensors."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


@dataclass
class Batch:
    step: int
    seqs: torch.Tensor
    version: int  # the weights that sampled it
    rollout_s: float
    waited_s: float  # the rollout thread held back by the lag bound before it began


class RolloutThread(threading.Thread):
    """Samples each step's batch on its own copy of the policy (own CUDA stream), at most `max_lag` versions
    ahead of the trainer; takes the newest offered weights before each rollout."""

    def __init__(self, args: argparse.Namespace, model: torch.nn.Module, device: torch.device, max_lag: int) -> None:
        super().__init__(daemon=True)
        self.args, self.model, self.device, self.max_lag = args, model, device, max_lag
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.cond = threading.Condition()
        self.offered: tuple[int, list[torch.Tensor] | None] = (0, None)  # version 0: the copy's own weights
        self.held = 0
        self.batches: queue.Queue[Batch | BaseException] = queue.Queue()
        self.stopping = False

    def offer(self, version: int, weights: list[torch.Tensor]) -> None:
        """Version `version` (a copy the trainer no longer writes), taken before the next rollout begins."""
        with self.cond:
            self.offered = (version, weights)
            self.cond.notify_all()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.join()

    def take(self) -> Batch:
        """The next batch (the trainer waits here); a failure of the rollout thread is raised here."""
        item = self.batches.get()
        if isinstance(item, BaseException):
            raise RuntimeError("the rollout thread failed") from item
        return item

    def run(self) -> None:
        try:
            idle = time.perf_counter()
            for step in range(self.args.steps):
                with self.cond:
                    self.cond.wait_for(lambda s=step: self.stopping or s - self.offered[0] <= self.max_lag)
                    if self.stopping:
                        return
                    version, weights = self.offered
                began = time.perf_counter()
                with torch.cuda.stream(self.stream) if self.stream is not None else nullcontext():
                    if weights is not None and version != self.held:
                        with torch.no_grad():
                            for p, w in zip(self.model.parameters(), weights):
                                p.copy_(w)
                        self.held = version
                    prompts, _ = step_data(self.args, self.model.config.vocab_size, step, self.device)
                    seqs = rollout(self.model, prompts, self.args.new_tokens)
                    finish(self.device)  # the batch is complete before the trainer reads it; `weights` freed after
                del weights
                self.batches.put(Batch(step, seqs, version, time.perf_counter() - began, began - idle))
                idle = time.perf_counter()
        except BaseException as err:  # the trainer re-raises it in take()
            self.batches.put(err)


def run_sync(args: argparse.Namespace, device: torch.device) -> tuple[list[dict], str]:
    """Rollout, then update, then rollout: one model, one stream. (rows per step, the final weights' hash)"""
    model = new_model(args, device)
    opt, rows = optimizer(model, args, device), []
    for step in range(args.steps):
        began = time.perf_counter()
        prompts, rewards = step_data(args, model.config.vocab_size, step, device)
        seqs = rollout(model, prompts, args.new_tokens)
        finish(device)
        rolled = time.perf_counter()
        loss = train_step(model, opt, seqs, group_advantages(rewards, args.group), args.new_tokens, args.micro)
        finish(device)
        rows.append({"step": step, "rollout_s": rolled - began, "train_s": time.perf_counter() - rolled,
                     "end": time.perf_counter(), "loss": loss, "lag": 0, "trainer_wait_s": rolled - began,
                     "rollout_wait_s": time.perf_counter() - rolled, "samples": fingerprint(seqs)})
    return rows, fingerprint(*model.parameters())


def run_async(args: argparse.Namespace, device: torch.device, max_lag: int) -> tuple[list[dict], str]:
    """The trainer in this thread, the rollout thread `max_lag` versions ahead at most. (rows, weights' hash)"""
    model = new_model(args, device)
    opt, rows = optimizer(model, args, device), []
    roller = RolloutThread(args, copy.deepcopy(model).eval(), device, max_lag)
    roller.start()
    try:
        for step in range(args.steps):
            asked = time.perf_counter()
            batch = roller.take()
            got = time.perf_counter()
            assert batch.step == step and step - batch.version <= max_lag, (batch.step, step, batch.version)
            if device.type == "cuda":
                batch.seqs.record_stream(torch.cuda.current_stream(device))  # made on the rollout thread's stream
            _, rewards = step_data(args, model.config.vocab_size, step, device)
            loss = train_step(model, opt, batch.seqs, group_advantages(rewards, args.group), args.new_tokens,
                              args.micro)
            with torch.no_grad():
                weights = [p.detach().clone() for p in model.parameters()]
            finish(device)  # the copy is complete before the rollout stream reads it
            roller.offer(step + 1, weights)
            rows.append({"step": step, "rollout_s": batch.rollout_s, "train_s": time.perf_counter() - got,
                         "end": time.perf_counter(), "loss": loss, "lag": step - batch.version,
                         "trainer_wait_s": got - asked, "rollout_wait_s": batch.waited_s,
                         "samples": fingerprint(batch.seqs)})
    finally:
        roller.stop()
    return rows, fingerprint(*model.parameters())


def summarise(name: str, rows: list[dict], weights: str, sync: dict | None, device: torch.device) -> dict:
    """The mode's figures; beside `sync`'s (its summary), whether it sampled and trained exactly as it did."""
    measured = rows[1:]
    span = rows[-1]["end"] - rows[0]["end"]
    out = {"mode": name, "steps_per_hour": round(3600 * len(measured) / span, 1),
           "rollout_s": round(statistics.median(r["rollout_s"] for r in measured), 3),
           "train_s": round(statistics.median(r["train_s"] for r in measured), 3),
           "step_s": round(span / len(measured), 3),
           "trainer_wait_s": round(statistics.median(r["trainer_wait_s"] for r in measured), 3),
           "rollout_wait_s": round(statistics.median(r["rollout_wait_s"] for r in measured), 3),
           "lag_max": max(r["lag"] for r in rows), "samples": [r["samples"] for r in rows], "weights": weights}
    if sync is not None:
        out["same_samples_as_sync"] = sum(a == b for a, b in zip(out["samples"], sync["samples"]))
        out["same_weights_as_sync"] = weights == sync["weights"]
    if device.type == "cuda":
        out["peak_mem_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    return out


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    device = device_of(args.device)
    modes = []
    for name in ["sync"] + [f"async-k{k}" for k in args.lags]:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        rows, weights = run_sync(args, device) if name == "sync" else run_async(args, device, int(name.split("-k")[1]))
        modes.append(summarise(name, rows, weights, modes[0] if modes else None, device))
        print(json.dumps({k: v for k, v in modes[-1].items() if k != "samples"}), flush=True)
    sync_rate = modes[0]["steps_per_hour"]
    for m in modes:
        m["vs_sync"] = round(m["steps_per_hour"] / sync_rate, 2)
    result = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "tiny": args.tiny, "batch_sequences": args.prompts * args.group,
              "prompt_len": args.prompt_len, "new_tokens": args.new_tokens, "steps": args.steps, "modes": modes}
    print(f"{'mode':>10} {'steps/h':>9} {'x sync':>7} {'rollout s':>10} {'train s':>8} {'step s':>7} "
          f"{'trainer wait':>12} {'lag max':>7} {'as sync (samples, weights)':>27}")
    for m in modes:
        same = "" if m is modes[0] else f"{m['same_samples_as_sync']}/{args.steps}, {m['same_weights_as_sync']}"
        print(f"{m['mode']:>10} {m['steps_per_hour']:>9} {m['vs_sync']:>7} {m['rollout_s']:>10} {m['train_s']:>8} "
              f"{m['step_s']:>7} {m['trainer_wait_s']:>12} {m['lag_max']:>7} {same:>27}")
    print("RESULT " + json.dumps(result), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
