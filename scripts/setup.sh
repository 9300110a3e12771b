#!/usr/bin/env bash
# One-time (and idempotent) set-up: a virtual environment, CPU torch first, agentrl, the embedded model.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  "$PYTHON" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate

# torch first, pinned to the CPU build: an unpinned torch pulls several GB of CUDA packages.
if ! python -c "import torch" 2>/dev/null; then
  echo "[setup] installing torch (CPU)"
  pip install -q "torch==${AGENTRL_TORCH_VERSION:-2.13.0}"
fi

# The environments' optional engines (ALFWorld, ScienceWorld, BabyAI, BFCL) come with the `envs`
# extra; AGENTRL_ENV_EXTRAS=none skips them (those envs then say how to install them when used).
extras="test"
if [ "${AGENTRL_ENV_EXTRAS:-all}" != "none" ]; then extras="test,envs"; fi
stamp=.venv/.agentrl-installed
want="$(sha256sum pyproject.toml | cut -c1-16)-$extras"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[setup] installing agentrl and its dependencies ($extras)"
  pip install -q -e ".[$extras]"
  if [ "$extras" = "test,envs" ]; then
    # bfcl-eval's own requirements (model SDKs) are not needed to play its data: install it alone
    pip install -q --no-deps "bfcl-eval==2026.3.23"
  fi
  python -c "import agentrl_core, flows, tasks, prefect"
  echo "$want" > "$stamp"
fi

echo "[setup] embedded model"
agentrl import-model smollm2-135m-instruct
