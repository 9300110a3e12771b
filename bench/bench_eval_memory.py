"""A model scored on a recipe's test tasks, with the machine's memory and the env's worker processes watched.

Starts the recipe's env server (its env kwargs, overrides applied), then `evaluate_model` plays the first
`--tasks` test tasks greedily with `eval.batch_size` episodes open at once, while a thread samples every
second the memory the machine uses (MemTotal − MemAvailable, /proc/meminfo) and the env server's worker
processes. Prints the success with its 95% interval, the wall minutes, and the peaks: machine memory above
what it used before the server started, and worker processes (ALFWorld runs one per open session, ~70-100 MB
each).

    .venv/bin/python bench/bench_eval_memory.py --recipe alfworld_grpo --model runs/x/export [--tasks 200]
        [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import print_table, save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402
from agentrl_core.env_service import launch_server  # noqa: E402
from agentrl_core.evaluation.runner import evaluate_model  # noqa: E402
from agentrl_core.system.machine_info import describe_cpu  # noqa: E402
from agentrl_core.models.compute_settings import resolve_compute_settings  # noqa: E402
from agentrl_core.recipes import load_recipe  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", default="alfworld_grpo")
    p.add_argument("--model", required=True, help="a model folder (e.g. an SFT stage's export)")
    p.add_argument("--tasks", type=int, default=200, help="test tasks, each played once")
    p.add_argument("--json")
    p.add_argument("overrides", nargs="*")
    return p.parse_args()


def used_bytes() -> int:
    """MemTotal − MemAvailable: what the machine uses now."""
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return (int(fields["MemTotal"].split()[0]) - int(fields["MemAvailable"].split()[0])) * 1024


def children(pid: int) -> int:
    """Processes whose parent is `pid` (the env server's workers)."""
    count = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                count += 1
        except (OSError, IndexError, ValueError):
            continue
    return count


class Watch(threading.Thread):
    """Samples the machine's used memory and the server's workers every second until stopped; keeps the peaks."""

    def __init__(self, server_pid: int) -> None:
        super().__init__(daemon=True)
        self.server_pid, self.peak_used, self.peak_workers = server_pid, 0, 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(1.0):
            self.peak_used = max(self.peak_used, used_bytes())
            self.peak_workers = max(self.peak_workers, children(self.server_pid))


def main() -> None:
    args = parse()
    cfg = load_recipe(args.recipe, [*args.overrides, f"env.test_tasks={args.tasks}"])
    cfg = resolve_compute_settings(cfg, Path(args.model))
    before = used_bytes()
    began = time.time()
    with launch_server([cfg.env.name], env_kwargs={cfg.env.name: cfg.env.kwargs}) as server:
        watch = Watch(server.pid)
        watch.start()
        try:
            summary = evaluate_model(args.model, env_name=cfg.env.name, env_url=server.url, cfg=cfg.eval,
                                     n_tasks=args.tasks, max_turns=cfg.env.max_turns,
                                     max_context_tokens=cfg.rollout.max_context_tokens,
                                     autocast=cfg.model.compute_dtype, engine=cfg.rollout.engine)
        finally:
            watch.stopped.set()
            watch.join()
    figures = {"success": summary.success_rate, "success_low": summary.success_low,
               "success_high": summary.success_high, "episodes_failed_by_env": float(summary.n_errors),
               "episodes_open_at_once (eval.batch_size)": float(cfg.eval.batch_size),
               "peak_env_workers": float(watch.peak_workers),
               "peak_machine_memory_above_start_gib": (watch.peak_used - before) / 2**30,
               "minutes": (time.time() - began) / 60}
    print(describe_cpu())
    print(f"{args.model}: {summary.success_text()} on {cfg.env.name}'s first {args.tasks} test tasks")
    print_table(f"{cfg.env.name}: {args.tasks} test tasks, greedy", figures)
    save_json(args.json or "runs/bench-eval-memory.json",
              {"args": vars(args), "cpu": describe_cpu(), "figures": figures, "summary": summary.to_dict()})


if __name__ == "__main__":
    run_recorded("eval_memory", main)
