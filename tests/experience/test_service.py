"""The pool as a real process on 127.0.0.1: summarise, retrieve, stats, HTTP errors, typed client errors, stop;
and as a run starts it: only the run's token served, request bodies capped (declared or chunked)."""

from __future__ import annotations

import json
import os

import httpx
import pytest

from agentrl_core.experience.client import ExperienceClient
from agentrl_core.experience.errors import ExperienceRequestError, ExperienceStartError, ExperienceUnavailableError
from agentrl_core.experience.launcher import launch_experience_pool
from agentrl_core.experience.service import MAX_BODY_ENV
from agentrl_core.experience.summarise import ExperienceRecord
from agentrl_core.web.auth import TOKEN_ENV, run_token


def episode(task: str, actions: list[str], success: bool, task_id: int = 0) -> dict:
    msgs = [{"role": "system", "content": "You are a household robot."},
            {"role": "user", "content": f"You are in the kitchen.\nYour task: {task}."}]
    for a in actions:
        msgs += [{"role": "assistant", "content": a}, {"role": "user", "content": "OK."}]
    return {"env": "svc-house", "task_id": task_id, "messages": msgs, "reward": float(success), "success": success}


def test_summarise_retrieve_stats(pool):
    with ExperienceClient(pool.url) as client:
        assert client.health().status == "ok"
        trajs = [episode("put a cool cup on countertop 1", ["go to fridge 1", "cool cup 1 with fridge 1"], True, 1),
                 episode("heat an egg and put it in the garbage can", ["go to microwave 1"], True, 2),
                 episode("clean a plate", ["look"], False, 3)]
        out = client.summarise(trajs)
        assert (out.received, out.added, out.duplicates, out.skipped) == (3, 2, 0, 1)
        assert client.summarise(trajs[:1]).duplicates == 1
        hits = client.retrieve("You are in a kitchen.\nYour task: put a chilled mug on countertop 2.", env="svc-house", k=2)
        assert [h.task_id for h in hits] == [1, 2] and hits[0].similarity > hits[1].similarity
        assert hits[0].content.startswith("Task: put a cool cup on countertop 1. What worked (2 actions")
        assert client.retrieve("anything", env="no-such-env") == []
        added = client.add([ExperienceRecord("svc-house", None, "washing dishes", "rinse the plate in sinkbasin 1", 0.5)])
        assert (added.added, added.duplicates) == (1, 0)
        assert [h.content for h in client.retrieve("wash a dish", env="svc-house", k=1, min_score=0.4)] == [
            "rinse the plate in sinkbasin 1"]
        stats = client.stats()
        assert stats.by_env["svc-house"] == 3 and stats.summarised >= 4 and stats.retrievals >= 3
        assert stats.db.startswith("sqlite:///")


def test_errors_are_real_status_codes(pool):
    r = httpx.post(f"{pool.url}/retrieve", json={"query": "x", "k": 0})
    assert r.status_code == 422 and r.json()["error"] == "InvalidRequest" and "k" in r.json()["detail"]
    r = httpx.post(f"{pool.url}/retrieve", json={"query": "x", "top": 3})
    assert r.status_code == 422 and "top" in r.json()["detail"]
    no_user = {"env": "e", "messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}],
               "reward": 1.0, "success": True}
    r = httpx.post(f"{pool.url}/summarise", json={"trajectories": [no_user]})
    assert r.status_code == 400 and "trajectories[0]" in r.json()["detail"] and "no user message" in r.json()["detail"]
    assert httpx.get(f"{pool.url}/nope").status_code == 404
    with ExperienceClient(pool.url) as client, pytest.raises(ExperienceRequestError, match="400"):
        client.summarise([no_user])


def test_launch_stop_and_unreachable(tmp_path):
    server = launch_experience_pool(f"sqlite:///{tmp_path / 'p.db'}")
    pid, url = server.pid, server.url
    assert url.startswith("http://127.0.0.1:")
    server.stop()
    assert not server.alive
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with ExperienceClient(url, timeout=2.0) as client, pytest.raises(ExperienceUnavailableError, match="is it running"):
        client.health()


def test_bad_database_url_fails_at_start(tmp_path):
    with pytest.raises(ExperienceStartError, match="exited during startup"):
        launch_experience_pool("nosuchdialect://x", startup_timeout=30)


# -- a pool as a run starts it: the run's token required, bodies capped ----------------------------
LIMIT = 1 << 20
"""The body cap the run's pool is started with, through its environment variable (as a run would raise it)."""


@pytest.fixture(scope="module")
def run_pool(tmp_path_factory: pytest.TempPathFactory):
    """(pool, the run's token): started inside `run_token()`; the token is in this process's environment
    only while starting it (so the other tests' clients send none)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(TOKEN_ENV, raising=False)
        mp.setenv(MAX_BODY_ENV, "1")
        with run_token() as token:
            server = launch_experience_pool(f"sqlite:///{tmp_path_factory.mktemp('run-pool') / 'p.db'}")
    with server:
        yield server, token


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer not-the-run-token"}])
def test_a_stranger_cannot_read_or_write_the_runs_pool(run_pool, headers):
    pool, token = run_pool
    for method, path, body in (("GET", "/stats", None), ("POST", "/retrieve", {"query": "x"}),
                               ("POST", "/summarise", {"trajectories": []})):
        r = httpx.request(method, f"{pool.url}{path}", json=body, headers=headers, timeout=10)
        assert r.status_code == 401, (path, r.text)
        assert TOKEN_ENV in r.json()["detail"] and token not in r.text
    assert httpx.get(f"{pool.url}/health", timeout=10).status_code == 200


def test_the_runs_client_is_served_and_splits_what_the_pool_would_refuse(run_pool, monkeypatch):
    pool, token = run_pool
    monkeypatch.setenv(TOKEN_ENV, token)  # as inside the run
    failed = [episode(f"task {i}", ["look " * 2000], False, i) for i in range(200)]  # ~2 MiB: twice the pool's cap
    with ExperienceClient(pool.url, max_request_bytes=LIMIT // 4) as client:
        before = client.stats().summarised
        out = client.summarise(failed)  # one request would be a 413
        assert (out.received, out.added, out.skipped) == (200, 0, 200)
        assert client.stats().summarised - before == 200


def _summarise_body(size: int) -> bytes:
    """A valid /summarise body of exactly `size` bytes: one failed trajectory whose action is padded."""
    traj = episode("pad", [""], False)
    empty = json.dumps({"trajectories": [traj]}).encode()
    traj["messages"][2]["content"] = " " * (size - len(empty))
    return json.dumps({"trajectories": [traj]}).encode()


def test_a_body_at_the_limit_is_read_one_byte_more_is_a_413(run_pool):
    pool, token = run_pool
    headers = {"Authorization": f"Bearer {token}", "content-type": "application/json"}
    with httpx.Client(base_url=pool.url, headers=headers, timeout=30) as http:
        at_limit = http.post("/summarise", content=_summarise_body(LIMIT))
        assert at_limit.status_code == 200 and at_limit.json()["skipped"] == 1, at_limit.text[:300]
        over = _summarise_body(LIMIT + 1)
        declared = http.post("/summarise", content=over)
        chunked = http.post("/summarise", content=iter([over[i:i + 16384] for i in range(0, len(over), 16384)]))
        assert http.get("/health").status_code == 200
    for response in (declared, chunked):
        assert response.status_code == 413, response.text[:300]
        assert response.json()["error"] == "RequestTooLarge"
        detail = response.json()["detail"]
        assert f"limit of 1 MiB ({LIMIT} bytes)" in detail and "--max-body-mb" in detail and MAX_BODY_ENV in detail
