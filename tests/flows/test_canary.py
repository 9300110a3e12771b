"""Canary: a secret in every secret-bearing setting, a full `agentrl run` and a deployment run through a
real Prefect server; then every byte the runs left (Prefect's database, logs, reports, artifacts, the
registry, TensorBoard events, checkpoint metadata, console output) is searched for the canary."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.flows.conftest import tiny_overrides

ROOT = Path(__file__).resolve().parents[2]
AGENTRL = str(Path(sys.executable).with_name("agentrl"))
CANARY = "canary7Hq2Zx9"
TOKEN = "tokencanary5Rw8Lp3"  # the run's bearer token: never written anywhere either
PREFECT_AUTH = "agentrl:prefectcanary3Kd7Vq1"  # the temporary Prefect server's credential (PREFECT_API_AUTH_STRING)
PREFECT_BASIC = base64.b64encode(PREFECT_AUTH.encode()).decode()  # as its clients send it, in a Basic header
pytestmark = pytest.mark.slow


def _registry(folder: Path) -> str:
    """A working SQLite registry URL that carries the canary (SQLite ignores unknown URI parameters)."""
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///file:{folder}/registry.db?mode=rwc&uri=true&password={CANARY}"


def _unused(kind: str) -> str:
    """A credential-bearing value for a setting this run does not exercise."""
    return {"http": f"http://alice:{CANARY}@127.0.0.1:9/v1", "pg": f"postgresql+psycopg://alice:{CANARY}@127.0.0.1:9/db"}[kind]


def _leaks(folders: list[Path], texts: list[str],
           secrets: tuple[str, ...] = (CANARY, TOKEN, PREFECT_AUTH, PREFECT_BASIC)) -> list[str]:
    """Every file (and text) holding a secret, raw bytes searched (a SQLite file's free pages too)."""
    found = [f"output #{i}" for i, text in enumerate(texts) if any(s in text for s in secrets)]
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                found += [f"{path} ({s})" for s in secrets if s.encode() in data]
    return found


def test_cli_run_keeps_every_secret_out_of_what_it_leaves(tiny_model_path, tmp_path, prefect_home):
    root, home = tmp_path / "runs", prefect_home
    secrets = [f"store.registry_url={_registry(tmp_path / 'reg')}",  # used: the run registers in it
               f"rollout.engine.url={_unused('http')}", f"experience.url={_unused('http')}",
               f"experience.db_url={_unused('pg')}", f"store.s3_endpoint_url={_unused('http')}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), AGENTRL_SERVER_TOKEN=TOKEN, PREFECT_SERVER_ANALYTICS_ENABLED="false",
               DO_NOT_TRACK="1", OMP_NUM_THREADS="1", PREFECT_API_AUTH_STRING=PREFECT_AUTH)
    run = subprocess.run([AGENTRL, "run", "household_grpo", *tiny_overrides(tiny_model_path, root), "eval.enabled=false",
                          *secrets], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "AGENTRL_SECRET_STORE_REGISTRY_URL" in run.stderr  # the CLI said where the password went
    assert (root / "tiny" / "export" / "grpo").exists()
    assert (tmp_path / "reg" / "registry.db").stat().st_size > 0  # the secret registry URL was used
    assert list(home.rglob("*.db")), "no Prefect database to search"
    assert _leaks([root, home, tmp_path / "reg"], [run.stdout, run.stderr]) == []


def test_deployment_run_keeps_every_secret_out_of_what_it_leaves(tiny_model_path, tmp_path, prefect_home):
    from agentrl_core.web.ports import free_port
    from tests.flows.test_deployment import PREFECT, _prefect, _stop, _wait_healthy, prefect_env

    from agentrl_core.env_service import launch_server

    root, home = tmp_path / "runs", prefect_home
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = prefect_env(home, api, OMP_NUM_THREADS="1")
    with launch_server(["household"]) as env_server:  # env.url: a running server, reached with a credential-bearing URL
        secret_env = {"CANARY_REGISTRY": _registry(tmp_path / "reg"), "CANARY_ENV_URL":
                      env_server.url.replace("http://", f"http://alice:{CANARY}@"), "CANARY_HTTP": _unused("http"),
                      "CANARY_PG": _unused("pg"), "AGENTRL_SERVER_TOKEN": TOKEN}
        logs = [open(home / "server.log", "w"), open(home / "worker.log", "w")]
        server = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT,
                                  env=env, stdout=logs[0], stderr=subprocess.STDOUT)
        worker = None
        try:
            _wait_healthy(api, server)
            assert _prefect(env, "work-pool", "create", "local", "--type", "process").returncode == 0
            deployed = _prefect(env, "--no-prompt", "deploy", "--name", "train-household")
            assert deployed.returncode == 0, deployed.stdout + deployed.stderr
            worker = subprocess.Popen([PREFECT, "worker", "start", "--pool", "local"], cwd=ROOT,
                                      env={**env, **secret_env}, stdout=logs[1], stderr=subprocess.STDOUT)
            overrides = [*tiny_overrides(tiny_model_path, root), "eval.enabled=false",
                         "store.registry_url=env:CANARY_REGISTRY", "env.url=env:CANARY_ENV_URL",
                         "rollout.engine.url=env:CANARY_HTTP", "experience.url=env:CANARY_HTTP",
                         "experience.db_url=env:CANARY_PG", "store.s3_endpoint_url=env:CANARY_HTTP"]
            run = _prefect(env, "deployment", "run", "train/train-household", "--params",
                           json.dumps({"overrides": overrides}), "--watch", "--watch-timeout", "900", timeout=960)
            out = run.stdout + run.stderr
            assert run.returncode == 0 and "Completed" in out, out[-3000:] + (home / "worker.log").read_text()[-3000:]
        finally:
            if worker is not None:
                _stop(worker)
            _stop(server)
            for f in logs:
                f.close()
        assert (tmp_path / "reg" / "registry.db").stat().st_size > 0
        assert (home / "prefect.db").exists()
        assert _leaks([root, home, tmp_path / "reg"], [out]) == []
