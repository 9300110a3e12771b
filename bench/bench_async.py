"""Synchronous vs asynchronous GRPO on Ray, side by side in one run: steps per hour and held-out success.

Each mode — `sync` (distributed.max_policy_lag unset) and `async-k` for each of `--lags` — runs `--steps`
GRPO steps on a local Ray with one trainer worker and `--rollout-workers` rollout workers, one CPU each
(rollout and training on separate cores), from the same start (`--start`, a model folder such as an SFT
export; else the recipe's SFT stage, trained once) with the same seed, and with truncated importance
sampling on in every mode (`algorithm.tis_cap`), so the modes differ only in their schedule. Then each
trained model plays the same `--test-tasks` held-out test tasks greedily, once, beside the start.

Prints per mode: the RL stage's wall minutes (Ray's start included), steps per hour in the steady state
(steps 2..n by the wall clock they were logged at; and the ratio to sync), medians of the rollout,
update and step seconds and of the seconds each side waited, the largest lag of any sample, the training
reward, and the test success with its 95% interval and its paired difference to sync and to the start
(held-out success per wall-minute: that difference over the mode's minutes).

    .venv/bin/python bench/bench_async.py [--recipe household_learn] [--start MODEL] [--steps 6] [--lags 1 2]
        [--test-tasks 100] [--root runs/bench-async] [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentrl.allocator import reexec_script_with_tuned_malloc  # noqa: E402
from bench._common import print_table, save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402
from agentrl_core.checkpoints import export_hf  # noqa: E402
from agentrl_core.env_service import EnvClient, launch_server  # noqa: E402
from agentrl_core.evaluation.runner import evaluate_model  # noqa: E402
from agentrl_core.evaluation.stats import compare  # noqa: E402
from agentrl_core.system.machine_info import describe_cpu  # noqa: E402
from agentrl_core.models import resolve_model  # noqa: E402
from agentrl_core.models.compute_settings import resolve_compute_settings  # noqa: E402
from agentrl_core.recipes import load_recipe  # noqa: E402
from agentrl_core.tasksets import resolve_task_ids  # noqa: E402
from agentrl_core.grpo import train_grpo  # noqa: E402
from agentrl_core.training.metrics_log import read_metrics  # noqa: E402
from agentrl_core.training.sft import train_sft  # noqa: E402

MEDIANS = ("time/rollout_s", "time/train_s", "time/step_s", "time/trainer_wait_s", "time/rollout_wait_s")
"""Per-step metrics shown as medians over a mode's steps (the wait times exist in the async modes only)."""


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", default="household_learn")
    p.add_argument("--start", help="the model every mode starts from (default: the recipe's SFT stage, once)")
    p.add_argument("--steps", type=int, default=6, help="GRPO steps of every mode (at least 3)")
    p.add_argument("--lags", type=int, nargs="+", default=[1, 2], help="max_policy_lag of each async mode")
    p.add_argument("--rollout-workers", type=int, default=1)
    p.add_argument("--tis-cap", type=float, default=2.0, help="algorithm.tis_cap, in every mode")
    p.add_argument("--kv-cache-mb", type=int, default=1024,
                   help="each rollout worker's KV cache (rollout.engine.kv_cache_mb): trainer, workers and this "
                        "driver share the machine's memory")
    p.add_argument("--test-tasks", type=int, default=100)
    p.add_argument("--root", default="runs/bench-async")
    p.add_argument("--json")
    p.add_argument("overrides", nargs="*")
    return p.parse_args()


def modes(lags: list[int]) -> dict[str, list[str]]:
    """Mode name -> its overrides: the synchronous loop, then one asynchronous mode per lag bound."""
    return {"sync": [], **{f"async-{k}": [f"distributed.max_policy_lag={k}"] for k in lags}}


def mode_figures(name: str, stage: Path, minutes: float) -> dict[str, float]:
    """Wall minutes (the stage's, Ray's start included), steps per hour in the steady state (steps 2..n, from
    the wall clock each step was logged at: the same point of both loops, weight syncs and waits included),
    medians of MEDIANS, the largest lag, the mean training reward."""
    rows = [r for r in read_metrics(stage / "metrics.jsonl") if "reward_mean" in r]
    rate = 3600 * (len(rows) - 1) / (rows[-1]["time"] - rows[0]["time"])
    out = {f"{name} minutes": minutes, f"{name} steps_per_hour": rate,
           f"{name} reward_mean": statistics.fmean(r["reward_mean"] for r in rows)}
    for key in MEDIANS:
        values = [r[key] for r in rows if key in r]
        if values:
            out[f"{name} {key} (median)"] = statistics.median(values)
    lags = [r["lag/max"] for r in rows if "lag/max" in r]
    if lags:
        out[f"{name} lag/max"] = max(lags)
    return out


