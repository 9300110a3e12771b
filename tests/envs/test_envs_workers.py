"""The server's worker processes under faults: kill -9, dedicated workers, caps, metrics, convention B."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import pytest
from fastapi.testclient import TestClient

from agentrl_core.env_service.server import create_app
from agentrl_core.env_service.server_metrics import quantile
from agentrl_core.envs import registry
from agentrl_core.errors import MissingExtraError
from tests.envs.test_envs_server import Boom, assert_error


class SoloBoom(Boom):
    """Boom whose every session gets a worker process of its own, at most 2 at once."""

    name = "soloboom"
    dedicated_worker = True
    max_sessions = 2


class ReuseBoom(Boom):
    """A dedicated-worker env whose worker, once a session closed cleanly, serves the env's next session."""

    name = "reuseboom"
    dedicated_worker = True
    reuse_worker = True


class SlowSolo(Boom):
    """A dedicated-worker env whose construction logs when it begins and ends, and in between waits (up to
    PARTNER_WAIT_S) for the partner it would run beside if two start at once: the k-th construction to begin
    waits until 2·ceil(k/2) have begun. Two at once meet at once; one at a time (a start limit of 1) waits out
    the time, so the log shows one; three or more at once show as more. A fixed sleep instead only overlaps when
    the machine spawns the worker processes in step, which a busy machine does not."""

    name = "slowsolo"
    dedicated_worker = True
    PARTNER_WAIT_S = 3.0

    def __init__(self, log: str | None = None) -> None:
        super().__init__(log)
        self._write(f"begin {time.monotonic()}")
        begun = self._begun()
        deadline = time.monotonic() + self.PARTNER_WAIT_S
        while self._begun() < 2 * -(-begun // 2) and time.monotonic() < deadline:
            time.sleep(0.02)
        self._write(f"end {time.monotonic()}")

    def _begun(self) -> int:
        return sum(line.startswith("begin") for line in Path(self.log).read_text().splitlines()) if self.log else 0


class ShopBoom(Boom):
    """Boom answering AgentGym's convention B (env_idx), like WebShop and SQLGym."""

    name = "shopboom"
    agentgym_convention = "B"


class NeedsExtra(Boom):
    name = "needsextra"
    extra = "nonexistent"
    requires = ("agentrl_no_such_module_xyz",)


@pytest.fixture()
def envs(monkeypatch: pytest.MonkeyPatch) -> None:
    for cls in (Boom, SoloBoom, ReuseBoom, SlowSolo, ShopBoom, NeedsExtra):
        monkeypatch.setitem(registry._REGISTRY, cls.name, cls)


@pytest.fixture()
def api(envs: None) -> Iterator[TestClient]:
    with TestClient(create_app(["boom", "soloboom", "countdown"], workers=2), raise_server_exceptions=False) as tc:
        yield tc


def new_session(api: TestClient, env: str) -> int:
    resp = api.post("/sessions", json={"env": env, "task_id": 0})
    assert resp.status_code == 200, resp.text
    return int(resp.json()["session_id"])


def worker_pid(api: TestClient, sid: int) -> int:
    return int(api.post(f"/sessions/{sid}/step", json={"action": "pid"}).json()["observation"])


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_a_killed_worker_fails_only_its_own_sessions(api: TestClient) -> None:
    a, b = new_session(api, "boom"), new_session(api, "boom")  # least-loaded placement: two workers
    pid_a, pid_b = worker_pid(api, a), worker_pid(api, b)
    assert pid_a != pid_b and pid_a != os.getpid()
    os.kill(pid_a, signal.SIGKILL)  # mid-episode: both sessions are reset and stepping
    wait_for(lambda: api.get("/metrics").json()["worker_restarts"] == 1)
    body = assert_error(api.post(f"/sessions/{a}/step", json={"action": "ok"}), 410, "SessionLostError", "exit code -9")
    assert "new session" in body["detail"]
    assert api.post(f"/sessions/{b}/step", json={"action": "ok"}).json()["reward"] == 1.0  # unaffected
    metrics = api.get("/metrics").json()
    assert metrics["worker_deaths"] == 1 and metrics["sessions_lost"] == 1 and metrics["workers_shared"] == 2
    c = new_session(api, "boom")  # the replacement serves new sessions
    assert worker_pid(api, c) not in (pid_a,)
    assert api.get("/health").json()["sessions"] == 2


def test_a_worker_killed_during_a_call_answers_that_call(api: TestClient, tmp_path: Path) -> None:
    import concurrent.futures

    sid = new_session(api, "boom")
    pid = worker_pid(api, sid)
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        pending = ex.submit(api.post, f"/sessions/{sid}/step", json={"action": "slow"})
        time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        resp = pending.result(timeout=10)
    assert resp.status_code in (200, 410)  # finished before the kill, or lost with it: never a hang
    assert_error(api.post(f"/sessions/{sid}/step", json={"action": "ok"}), 410, "SessionLostError")


@pytest.mark.slow
def test_dedicated_workers_one_process_per_session(api: TestClient) -> None:
    a, b = new_session(api, "soloboom"), new_session(api, "soloboom")
    pid_a, pid_b = worker_pid(api, a), worker_pid(api, b)
    assert pid_a != pid_b
    assert api.get("/metrics").json()["workers_dedicated"] == 2
    assert_error(api.post("/sessions", json={"env": "soloboom", "task_id": 0}), 429, "TooManySessionsError", "soloboom")
    assert api.delete(f"/sessions/{a}").status_code == 204
    wait_for(lambda: api.get("/metrics").json()["workers_dedicated"] == 1)
    with pytest.raises(ProcessLookupError):
        os.kill(pid_a, 0)
    os.kill(pid_b, signal.SIGKILL)  # a dedicated worker is not replaced: its session is lost
    wait_for(lambda: api.get("/metrics").json()["worker_deaths"] == 1)
    assert_error(api.post(f"/sessions/{b}/step", json={"action": "ok"}), 410, "SessionLostError")
    assert api.get("/metrics").json()["worker_restarts"] == 0
    new_session(api, "soloboom")  # the cap counts live sessions only


@pytest.mark.slow
def test_a_reusing_env_gets_the_worker_its_last_session_left_and_only_that(envs: None,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Still one session per process at a time; a closed session's worker waits for the env's next session, not
    for another env's, and not past its limits: a dead one is not given out, a full idle list stops the rest."""
    from agentrl_core.env_service import pool

    with TestClient(create_app(["reuseboom", "soloboom"], workers=1, idle_workers=1),
                    raise_server_exceptions=False) as tc:
        a, b = new_session(tc, "reuseboom"), new_session(tc, "reuseboom")
        pid_a, pid_b = worker_pid(tc, a), worker_pid(tc, b)
        assert pid_a != pid_b  # two live sessions: two processes
        assert tc.delete(f"/sessions/{a}").status_code == 204
        assert tc.delete(f"/sessions/{b}").status_code == 204  # one idle worker kept (idle_workers=1): b's stops
        wait_for(lambda: tc.get("/metrics").json()["workers_dedicated"] == 1)
        assert tc.get("/metrics").json()["workers_idle"] == 1
        kept = pid_a if _alive(pid_a) else pid_b
        assert not _alive(pid_b if kept == pid_a else pid_a)
        solo = new_session(tc, "soloboom")  # another env never gets it
        assert worker_pid(tc, solo) != kept
        c = new_session(tc, "reuseboom")
        assert worker_pid(tc, c) == kept and tc.get("/metrics").json()["sessions_on_reused_workers"] == 1
        assert tc.post(f"/sessions/{c}/reset", json={"task_id": 0}).status_code == 200  # a fresh env, working
        assert tc.delete(f"/sessions/{c}").status_code == 204
        os.kill(kept, signal.SIGKILL)  # an idle worker that dies is forgotten, not given out
        wait_for(lambda: tc.get("/metrics").json()["workers_idle"] == 0)
        d = new_session(tc, "reuseboom")
        assert worker_pid(tc, d) not in (kept, pid_a, pid_b)
        monkeypatch.setattr(pool, "IDLE_WORKER_S", 0.0)  # an idle worker past its wait stops at the next request
        fresh = worker_pid(tc, d)
        assert tc.delete(f"/sessions/{d}").status_code == 204
        new_session(tc, "soloboom")
        new_session(tc, "reuseboom")
        wait_for(lambda: not _alive(fresh))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
def test_a_burst_of_dedicated_sessions_starts_a_bounded_number_at_once(envs: None, tmp_path: Path) -> None:
    log = tmp_path / "starts.log"
    app = create_app(["slowsolo"], workers=1, worker_starts=2, env_kwargs={"slowsolo": {"log": str(log)}})
    with TestClient(app, raise_server_exceptions=False) as tc, ThreadPoolExecutor(6) as pool:
        sids = list(pool.map(lambda _: new_session(tc, "slowsolo"), range(6)))
        assert len(set(sids)) == 6 and tc.get("/metrics").json()["workers_dedicated"] == 6
    lines = [ln.split() for ln in log.read_text().splitlines() if ln.startswith(("begin", "end"))]  # not "close"
    events = sorted((float(t), +1 if kind == "begin" else -1) for kind, t in lines)
    running = [sum(step for _, step in events[: i + 1]) for i in range(len(events))]
    assert len(events) == 12 and max(running) == 2  # six started, never more than two at once
    with pytest.raises(ValueError, match="start_limit must be >= 1"):
        create_app(["slowsolo"], worker_starts=0)

def test_metrics_report_load(api: TestClient) -> None:
    sid = new_session(api, "countdown")
    for _ in range(3):
        api.post(f"/sessions/{sid}/step", json={"action": "nonsense"})
    m = api.get("/metrics").json()
    assert m["sessions"] == {"boom": 0, "soloboom": 0, "countdown": 1} and m["sessions_total"] == 1
    assert m["steps_total"] == 3 and m["steps_by_env"] == {"countdown": 3} and m["steps_per_s"] > 0
    assert 0 < m["step_latency_ms"]["p50"] <= m["step_latency_ms"]["p99"] <= m["step_latency_ms"]["max"]
    assert m["server_rss_mb"] > 0 and m["workers_rss_mb"] > 0


def test_step_rate_is_not_capped_by_the_kept_window() -> None:
    """2,000 steps/s for 10 s with 10,000 finish times kept: the rate is 2,000, not 10,000 / 10 s = 1,000."""
    from agentrl_core.env_service.server_metrics import StepStats

    now = [0.0]
    stats = StepStats(window=10_000, rate_window_s=10.0, clock=lambda: now[0])
    for i in range(20_000):
        now[0] = i / 2000
        stats.record("countdown", 0.001)
    assert abs(stats.steps_per_s() - 2000) < 1
    slow = StepStats(window=10_000, rate_window_s=10.0, clock=lambda: now[0])
    for _ in range(50):
        slow.record("countdown", 0.001)
    assert slow.steps_per_s() == 5.0  # fewer than the window holds: counted over the whole 10 s


def test_nearest_rank_quantile() -> None:
    values = [float(v) for v in range(1, 101)]
    assert quantile(values, 0.5) == 50.0 and quantile(values, 0.99) == 99.0 and quantile(values, 1.0) == 100.0
    assert quantile([], 0.5) == 0.0 and quantile([7.0], 0.01) == 7.0


def test_agentgym_convention_b(envs: None) -> None:
    with TestClient(create_app(["shopboom"], workers=1)) as api:
        for prefix in ("/shopboom", ""):
            idx = api.post(f"{prefix}/create").json()
            assert isinstance(idx, int)
            assert api.post(f"{prefix}/reset", json={"env_idx": idx, "session_id": 1}).json() == ["ready", None]
            assert api.post(f"{prefix}/reset", json={"env_idx": idx, "item_id": 2}).status_code == 200  # SQLGym's key
            step = api.post(f"{prefix}/step", json={"env_idx": idx, "action": "win"}).json()
            assert step == {"state": "ok", "observation": "ok", "reward": 1.0, "done": True, "info": {"success": True}}
            assert api.get(f"{prefix}/observation", params={"env_idx": idx}).json() == "ok"
            assert api.post(f"{prefix}/close", json={"env_idx": idx}).json() == {"closed": True}
            assert_error(api.get(f"{prefix}/observation", params={"env_idx": idx}), 404, "SessionNotFoundError")
        assert_error(api.post("/reset", json={"env_idx": 0}), 422, "InvalidRequestError", "session_id")


def test_a_named_env_without_its_extra_is_refused(envs: None) -> None:
    with pytest.raises(MissingExtraError, match="agentrl\\[nonexistent\\]"):
        create_app(["needsextra"])
    assert "needsextra" not in registry.available_names()


def test_env_errors_in_workers_keep_their_types(api: TestClient) -> None:
    assert_error(api.post("/sessions", json={"env": "boom", "task_id": 9}), 404, "TaskNotFoundError", "no task 9")
    sid = new_session(api, "boom")
    body = assert_error(api.post(f"/sessions/{sid}/step", json={"action": "boom"}), 500, "EnvServerError", "ZeroDivisionError")
    assert "Traceback" not in body["detail"]
    assert api.get("/health").json()["sessions"] == 1
