#!/usr/bin/env bash
# A local Prefect stack for agentrl's deployments: server on 127.0.0.1, a process work pool, the
# deployments from prefect.yaml, and a worker. Usage:
#   bash deployments/local_stack.sh start     # then: .venv/bin/prefect deployment run train/train-alfworld
#   bash deployments/local_stack.sh stop
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${AGENTRL_PREFECT_PORT:-4200}
POOL=local
STATE=.prefect
mkdir -p "$STATE"
export PREFECT_HOME="$PWD/$STATE" PREFECT_API_URL="http://127.0.0.1:$PORT/api"
export PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1 PREFECT_SERVER_UI_V2_ENABLED=false
export PREFECT_WORKER_QUERY_SECONDS=2
PREFECT=.venv/bin/prefect

start() {
  if [ -f "$STATE/server.pid" ] && kill -0 "$(cat "$STATE/server.pid")" 2>/dev/null; then
    echo "server already running (pid $(cat "$STATE/server.pid"))"
  else
    "$PREFECT" server start --host 127.0.0.1 --port "$PORT" > "$STATE/server.log" 2>&1 &
    echo $! > "$STATE/server.pid"
  fi
  for _ in $(seq 1 120); do
    curl -fs "http://127.0.0.1:$PORT/api/health" > /dev/null && break
    sleep 0.5
  done
  curl -fs "http://127.0.0.1:$PORT/api/health" > /dev/null || { echo "server did not start; see $STATE/server.log"; exit 1; }
  "$PREFECT" work-pool inspect "$POOL" > /dev/null 2>&1 || "$PREFECT" work-pool create "$POOL" --type process
  gpu_limits
  PWD="$PWD" "$PREFECT" --no-prompt deploy --all
  "$PREFECT" worker start --pool "$POOL" > "$STATE/worker.log" 2>&1 &
  echo $! > "$STATE/worker.pid"
  echo "UI: http://127.0.0.1:$PORT   run: PREFECT_API_URL=$PREFECT_API_URL $PREFECT deployment run train/train-alfworld"
}

# One global concurrency limit per GPU (gpu-0, gpu-1, …; limit 1 each): training and evaluation
# stages hold the GPUs they use (tasks/gpu.py), so concurrent flow runs never share a card.
# AGENTRL_GPUS overrides the count nvidia-smi reports (0 on a CPU-only machine: no limits).
gpu_limits() {
  local n=${AGENTRL_GPUS:-$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU ' || true)}
  for i in $(seq 0 $((n - 1))); do
    "$PREFECT" gcl inspect "gpu-$i" > /dev/null 2>&1 || "$PREFECT" gcl create "gpu-$i" --limit 1
  done
  echo "GPU concurrency limits: $n"
}

stop() {
  for name in worker server; do
    if [ -f "$STATE/$name.pid" ]; then
      pid=$(cat "$STATE/$name.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$STATE/$name.pid"
    fi
  done
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop"; exit 2 ;;
esac
