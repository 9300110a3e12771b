"""The pool as a real process on 127.0.0.1: summarise, retrieve, stats, HTTP errors, typed client errors, stop."""

from __future__ import annotations

import os

import httpx
import pytest

from agentrl_core.experience.client import ExperienceClient
from agentrl_core.experience.errors import ExperienceRequestError, ExperienceStartError, ExperienceUnavailableError
from agentrl_core.experience.launcher import launch_experience_pool
from agentrl_core.experience.summarise import ExperienceRecord


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
