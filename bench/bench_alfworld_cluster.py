"""train-alfworld on a multi-node Ray cluster, from the CLI and from its Prefect deployment, a rollout node killed.

On one machine `local_cluster` starts a head (no CPUs) and three worker nodes, each its own `ray start` with
token authentication: one `trainer` node and two `rollout` nodes (1 CPU each). Then, each arm the ALFWorld
recipe with the experience pool (`alfworld_grpo_expool`: SFT warm start, GRPO with the pool, evaluation of
base / SFT / GRPO), shrunk to `--steps` GRPO steps of 2 games x 2 samples so it runs in minutes on a CPU,
placed on the cluster (`distributed.backend=ray`, the trainer and the rollout worker by their nodes' custom
resources, the token from its file):

- `cli`: `agentrl run alfworld_grpo_expool <cluster overrides>`; as step `--kill-after` is logged, the raylet
  of the node that holds the rollout worker is SIGKILLed (kill -9). The run must go on: its rollout worker
  re-placed on the rollout node left, every step done, the run record completed. A fresh rollout node joins
  after the run;
- `deployment`: a Prefect server on 127.0.0.1, the `local` process pool, `prefect deploy --all` and a worker,
  then `prefect deployment run train/train-alfworld-cluster --params '{"overrides": [...]}' --watch`.

Printed per arm: the stages, the GRPO steps done, where each placement group's bundle ran (node and its
custom resource), the rollout retries, the experience pool's size, the evaluation's success of base, SFT and
GRPO (n = `env.test_tasks`; not a learning claim: 3 steps), and the wall minutes. Run by hand, not in CI
(tests/distributed/test_ray_features.py runs the pool on Ray, tests/distributed/test_local_cluster.py the
cluster and its faults):

    .venv/bin/python bench/bench_alfworld_cluster.py [--steps 3] [--kill-after 1] [--arms cli deployment]
        [--root runs/bench-alfworld-cluster] [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentrl.prefect_server import wait_healthy  # noqa: E402
from bench.cluster_driver import kill_raylet, placement  # noqa: E402
from bench.recording import current, run_recorded  # noqa: E402
from agentrl_core.distributed import local_cluster as lc  # noqa: E402
from agentrl_core.web.server_process import stop_process  # noqa: E402
from agentrl_core.store import open_registry  # noqa: E402
from agentrl_core.system.machine_info import describe_cpu  # noqa: E402
from agentrl_core.training.metrics_log import read_metrics  # noqa: E402
from agentrl_core.web.ports import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NODES = [lc.NodeSpec("trainer", 1), lc.NodeSpec("rollout", 1), lc.NodeSpec("rollout", 1)]
SHRINK = ["env.train_ids=0-1,6-7", "env.test_tasks=4", "env.max_turns=6", "sft.demos=4", "sft.epochs=1",
          "sft.batch_size=2", "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.sampling.max_new_tokens=16",
          "eval.sampling.max_new_tokens=16", "trainer.save_every=1", "experience.summarise_failures=true"]
"""Games 0, 1, 6 and 7 the expert wins in 4 steps (SFT demos that fit 6 turns); everything else small. Failed
episodes are summarised into lessons too: a few minutes of a 135M model rarely win a game, and the pool's way
(summarise, store, retrieve into the next step's prompts) is what this run is to show on the cluster."""


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=3, help="GRPO steps of each arm")
    p.add_argument("--kill-after", type=int, default=1, help="the CLI arm's rollout node dies as this step is logged")
    p.add_argument("--arms", nargs="+", choices=("cli", "deployment"), default=["cli", "deployment"])
    p.add_argument("--root", default="runs/bench-alfworld-cluster")
    p.add_argument("overrides", nargs="*", help="more recipe overrides, KEY=VALUE")
    args = p.parse_args()
    if not 1 <= args.kill_after < args.steps:
        p.error("--kill-after must be at least 1 and less than --steps")
    return args


def cluster_overrides(record: lc.ClusterState) -> list[str]:
    return ["distributed.backend=ray", f"distributed.ray_address={record.address}",
            f"distributed.ray_token_file={record.token_file}", "distributed.trainer_resource=agentrl_trainer",
            "distributed.rollout_resource=agentrl_rollout", "distributed.rollout_workers=1"]


def run_overrides(args: argparse.Namespace, record: lc.ClusterState, root: Path, name: str) -> list[str]:
    return [f"run.root={root}", f"run.name={name}", f"trainer.steps={args.steps}", *SHRINK,
            *cluster_overrides(record), *args.overrides]


def watch_and_kill(record: lc.ClusterState, metrics: Path, after: int, seen: dict, done: threading.Event) -> None:
    """Note each placement as steps are logged; SIGKILL the rollout node's raylet once step `after` is logged."""
    import ray

    from agentrl_core.distributed.cluster import cluster_token

    with cluster_token(record.token_file):  # the cluster's token, as a run joining it uses it
        ray.init(address=record.address, log_to_driver=False, include_dashboard=False)
        try:
            logged = 0
            while not done.is_set():
                steps = len(read_metrics(metrics)) if metrics.exists() else 0
                if steps > logged:
                    logged = steps
                    seen.setdefault("placements", []).append({"after_step": steps, **placement()})
                    if steps == after and "killed" not in seen:
                        (node, *_), = seen["placements"][-1]["agentrl-rollout"]
                        seen["killed"] = {"node": node, "raylet_pid": kill_raylet(node), "after_step": steps}
                        print(f"[bench] step {steps} logged: killed the raylet of rollout node {node}", flush=True)
                time.sleep(0.5)
        finally:
            ray.shutdown()


