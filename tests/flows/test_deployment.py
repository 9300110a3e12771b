"""`prefect deployment run` through a real local Prefect server and process worker, as the README says."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.flows.conftest import tiny_overrides

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prefect(env: dict, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    exe = str(Path(sys.executable).with_name("prefect"))
    return subprocess.run([exe, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "prefect server exited during startup"
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError("prefect server did not become healthy")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory):
    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_API_URL=url, PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1",
               PREFECT_SERVER_UI_V2_ENABLED="false", PREFECT_WORKER_QUERY_SECONDS="2", PWD=str(ROOT))
    exe = str(Path(sys.executable).with_name("prefect"))
    log = open(home / "server.log", "w")
    server = subprocess.Popen([exe, "server", "start", "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT, env=env,
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_healthy(url, server)
        yield env
    finally:
        _stop(server)
        log.close()


def test_deployment_runs_through_server_and_worker(prefect_server, tiny_model_path, tmp_path):
    env = prefect_server
    created = _prefect(env, "work-pool", "create", "local", "--type", "process")
    assert created.returncode == 0, created.stdout + created.stderr
    deployed = _prefect(env, "--no-prompt", "deploy", "--all")
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    assert "train/train-household" in deployed.stdout
    worker_log = open(tmp_path / "worker.log", "w")
    worker = subprocess.Popen([str(Path(sys.executable).with_name("prefect")), "worker", "start", "--pool", "local"],
                              cwd=ROOT, env=env, stdout=worker_log, stderr=subprocess.STDOUT)
    try:
        params = json.dumps({"overrides": tiny_overrides(tiny_model_path, tmp_path / "runs")})
        run = _prefect(env, "deployment", "run", "train/train-household", "--params", params, "--watch",
                       "--watch-timeout", "600", timeout=700)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out + (tmp_path / "worker.log").read_text()[-3000:]
        assert "Completed" in out
    finally:
        _stop(worker)
        worker_log.close()
    report = json.loads((tmp_path / "runs" / "tiny" / "report" / "eval.json").read_text())
    assert [r["model"] for r in report["rows"]] == ["base", "sft", "grpo"]