def main() -> None:
    args = parse()
    if args.steps < 3:
        raise SystemExit("--steps must be at least 3: the steady-state rate is taken over steps 2..n")
    common = [*args.overrides, f"run.root={args.root}", f"env.test_tasks={args.test_tasks}",
              "distributed.backend=ray", f"distributed.rollout_workers={args.rollout_workers}",
              "distributed.cpus_per_rollout_worker=1", f"algorithm.tis_cap={args.tis_cap}",
              f"rollout.engine.kv_cache_mb={args.kv_cache_mb}",
              f"trainer.steps={args.steps}", f"trainer.save_every={args.steps}"]
    probe = load_recipe(args.recipe, common)
    base = resolve_model(probe.model.name)
    dtype = resolve_compute_settings(probe, base).model.compute_dtype
    common.append(f"model.compute_dtype={dtype}")
    figures: dict[str, float] = {}
    tests = {}
    with launch_server([probe.env.name], env_kwargs={probe.env.name: probe.env.kwargs}) as server:
        start = Path(args.start) if args.start else sft_start(args, common, base, server.url)
        with EnvClient(server.url) as client:
            test_ids = resolve_task_ids(probe.env, client, "test")
        tests["start"] = play(probe, start, test_ids, server.url, Path(args.root) / "eval" / "start")
        for name, extra in modes(args.lags).items():
            cfg = load_recipe(args.recipe, [*common, f"run.name={name}", *extra])
            began = time.time()
            ckpt = train_grpo(cfg, init_model=start, env_url=server.url).checkpoint
            minutes = (time.time() - began) / 60
            figures.update(mode_figures(name, cfg.run_dir / "grpo", minutes))
            model = export_hf(Path(ckpt), cfg.run_dir / "export")
            tests[name] = play(cfg, model, test_ids, server.url, Path(args.root) / "eval" / name)
            print(f"{name}: {minutes:.1f} min, test {tests[name].success_text()}", flush=True)
    report(args, figures, tests)


def sft_start(args: argparse.Namespace, common: list[str], base: Path, url: str) -> Path:
    cfg = load_recipe(args.recipe, [*common, "run.name=sft"])
    return export_hf(Path(train_sft(cfg, init_model=base, env_url=url).checkpoint), cfg.run_dir / "sft-export")


def play(cfg, model: Path, ids: list[int], url: str, out: Path):
    """The model's greedy test score, played in a child process: the memory an evaluation takes (which the
    tuned malloc keeps) is gone before the next mode's Ray workers start beside this driver."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_evaluate, cfg, model, ids, url, out).result()


def _evaluate(cfg, model: Path, ids: list[int], url: str, out: Path):
    return evaluate_model(model, env_name=cfg.env.name, env_url=url, cfg=cfg.eval, n_tasks=len(ids), task_ids=ids,
                          max_turns=cfg.env.max_turns, max_context_tokens=cfg.rollout.max_context_tokens,
                          autocast=cfg.model.compute_dtype, engine=cfg.rollout.engine, out_dir=out)


def report(args: argparse.Namespace, figures: dict[str, float], tests: dict) -> None:
    sync_rate = figures["sync steps_per_hour"]
    for name in modes(args.lags):
        if name != "sync":
            figures[f"{name} steps_per_hour vs sync"] = figures[f"{name} steps_per_hour"] / sync_rate
        figures[f"{name} test_success"] = tests[name].success_rate
    comps = [compare(tests[n].task_success, tests["start"].task_success, (n, "start")) for n in modes(args.lags)]
    comps += [compare(tests[n].task_success, tests["sync"].task_success, (n, "sync")) for n in modes(args.lags)
              if n != "sync"]
    for c in comps:
        figures[f"{c.a} - {c.b}"] = c.diff
        if c.b == "start":
            figures[f"{c.a} test gain per wall-minute"] = c.diff / figures[f"{c.a} minutes"]
    print(describe_cpu())
    print_table(f"sync vs async GRPO on Ray: {args.steps} steps per mode, {len(tests['start'].task_success)} "
                f"held-out test tasks", figures)
    for name, summary in tests.items():
        print(f"  {name:>10}: {summary.success_text()}")
    for c in comps:
        print(f"  {c.text()}")
    save_json(args.json or str(Path(args.root) / "bench_async.json"), {
        "args": vars(args), "cpu": describe_cpu(), "figures": figures,
        "tests": {k: v.to_dict() for k, v in tests.items()}, "comparisons": [c.to_dict() for c in comps]})


if __name__ == "__main__":
    reexec_script_with_tuned_malloc()
    run_recorded("async", main)
