"""A GRPO stage on the multi-node cluster of local_cluster.py, as a user runs it (for test_local_cluster.py).

Run in a process of its own (a pytest process has its own Ray settings and maybe its own Ray):

    python tests/distributed/cluster_driver.py MODEL ROOT ADDRESS TOKEN_FILE

It starts an env server (whose bearer token the rollout workers on the other nodes need), runs one GRPO
step with the trainer and the rollout worker placed by their custom resources, and prints one JSON line:
where each actor ran (its node's custom resources), what the run's token and job metadata look like.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def placement() -> dict[str, list[str]]:
    """Placement group name -> the agentrl_* resources of the node each of its bundles was reserved on
    (from the GCS: the cluster runs without a dashboard, so Ray's state API is not there)."""
    import ray

    resources = {n["NodeID"]: [k for k in sorted(n["Resources"]) if k.startswith("agentrl_")] for n in ray.nodes()}
    out: dict[str, list[str]] = {}
    for group in ray.util.placement_group_table().values():
        if group["state"] == "CREATED":
            out[group["name"]] = sum((resources[node] for node in group["bundles_to_node_id"].values()), [])
    return out


def metadata_text() -> str:
    """What the GCS tells any client about the jobs (their runtime env included) and actors."""
    import ray
    from ray._private import state

    return json.dumps(state.actors(), default=str) + json.dumps(state.jobs(), default=str) + json.dumps(
        ray.get_runtime_context().runtime_env, default=str)


def main(model: str, root: str, address: str, token_file: str) -> None:
    from agentrl_core.envs import launch_server
    from agentrl_core.recipes import load_recipe
    from agentrl_core.server_auth import run_token
    from agentrl_core.training.grpo import train_grpo

    seen: dict[str, object] = {}

    def on_step(step: int, total: int, metrics: dict) -> None:
        seen["placement"] = placement()
        seen["leaked"] = token in metadata_text()

    cfg = load_recipe("household_grpo", [
        f"model.name={model}", f"run.root={root}", "run.name=cluster", "trainer.steps=1", "trainer.save_every=1",
        "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.sampling.max_new_tokens=6", "env.max_turns=2",
        "model.compute_dtype=float32", "distributed.backend=ray", f"distributed.ray_address={address}",
        f"distributed.ray_token_file={token_file}", "distributed.trainer_resource=agentrl_trainer",
        "distributed.rollout_resource=agentrl_rollout", "distributed.rollout_workers=1"])
    with run_token() as token, launch_server(["household"]) as server:  # the env server wants the run's token
        result = train_grpo(cfg, init_model=Path(model), env_url=server.url, on_step=on_step)
    print("RESULT " + json.dumps({"steps": result.steps, "checkpoint": result.checkpoint, **seen}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:5])
