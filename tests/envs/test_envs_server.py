"""The env server in-process (FastAPI TestClient): routes, status codes, sessions, AgentGym compatibility."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest
from fastapi.testclient import TestClient

from agentrl_core.env_service.server import _parse_args, create_app
from agentrl_core.envs import registry
from agentrl_core.envs.base import Env, StepResult

HOSTED = ["countdown", "household", "math"]


class Boom(Env):
    """A test env (it runs in the server's worker processes, so it reports through a log file):
    step("boom") raises; step("slow") logs its start and end; step("pid") answers its process id;
    close() logs "close"."""

    name = "boom"
    action_format = "anything"
    system_prompt = "Test."
    max_steps = 5

    def __init__(self, log: str | None = None) -> None:
        super().__init__()
        self.log = log

    def _write(self, line: str) -> None:
        if self.log:
            with open(self.log, "a") as f:
                f.write(line + "\n")

    def task_ids(self, split: str) -> Sequence[int]:
        return [0, 1] if split == "train" else [2]

    def _reset(self, *, task_id: int, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if task_id not in (0, 1, 2):
            from agentrl_core.errors import TaskNotFoundError

            raise TaskNotFoundError(f"boom has no task {task_id}")
        return "ready", {}

    def _step(self, action: str) -> StepResult:
        if action == "boom":
            raise ZeroDivisionError("secret internals")
        if action == "slow":
            self._write(f"start {time.monotonic()}")
            time.sleep(0.05)
            self._write(f"end {time.monotonic()}")
            return StepResult("done waiting", 0.0, False, False, {})
        if action == "pid":
            return StepResult(str(os.getpid()), 0.0, False, False, {})
        return StepResult("ok", 1.0, True, False, {"success": True})

    def expert_action(self) -> str:
        return "win"

    def close(self) -> None:
        self._write("close")
        super().close()


@pytest.fixture()
def boom(monkeypatch: pytest.MonkeyPatch) -> type[Boom]:
    monkeypatch.setitem(registry._REGISTRY, "boom", Boom)
    return Boom


@pytest.fixture()
def boom_log(tmp_path: Path) -> Path:
    return tmp_path / "boom.log"


def log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture()
def api() -> Iterator[TestClient]:
    with TestClient(create_app(HOSTED, workers=2), raise_server_exceptions=False) as tc:
        yield tc


def assert_error(resp: Any, status: int, error: str, *words: str) -> dict[str, str]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error", "detail"} and body["error"] == error, body
    for word in words:
        assert word in body["detail"], body
    return body


# -- native routes ---------------------------------------------------------------------------------
def test_health_and_env_infos(api: TestClient) -> None:
    assert api.get("/health").json() == {"status": "ok", "envs": HOSTED, "sessions": 0}
    infos = {e["name"]: e for e in api.get("/envs").json()}
    assert infos["household"]["split_sizes"] == {"train": 10_000, "test": 500}
    assert infos["countdown"]["max_steps"] == 3 and infos["countdown"]["reward_range"] == [0.0, 1.0]
    assert "<answer>" in infos["countdown"]["action_format"] and infos["household"]["system_prompt"]
    assert api.get("/envs/household").json() == infos["household"]
    assert api.get("/envs/countdown/tasks", params={"split": "test"}).json()["task_ids"] == list(range(5000, 5500))


def test_native_session_flow(api: TestClient) -> None:
    created = api.post("/sessions", json={"env": "countdown", "task_id": 5}).json()
    sid = created["session_id"]
    assert "Target:" in created["observation"] and created["info"]["attempts"] == 0
    again = api.post(f"/sessions/{sid}/reset", json={"task_id": 5, "seed": 1}).json()
    assert again["observation"] == created["observation"]
    expert = api.get(f"/sessions/{sid}/expert").json()["action"]
    step = api.post(f"/sessions/{sid}/step", json={"action": expert}).json()
    assert step == {"observation": step["observation"], "reward": 1.0, "terminated": True, "truncated": False,
                    "info": {"success": True, "attempts": 1, "value": step["info"]["value"]}}
    assert api.get("/health").json()["sessions"] == 1
    assert api.delete(f"/sessions/{sid}").status_code == 204
    assert api.get("/health").json()["sessions"] == 0


# -- errors: real status codes, JSON bodies ---------------------------------------------------------
def test_unknown_env(api: TestClient) -> None:
    assert_error(api.post("/sessions", json={"env": "nope", "task_id": 0}), 404, "UnknownEnvError", "countdown, household")
    assert_error(api.get("/envs/nope"), 404, "UnknownEnvError")
    assert_error(api.get("/envs/nope/tasks"), 404, "UnknownEnvError")
    assert_error(api.post("/nope/create"), 404, "NotFound")


def test_unknown_and_closed_sessions(api: TestClient) -> None:
    assert_error(api.post("/sessions/999/step", json={"action": "look"}), 404, "SessionNotFoundError", "no session 999")
    sid = api.post("/sessions", json={"env": "household", "task_id": 0}).json()["session_id"]
    api.delete(f"/sessions/{sid}")
    for resp in (
        api.post(f"/sessions/{sid}/step", json={"action": "look"}),
        api.post(f"/sessions/{sid}/reset", json={"task_id": 0}),
        api.get(f"/sessions/{sid}/expert"),
        api.delete(f"/sessions/{sid}"),
    ):
        assert_error(resp, 404, "SessionNotFoundError")


def test_step_after_the_episode_ended_is_409(api: TestClient) -> None:
    sid = api.post("/sessions", json={"env": "countdown", "task_id": 1}).json()["session_id"]
    for _ in range(3):
        last = api.post(f"/sessions/{sid}/step", json={"action": "asdf qwerty"})
    assert last.status_code == 200 and last.json()["terminated"]
    assert_error(api.post(f"/sessions/{sid}/step", json={"action": "x"}), 409, "ResetNeededError", "reset()")
    api.post(f"/sessions/{sid}/reset", json={"task_id": 1})
    assert api.post(f"/sessions/{sid}/step", json={"action": "x"}).status_code == 200  # reset revives it


def test_step_before_reset_is_409(api: TestClient) -> None:
    sid = api.post("/household/create").json()["id"]
    assert_error(api.post("/household/step", json={"id": sid, "action": "look"}), 409, "ResetNeededError")
    assert_error(api.post(f"/sessions/{sid}/step", json={"action": "look"}), 409, "ResetNeededError")


def test_task_out_of_range_is_404_and_leaks_no_session(api: TestClient) -> None:
    assert_error(api.post("/sessions", json={"env": "household", "task_id": 10_500}), 404, "TaskNotFoundError", "10500")
    assert_error(api.post("/sessions", json={"env": "countdown", "task_id": -1}), 404, "TaskNotFoundError")
    assert api.get("/health").json()["sessions"] == 0


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", "/sessions", {"env": "countdown"}),
        ("post", "/sessions", {"env": "countdown", "task_id": "three"}),
        ("post", "/sessions", {"env": "countdown", "task_id": 1, "typo": 1}),
        ("post", "/sessions/0/step", {"act": "look"}),
        ("post", "/sessions/abc/step", {"action": "look"}),
        ("get", "/envs/countdown/tasks?split=valid", None),
        ("post", "/household/reset", {"id": 0}),
    ],
)
def test_invalid_body_is_422(api: TestClient, method: str, path: str, body: Any) -> None:
    resp = api.request(method.upper(), path, json=body)
    assert_error(resp, 422, "InvalidRequestError")


def test_too_many_sessions_is_429_with_retry_after() -> None:
    with TestClient(create_app(["countdown"], max_sessions=2)) as api:
        ids = [api.post("/sessions", json={"env": "countdown", "task_id": 0}).json()["session_id"] for _ in range(2)]
        resp = api.post("/sessions", json={"env": "countdown", "task_id": 0})
        assert_error(resp, 429, "TooManySessionsError", "limit of 2")
        assert resp.headers["Retry-After"] == "1"
        assert_error(api.post("/create"), 429, "TooManySessionsError")
        api.delete(f"/sessions/{ids[0]}")
        assert api.post("/sessions", json={"env": "countdown", "task_id": 0}).status_code == 200


def test_env_exception_is_500_without_traceback(boom: type[Boom]) -> None:
    with TestClient(create_app(["boom"]), raise_server_exceptions=False) as api:
        sid = api.post("/sessions", json={"env": "boom", "task_id": 0}).json()["session_id"]
        body = assert_error(api.post(f"/sessions/{sid}/step", json={"action": "boom"}), 500, "EnvServerError", "ZeroDivisionError")
        assert "Traceback" not in body["detail"] and "File " not in body["detail"]
        assert api.post(f"/sessions/{sid}/step", json={"action": "ok"}).status_code == 200  # still serving


# -- session lifecycle -------------------------------------------------------------------------------
def test_session_ids_are_never_reused_across_apis(api: TestClient) -> None:
    seen = []
    for _ in range(3):
        sid = api.post("/sessions", json={"env": "countdown", "task_id": 0}).json()["session_id"]
        api.delete(f"/sessions/{sid}")
        gym_id = api.post("/countdown/create").json()["id"]
        api.post("/countdown/close", json={"id": gym_id})
        seen += [sid, gym_id]
    assert seen == sorted(seen) and len(set(seen)) == len(seen)


def test_idle_sessions_expire(boom: type[Boom], boom_log: Path) -> None:
    now = [1000.0]
    app = create_app(["boom"], session_ttl_s=60, clock=lambda: now[0], env_kwargs={"boom": {"log": str(boom_log)}})
    with TestClient(app) as api:
        old = api.post("/sessions", json={"env": "boom", "task_id": 0}).json()["session_id"]
        now[0] += 50
        kept = api.post("/sessions", json={"env": "boom", "task_id": 0}).json()["session_id"]
        now[0] += 20  # old: 70 s idle, kept: 20 s idle
        assert_error(api.get(f"/sessions/{old}/expert"), 404, "SessionNotFoundError", "expired after 60 s idle")
        assert api.get(f"/sessions/{kept}/expert").status_code == 200
        assert log_lines(boom_log) == ["close"] and api.get("/health").json()["sessions"] == 1


def test_shutdown_closes_all_sessions(boom: type[Boom], boom_log: Path) -> None:
    with TestClient(create_app(["boom"], env_kwargs={"boom": {"log": str(boom_log)}})) as api:
        for _ in range(3):
            api.post("/sessions", json={"env": "boom", "task_id": 0})
        assert log_lines(boom_log) == []
        workers = api.app.state.pool.pids()
    assert log_lines(boom_log) == ["close"] * 3
    for pid in workers:  # the workers are gone too
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_one_session_is_never_stepped_concurrently(boom: type[Boom], boom_log: Path) -> None:
    import concurrent.futures

    with TestClient(create_app(["boom"], env_kwargs={"boom": {"log": str(boom_log)}})) as api:
        sid = api.post("/sessions", json={"env": "boom", "task_id": 0}).json()["session_id"]
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            codes = list(ex.map(lambda _: api.post(f"/sessions/{sid}/step", json={"action": "slow"}).status_code, range(4)))
    assert codes == [200] * 4
    events = [line.split() for line in log_lines(boom_log) if not line.startswith("close")]
    assert [e[0] for e in events] == ["start", "end"] * 4  # never two starts in a row: one at a time


def test_cli_binds_loopback_by_default() -> None:
    args = _parse_args([])
    assert (args.host, args.port, args.envs) == ("127.0.0.1", 0, "")


def test_env_kwargs_reach_the_envs() -> None:
    with TestClient(create_app(["household"], env_kwargs={"household": {"max_steps": 20}})) as api:
        assert api.get("/envs/household").json()["max_steps"] == 20


# -- AgentGym convention A ---------------------------------------------------------------------------
def agentgym_episode(api: TestClient, prefix: str) -> None:
    gid = api.post(f"{prefix}/create").json()["id"]
    reset = api.post(f"{prefix}/reset", json={"id": gid, "game": 7, "world_type": "Text"}).json()
    assert reset["id"] == gid and reset["reward"] == 0.0 and reset["done"] is False
    assert reset["available_actions"] and "Actions: " in reset["observation"]
    assert api.get(f"{prefix}/observation", params={"id": gid}).json() == reset["observation"]
    assert api.get(f"{prefix}/available_actions", params={"id": gid}).json() == reset["available_actions"]
    done = False
    for _ in range(12):
        action = api.get(f"/sessions/{gid}/expert").json()["action"]  # the ids are shared with the native API
        step = api.post(f"{prefix}/step", json={"id": gid, "action": action}).json()
        assert set(step) == {"observation", "reward", "done", "available_actions", "info"}
        if step["done"]:
            done = True
            break
    assert done and step["reward"] == 1.0 and step["info"]["success"] is True
    detail = api.get(f"{prefix}/detail", params={"id": gid}).json()
    assert detail["done"] is True and detail["task_id"] == 7 and detail["env"] == "household"
    assert api.post(f"{prefix}/reset", json={"id": gid, "data_idx": 8}).status_code == 200  # data_idx works too
    assert api.post(f"{prefix}/close", json={"id": gid}).json() == {"id": gid, "closed": True}
    assert_error(api.get(f"{prefix}/observation", params={"id": gid}), 404, "SessionNotFoundError")


def test_agentgym_routes_under_the_env_prefix(api: TestClient) -> None:
    agentgym_episode(api, "/household")


def test_agentgym_routes_at_the_root_of_a_single_env_server() -> None:
    with TestClient(create_app(["household"])) as api:
        agentgym_episode(api, "")


def test_agentgym_route_checks_the_env_of_the_id(api: TestClient) -> None:
    gid = api.post("/countdown/create").json()["id"]
    assert_error(api.post("/household/reset", json={"id": gid, "data_idx": 0}), 404, "SessionNotFoundError", "countdown")
    api.post("/countdown/reset", json={"id": gid, "data_idx": 0})
    assert api.get("/countdown/available_actions", params={"id": gid}).json() == []  # household only
    assert_error(api.post("/countdown/step", json={"id": 12345, "action": "x"}), 404, "SessionNotFoundError")
    assert_error(api.post("/countdown/reset", json={"id": gid, "data_idx": 99_999}), 404, "TaskNotFoundError")