def cli_arm(args: argparse.Namespace, record: lc.ClusterState, root: Path) -> dict:
    name = "alf-cli"
    cmd = [str(BIN / "agentrl"), "run", "alfworld_grpo_expool", *run_overrides(args, record, root, name)]
    print("[bench] " + " ".join(cmd), flush=True)
    seen: dict = {}
    done = threading.Event()
    watcher = threading.Thread(target=watch_and_kill, daemon=True,
                               args=(record, root / name / "grpo" / "metrics.jsonl", args.kill_after, seen, done))
    watcher.start()
    try:
        rc = subprocess.run(cmd, cwd=ROOT).returncode
    finally:
        done.set()
        watcher.join(60)
    if "killed" not in seen:
        raise RuntimeError("the rollout node was never killed (see the watcher's error above): the arm proves nothing")
    return {"rc": rc, **seen, **summary(root, name)}


def prefect_env(home: Path, api: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_API_URL=api, PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1",
               PREFECT_SERVER_UI_V2_ENABLED="false", PREFECT_WORKER_QUERY_SECONDS="2", PWD=str(ROOT))
    return env


def prefect(env: dict, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    out = subprocess.run([str(BIN / "prefect"), *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=timeout)
    print(out.stdout[-3000:] + out.stderr[-2000:], flush=True)
    if out.returncode:
        raise RuntimeError(f"prefect {' '.join(argv[:3])} failed ({out.returncode})")
    return out


def deployment_arm(args: argparse.Namespace, record: lc.ClusterState, root: Path) -> dict:
    """A Prefect server, pool, `deploy --all` and worker; then the deployment run, watched to its end."""
    name = "alf-deployment"
    home = root / "prefect-home"
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = prefect_env(home, api)
    procs: list[subprocess.Popen] = []
    with open(home / "server.log", "w") as server_log, open(home / "worker.log", "w") as worker_log:
        try:
            procs.append(subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port",
                                           str(port)], cwd=ROOT, env=env, stdout=server_log, stderr=subprocess.STDOUT))
            wait_healthy(procs[0], api, home / "server.log", 180)
            prefect(env, "work-pool", "create", "local", "--type", "process")
            prefect(env, "--no-prompt", "deploy", "--all")
            procs.append(subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", "local"], cwd=ROOT,
                                          env=env, stdout=worker_log, stderr=subprocess.STDOUT))
            params = {"overrides": run_overrides(args, record, root, name)}
            out = prefect(env, "deployment", "run", "train/train-alfworld-cluster", "--params", json.dumps(params),
                          "--watch", "--watch-timeout", "3000", timeout=3100)
            rc = 0 if "Completed" in out.stdout + out.stderr else 1
        finally:
            for proc in reversed(procs):
                stop_process(proc, timeout=30)
    print((home / "worker.log").read_text()[-6000:], flush=True)
    return {"rc": rc, **summary(root, name)}


def summary(root: Path, name: str) -> dict:
    """What the run left: its registry record, stages, evaluations, and the GRPO stage's per-step metrics."""
    out: dict = {}
    metrics = root / name / "grpo" / "metrics.jsonl"
    steps = read_metrics(metrics) if metrics.exists() else []
    out["grpo_steps"] = len(steps)
    out["rollout_retries"] = sum(m.get("rollout/retries", 0.0) for m in steps)
    out["pool_size"] = steps[-1].get("exp/pool_size", 0.0) if steps else 0.0
    out["step_s"] = [round(m.get("time/step_s", 0.0), 1) for m in steps]
    with open_registry(None, root) as reg:
        run = reg.run(name)
        out["status"] = run.status if run else None
        out["stages"] = [s.name for s in reg.stages(name)]
        out["success"] = {e.metrics["label"]: e.metrics.get("success_rate") for e in reg.evals(run=name)}
    return out


def main() -> None:
    args = parse()
    print(describe_cpu())
    root = (ROOT / args.root).resolve()
    shutil.rmtree(root, ignore_errors=True)
    state = root / "cluster"
    record = lc.start(state, NODES, port=free_port())
    print(lc.status(state), flush=True)
    results: dict[str, dict] = {}
    try:
        for arm in args.arms:
            start = time.perf_counter()
            results[arm] = (cli_arm if arm == "cli" else deployment_arm)(args, record, root)
            results[arm]["wall_min"] = round((time.perf_counter() - start) / 60, 2)
            print(f"[bench] {arm}: {json.dumps(results[arm], default=str)}", flush=True)
            if arm == "cli" and "killed" in results[arm]:
                lc.add(state, [lc.NodeSpec("rollout", 1)])  # the next arm again has two rollout nodes
    finally:
        killed = lc.stop(state)
        print("cluster stopped" + (f" ({', '.join(killed)} killed after the grace period)" if killed else ""), flush=True)
    figures = {}
    for arm, r in results.items():
        figures |= {f"{arm}/rc": r["rc"], f"{arm}/grpo_steps": r["grpo_steps"], f"{arm}/wall_min": r["wall_min"],
                    f"{arm}/rollout_retries": r["rollout_retries"], f"{arm}/pool_size": r["pool_size"]}
    current().report(figures, arms=results, steps=args.steps)
    failed = [a for a, r in results.items() if r["rc"] or r["grpo_steps"] != args.steps or r["status"] != "completed"]
    if failed:
        raise SystemExit(f"arms that did not complete every step: {failed}")


if __name__ == "__main__":
    run_recorded("alfworld_cluster", main)
