#!/usr/bin/env bash
# A multi-node Ray cluster on this machine (a head and worker nodes, each its own `ray start`, token auth):
#   bash deployments/ray_cluster.sh start [--node trainer:1 --node rollout:1 --node rollout:1] [--port 6390]
#   bash deployments/ray_cluster.sh status
#   bash deployments/ray_cluster.sh stop
# `start` prints the overrides that run a recipe on it (agentrl_core/distributed/local_cluster.py).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m agentrl_core.distributed.local_cluster "$@"
