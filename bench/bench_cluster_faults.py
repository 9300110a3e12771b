"""Faults on a multi-node Ray cluster, soaked: kill -9 a node's raylet mid-run, again and again.

On one machine, `local_cluster` starts a head (no CPUs) and worker nodes, each its own `ray start` with its
own custom resource: one trainer node and two rollout nodes (1 CPU each), with token authentication. Then:

- `--rollout-kills N` cycles: a GRPO run of `--steps` steps (bench/cluster_driver.py, one rollout worker)
  whose rollout node's raylet is SIGKILLed as step `--kill-after` + 1 starts. The run must go on: its
  rollout worker re-placed on the rollout node left, every step done. A fresh rollout node then joins, so
  the next cycle again has two. Figures: cycles that finished every step, the re-placements, and the extra
  seconds of the step the node died in (that step's seconds less the median of the run's other steps).
- `--trainer-kills N` cycles: the same run, the trainer node's raylet killed (after step `--kill-after`, then
  one step later, and so on round the checkpoint interval, so some kills fall between checkpoints). The run
  must stop with a message saying what was lost; a trainer node joins again and the same command resumes
  from the last checkpoint (saved every `--save-every` steps). Figures: steps redone (the steps finished
  before the kill less the step resumed from: at most one checkpoint interval), and every run completed
  after resuming.
- At the end `stop` must leave no process of the cluster alive.

The model is a random 2-layer Llama with the embedded SmolLM2 tokenizer (the soak measures what a fault
costs, not learning). Run by hand, not in CI (the bounded version is tests/distributed/test_local_cluster.py):

    .venv/bin/python bench/bench_cluster_faults.py [--rollout-kills 8] [--trainer-kills 4] [--steps 4]
        [--kill-after 2] [--save-every 2] [--root runs/bench-cluster-faults] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import print_table, save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402
from agentrl_core.distributed import local_cluster as lc  # noqa: E402
from agentrl_core.web.ports import free_port  # noqa: E402
from agentrl_core.system.machine_info import describe_cpu  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "bench" / "cluster_driver.py"


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rollout-kills", type=int, default=8, help="cycles that kill the rollout node")
    p.add_argument("--trainer-kills", type=int, default=4, help="cycles that kill the trainer node")
    p.add_argument("--steps", type=int, default=4, help="GRPO steps of each run")
    p.add_argument("--kill-after", type=int, default=2, help="the raylet dies as the step after this one starts")
    p.add_argument("--save-every", type=int, default=2, help="checkpoint interval of the runs (steps)")
    p.add_argument("--root", default="runs/bench-cluster-faults")
    p.add_argument("--json")
    args = p.parse_args()
    if not 1 <= args.kill_after < args.steps:
        p.error("--kill-after must be at least 1 and less than --steps")
    return args


def tiny_model(out: Path) -> Path:
    """A random 2-layer Llama with the embedded model's tokenizer and chat template (made once)."""
    if (out / "config.json").exists():
        return out
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from agentrl_core.models import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                      tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def drive(model: Path, root: Path, record: lc.ClusterState, steps: int, save_every: int,
          kill: tuple[int, str] | None) -> tuple[int, str, dict | None, float]:
    """One run from a process of its own (as a user's shell runs it): exit code, output, RESULT, seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PYTHONPATH"] = str(ROOT)
    kill_args = [str(kill[0]), kill[1]] if kill else ["0", "rollout"]
    start = time.perf_counter()
    run = subprocess.run([sys.executable, str(DRIVER), str(model), str(root), record.address, record.token_file,
                          str(steps), *kill_args, str(save_every)],
                         env=env, text=True, capture_output=True, timeout=1800, check=False)
    lines = [x for x in run.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(lines[-1][len("RESULT "):]) if lines else None
    return run.returncode, run.stdout + run.stderr, result, time.perf_counter() - start


def rollout_cycle(args: argparse.Namespace, model: Path, state: Path, i: int) -> dict:
    """Kill the rollout node mid-run; the run must finish every step on the node left."""
    record = lc.ClusterState.load(state)
    code, out, result, wall = drive(model, Path(args.root) / f"rollout-{i}", record, args.steps, args.save_every,
                                    (args.kill_after, "rollout"))
    row = {"cycle": i, "exit": code, "wall_s": round(wall, 1), "steps": result["steps"] if result else 0}
    if result:
        nodes = [p["agentrl-rollout"][0][0] for p in result["placements"]]
        row["replaced"] = nodes[-1] != nodes[0]
        step_s = [s for s in result["step_s"] if s is not None]
        hit = step_s[args.kill_after] if len(step_s) > args.kill_after else None
        rest = [s for j, s in enumerate(step_s) if j != args.kill_after]
        row["extra_s"] = round(hit - statistics.median(rest), 1) if hit is not None and rest else None
        row["leaked"] = any(result["leaked"])
    else:
        row["error"] = out[-1500:]
    lc.add(state, [lc.NodeSpec("rollout", 1)])  # the next cycle has two rollout nodes again
    return row


def trainer_cycle(args: argparse.Namespace, model: Path, state: Path, i: int) -> dict:
    """Kill the trainer node mid-run: the run stops saying so, and resumes once a trainer node is back."""
    record = lc.ClusterState.load(state)
    root = Path(args.root) / f"trainer-{i}"
    kill_after = min(args.steps - 1, args.kill_after + i % args.save_every)  # at and between checkpoints
    code, out, _, wall = drive(model, root, record, args.steps, args.save_every, (kill_after, "trainer"))
    said = "FAILED TrainerDied" in out and "start the stage again to resume" in out
    lc.add(state, [lc.NodeSpec("trainer", 1)])
    code2, out2, resumed, wall2 = drive(model, root, lc.ClusterState.load(state), args.steps, args.save_every, None)
    row = {"cycle": i, "killed_after": kill_after, "exit": code, "stopped_saying_so": said,
           "wall_s": round(wall + wall2, 1), "resume_exit": code2, "steps": resumed["steps"] if resumed else 0}
    if resumed:
        row["resumed_from"] = resumed["resumed_from"]
        row["steps_redone"] = kill_after - (resumed["resumed_from"] or 0)
    else:
        row["error"] = (out + out2)[-1500:]
    return row


def figures_of(args: argparse.Namespace, rollout: list[dict], trainer: list[dict], left: int) -> dict[str, float]:
    extras = [r["extra_s"] for r in rollout if r.get("extra_s") is not None]
    redone = [r["steps_redone"] for r in trainer if "steps_redone" in r]
    return {
        "rollout_kills": len(rollout),
        "rollout_runs_completed": sum(r["exit"] == 0 and r["steps"] == args.steps for r in rollout),
        "rollout_workers_replaced": sum(bool(r.get("replaced")) for r in rollout),
        "rollout_kill_extra_s_median": statistics.median(extras) if extras else float("nan"),
        "rollout_kill_extra_s_max": max(extras) if extras else float("nan"),
        "trainer_kills": len(trainer),
        "trainer_stops_saying_so": sum(bool(r["stopped_saying_so"]) for r in trainer),
        "trainer_runs_resumed_and_completed": sum(r["resume_exit"] == 0 and r["steps"] == args.steps for r in trainer),
        "trainer_steps_redone_max": max(redone) if redone else float("nan"),
        "checkpoint_interval_steps": args.save_every,
        "secrets_in_ray_metadata": sum(bool(r.get("leaked")) for r in rollout),
        "processes_left_after_stop": left,
    }


def main() -> int:
    args = parse()
    root = Path(args.root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    args.root = str(root)
    model = tiny_model(root / "tiny-llama")
    state = root / "cluster"
    nodes = [lc.NodeSpec("trainer", 1), lc.NodeSpec("rollout", 1), lc.NodeSpec("rollout", 1)]
    lc.start(state, nodes, port=free_port())
    rollout, trainer = [], []
    try:
        for i in range(args.rollout_kills):
            rollout.append(rollout_cycle(args, model, state, i))
            print(f"rollout kill {i}: {rollout[-1]}", flush=True)
        for i in range(args.trainer_kills):
            trainer.append(trainer_cycle(args, model, state, i))
            print(f"trainer kill {i}: {trainer[-1]}", flush=True)
        groups = [int(n["pid"]) for n in lc.ClusterState.load(state).nodes]
    finally:
        lc.stop(state, grace_s=90)
    left = sum(lc.group_alive(g) for g in groups)
    figures = figures_of(args, rollout, trainer, left)
    print_table(f"faults on a local multi-node Ray cluster: {args.steps} steps per run, the raylet killed after "
                f"step {args.kill_after}", figures)
    save_json(args.json, {"figures": figures, "rollout_cycles": rollout, "trainer_cycles": trainer,
                          "cpu": describe_cpu(), "args": vars(args)})
    ok = figures["rollout_runs_completed"] == len(rollout) and figures["trainer_runs_resumed_and_completed"] == len(
        trainer) and left == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_recorded("cluster_faults", main))
