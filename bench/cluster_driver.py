"""A GRPO stage on the multi-node cluster of local_cluster.py, as a user runs it (driven by
tests/distributed/test_local_cluster.py and bench/bench_cluster_faults.py).

Run in a process of its own (a pytest process has its own Ray settings and maybe its own Ray):

    python bench/cluster_driver.py MODEL ROOT ADDRESS TOKEN_FILE STEPS [KILL_AFTER_STEP ROLE [SAVE_EVERY]]

It starts an env server (whose bearer token the rollout workers on the other nodes need), runs STEPS GRPO
steps with the trainer and the rollout worker placed by their custom resources, and prints one JSON line:
where each placement group's bundles were after every step (node ids and their custom resources), and
whether the run's token shows in the jobs' or actors' metadata. With KILL_AFTER_STEP, the raylet of the
node that holds the ROLE ("rollout" or "trainer") worker is killed with SIGKILL as the next step starts.
It also records each step's seconds and the wall clock it ended at. A checkpoint is saved every SAVE_EVERY
steps (default 1). A failed run prints its error as `FAILED <type>: <message>` and exits 3.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def placement() -> dict[str, list[list[str]]]:
    """Placement group name -> [node id, its agentrl_* resources...] of each bundle, as the GCS has them (the
    cluster runs without a dashboard, so Ray's state API is not there)."""
    import ray

    resources = {n["NodeID"]: [k for k in sorted(n["Resources"]) if k.startswith("agentrl_")] for n in ray.nodes()}
    out: dict[str, list[list[str]]] = {}
    for group in ray.util.placement_group_table().values():
        if group["state"] == "CREATED":
            out[group["name"]] = [[node, *resources.get(node, [])] for node in group["bundles_to_node_id"].values()]
    return out


def kill_raylet(node_id: str) -> int:
    """SIGKILL the raylet of `node_id` (found by its node-manager port among this machine's raylets)."""
    import ray

    port = next(n["NodeManagerPort"] for n in ray.nodes() if n["NodeID"] == node_id)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline and cmdline[0].endswith(b"raylet") and f"--node_manager_port={port}".encode() in cmdline:
            os.kill(int(pid), signal.SIGKILL)
            return int(pid)
    raise RuntimeError(f"no raylet with node manager port {port}")


def metadata_text() -> str:
    """What the GCS tells any client about the jobs (their runtime env included) and actors."""
    import ray
    from ray._private import state

    return json.dumps(state.actors(), default=str) + json.dumps(state.jobs(), default=str) + json.dumps(
        ray.get_runtime_context().runtime_env, default=str)


def main(model: str, root: str, address: str, token_file: str, steps: str, kill_after: str = "0",
         role: str = "rollout", save_every: str = "1") -> None:
    from agentrl_core.env_service import launch_server
    from agentrl_core.recipes import load_recipe
    from agentrl_core.grpo import train_grpo
    from agentrl_core.web.auth import run_token

    seen: dict[str, object] = {"placements": [], "leaked": []}

    def on_step(step: int, total: int, metrics: dict) -> None:
        seen["placements"].append(placement())
        seen["leaked"].append(token in metadata_text())
        seen.setdefault("retries", []).append(metrics.get("rollout/retries", 0.0))
        seen.setdefault("step_s", []).append(metrics.get("time/step_s"))
        seen.setdefault("ended_at", []).append(time.time())
        if step == int(kill_after):
            (node, *_), = seen["placements"][-1][f"agentrl-{role}"]
            threading.Thread(target=lambda: (time.sleep(0.2), kill_raylet(node)), daemon=True).start()

    cfg = load_recipe("household_grpo", [
        f"model.name={model}", f"run.root={root}", "run.name=cluster", f"trainer.steps={steps}",
        f"trainer.save_every={save_every}", "rollout.tasks_per_step=4", "rollout.group_size=4",
        "rollout.sampling.max_new_tokens=16", "env.max_turns=4", "model.compute_dtype=float32",
        "distributed.backend=ray", f"distributed.ray_address={address}", f"distributed.ray_token_file={token_file}",
        "distributed.trainer_resource=agentrl_trainer", "distributed.rollout_resource=agentrl_rollout",
        "distributed.rollout_workers=1"])
    from agentrl_core.errors import AgentRLError

    with run_token() as token, launch_server(["household"]) as server:  # the env server wants the run's token
        try:
            result = train_grpo(cfg, init_model=Path(model), env_url=server.url, on_step=on_step)
        except AgentRLError as err:
            print(f"FAILED {type(err).__name__}: {err}", flush=True)
            sys.exit(3)
    print("RESULT " + json.dumps({"steps": result.steps, "checkpoint": result.checkpoint,
                                  "resumed_from": result.resumed_from, **seen}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:9])
