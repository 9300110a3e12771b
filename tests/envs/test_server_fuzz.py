"""Fuzzing the env server's HTTP API (native and AgentGym A/B routes) with random JSON, wrong types, huge and
binary bodies: every request gets a valid answer or a typed 4xx, the server stays up, no session loses data."""

from __future__ import annotations

import json
from typing import Any, Iterator
from urllib.parse import quote

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from agentrl_core.env_service import ServerProcess, launch_server
from tests.fuzzing import Tally, fuzz_settings, json_values, model_text

ENVS = {"household": "A", "countdown": "A", "webshop": "B", "sql": "B"}
"""A light env of each AgentGym convention, twice (the dedicated-process envs share this HTTP layer)."""
CLEAR_ERRORS = {400, 404, 405, 409, 410, 413, 415, 422, 429}
"""Statuses that answer a bad request; every one carries an ErrorResponse {error, detail}."""
REQUEST_TIMEOUT_S = 30.0
AVOID_OFFSET = 10**9
"""A drawn id that happens to be a canary's is moved by this much, so the fuzzer never touches a canary."""


# -- the server and the sessions that must not lose data ----------------------------------------------
class Canary:
    """A session stepped to a known state before the fuzzing, compared with itself afterwards."""

    def __init__(self, http: httpx.Client, env: str, convention: str) -> None:
        self.env, self.convention = env, convention
        self.key = "id" if convention == "A" else "env_idx"
        created = http.post(f"/{env}/create").json()
        self.id = created["id"] if convention == "A" else created
        task = {"data_idx" if convention == "A" else "id": _first_task(http, env)}
        assert http.post(f"/{env}/reset", json={self.key: self.id, **task}).status_code == 200
        action = http.get(f"/sessions/{self.id}/expert").json()["action"]
        assert http.post(f"/{env}/step", json={self.key: self.id, "action": action}).status_code == 200
        self.state = self.detail(http)

    def detail(self, http: httpx.Client) -> dict:
        response = http.get(f"/{self.env}/detail", params={self.key: self.id})
        assert response.status_code == 200, response.text
        return response.json()


def _first_task(http: httpx.Client, env: str) -> int:
    return http.get(f"/envs/{env}/tasks", params={"split": "train"}).json()["task_ids"][0]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with launch_server(list(ENVS), max_sessions=256, workers=2) as srv:
        yield srv


# -- requests ----------------------------------------------------------------------------------------
def _routes() -> list[tuple[str, str, str]]:
    """(method, path, body shape) of every route of the four envs."""
    routes = [("GET", "/health", ""), ("GET", "/metrics", ""), ("GET", "/envs", ""), ("GET", "/envs/{env}", ""),
              ("GET", "/envs/{env}/tasks", "split"), ("POST", "/sessions", "create"),
              ("POST", "/sessions/{sid}/reset", "reset"), ("POST", "/sessions/{sid}/step", "step"),
              ("GET", "/sessions/{sid}/expert", ""), ("DELETE", "/sessions/{sid}", ""),
              ("PUT", "/sessions", "create"), ("GET", "/{junk}", "")]
    for env, convention in ENVS.items():
        key = "id" if convention == "A" else "env_idx"
        routes += [("POST", f"/{env}/create", ""), ("POST", f"/{env}/reset", f"reset-{convention}"),
                   ("POST", f"/{env}/step", f"step-{key}"), ("GET", f"/{env}/observation", f"query-{key}"),
                   ("GET", f"/{env}/available_actions", f"query-{key}"), ("GET", f"/{env}/detail", f"query-{key}"),
                   ("POST", f"/{env}/close", f"close-{key}")]
        if convention == "B":
            routes.append(("GET", f"/{env}/instruction_text", "query-env_idx"))
    return routes


ROUTES = _routes()
ids = st.one_of(st.integers(0, 40), st.integers(-(2**70), 2**70), st.text(max_size=10), st.none(), st.booleans(),
                st.floats(allow_nan=False))
"""A session or task id: small real-looking ones (some exist), huge ones, and the wrong types."""
actions = st.one_of(model_text(), st.sampled_from(["look", "inventory", "search[shirt]", "SELECT 1", "<answer>1"]),
                    json_values(4))


def _shaped_body(shape: str) -> st.SearchStrategy[Any]:
    """A body of the route's own shape, with each field sometimes the wrong type, missing or extra."""
    fields = {
        "create": {"env": st.one_of(st.sampled_from(list(ENVS)), st.text(max_size=12), json_values(3)),
                   "task_id": ids, "seed": ids, "options": st.one_of(st.none(), json_values(4))},
        "reset": {"task_id": ids, "seed": ids, "options": st.one_of(st.none(), json_values(4))},
        "step": {"action": actions},
        "reset-A": {"id": ids, "data_idx": ids, "game": ids, "world_type": st.text(max_size=8)},
        "reset-B": {"env_idx": ids, "session_id": ids, "item_id": ids, "id": ids},
        "step-id": {"id": ids, "action": actions}, "step-env_idx": {"env_idx": ids, "action": actions},
        "close-id": {"id": ids}, "close-env_idx": {"env_idx": ids},
    }.get(shape)
    if fields is None:
        return json_values(6)
    return st.fixed_dictionaries({}, optional={**fields, "extra": json_values(2)})


HUGE = st.sampled_from([1 << 20, 4 << 20, 16 << 20])
"""Sizes (bytes) of the huge bodies: a megabyte of action text, up to sixteen."""


def bodies(shape: str) -> st.SearchStrategy[tuple[str, bytes | None]]:
    """(content type, raw body): shaped or random JSON, binary, truncated JSON, deep nesting, huge."""
    as_json = st.one_of(_shaped_body(shape), _shaped_body(shape), json_values(8)).map(
        lambda v: ("application/json", json.dumps(v).encode()))
    return st.one_of(
        as_json, as_json, as_json,
        st.binary(max_size=300).map(lambda b: ("application/json", b)),
        st.binary(max_size=300).map(lambda b: ("application/octet-stream", b)),
        st.just(("application/json", None)),
        as_json.map(lambda cb: ("application/json", cb[1][: len(cb[1]) // 2])),
        st.sampled_from([10, 1000, 100_000]).map(lambda n: ("application/json", b"[" * n + b"]" * n)),
        st.sampled_from(["action", "id", "env_idx", "task_id"]).flatmap(
            lambda key: HUGE.map(lambda n: ("application/json", json.dumps({key: "x" * n, "id": 1}).encode()))),
        st.just(("text/plain", b"action=look")),
    )


@st.composite
def requests(draw: st.DrawFn) -> dict:
    method, path, shape = draw(st.sampled_from(ROUTES))
    env = draw(st.one_of(st.sampled_from(list(ENVS)), st.sampled_from(["alfworld", "", "..", "%2e%2e"]), model_text(12)))
    fills = {"{env}": env, "{sid}": str(draw(ids)), "{junk}": draw(model_text(20))}
    path = [fills.get(part, part) for part in path.split("/")]  # raw segments: _safe_path quotes them
    params = {}
    if shape.startswith("query-"):
        params = draw(st.fixed_dictionaries({}, optional={shape[len("query-"):]: ids, "x": st.text(max_size=5)}))
    elif shape == "split":
        params = {"split": draw(st.one_of(st.sampled_from(["train", "test"]), st.text(max_size=10)))}
    content_type, body = draw(bodies(shape)) if method in ("POST", "PUT") else ("application/json", None)
    return {"method": method, "path": path, "params": params, "content_type": content_type, "body": body}


_AS_INT = TypeAdapter(int)


def _avoid(value: Any, taken: set[int]) -> Any:
    """`value` with everything the server reads as a canary's id (1, 1.0, "1", " +1 ") moved out of the
    way, in bodies, query params and paths. Booleans stay: the server must refuse them as ids."""
    if isinstance(value, list):
        return [_avoid(v, taken) for v in value]
    if isinstance(value, dict):
        return {k: _avoid(v, taken) for k, v in value.items()}
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return value
    try:
        as_id = _AS_INT.validate_python(value)
    except ValidationError:
        return value
    return as_id + AVOID_OFFSET if as_id in taken else value


def _safe_body(raw: bytes | None, taken: set[int]) -> bytes | None:
    try:
        return json.dumps(_avoid(json.loads(raw), taken)).encode() if raw is not None else None
    except (ValueError, RecursionError):  # not JSON (binary, truncated, too deep): no canary id in it either
        return raw


def _safe_path(segments: list[str], taken: set[int]) -> str:
    return "/".join(quote(str(_avoid(part, taken)), safe="") for part in segments)


# -- the property ----------------------------------------------------------------------------------------
def check_answer(response: httpx.Response, request: dict) -> str:
    """'2xx' for a valid answer, else the ErrorResponse's error name; AssertionError for anything unclear."""
    said = f"{request['method']} {'/'.join(request['path'])[:80]} ({len(request['body'] or b'')} bytes)"
    if response.status_code in (200, 204):
        if response.status_code == 200:
            response.json()  # a valid answer is JSON
        return "2xx"
    assert response.status_code in CLEAR_ERRORS, f"{said}: HTTP {response.status_code} {response.text[:300]}"
    body = response.json()
    assert set(body) == {"error", "detail"} and body["error"] and body["detail"], f"{said}: {body}"
    return f"{response.status_code} {body['error']}"


@pytest.mark.slow
def test_fuzz_env_server_http_api(server: ServerProcess) -> None:
    tally = Tally("env server HTTP")
    with httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT_S, follow_redirects=True) as http:
        canaries = [Canary(http, env, convention) for env, convention in ENVS.items()]
        taken = {c.id for c in canaries}

        @fuzz_settings(ci_examples=300)
        @given(request=requests())
        def one(request: dict) -> None:
            response = http.request(
                request["method"], _safe_path(request["path"], taken), params=_avoid(request["params"], taken),
                content=_safe_body(request["body"], taken), headers={"content-type": request["content_type"]})
            tally.add(check_answer(response, request))
            _close_what_it_opened(http, request, response, taken)
            assert http.get("/health").status_code == 200 and server.alive, "the server went down"

        one()
        for canary in canaries:  # no session lost data
            assert canary.detail(http) == canary.state, canary.env
            stepped = http.post(f"/{canary.env}/step", json={canary.key: canary.id, "action": "look"})
            assert stepped.status_code == (409 if canary.state["done"] else 200), (canary.env, stepped.text)
        metrics = http.get("/metrics").json()
    counts = tally.report()["outcomes"]
    assert counts.get("2xx", 0) >= 10 and sum(counts.values()) - counts.get("2xx", 0) >= 10, counts
    assert metrics["worker_restarts"] == 0, metrics


def _close_what_it_opened(http: httpx.Client, request: dict, response: httpx.Response, taken: set[int]) -> None:
    """Close a session the request created, so the fuzzing never fills the server (429 would hide routes)."""
    if response.status_code != 200 or request["method"] != "POST":
        return
    if request["path"][-1] not in ("create", "sessions"):
        return
    body = response.json()
    sid = body if isinstance(body, int) else body.get("id", body.get("session_id"))
    if isinstance(sid, int) and sid not in taken:
        http.delete(f"/sessions/{sid}")


def test_a_body_over_the_limit_is_a_413_whether_declared_or_chunked(server: ServerProcess) -> None:
    from agentrl_core.env_service.server import MAX_BODY_BYTES

    huge = json.dumps({"action": "x" * MAX_BODY_BYTES}).encode()
    with httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT_S) as http:
        declared = http.post("/sessions/1/step", content=huge, headers={"content-type": "application/json"})
        chunked = http.post("/sessions/1/step", content=iter([huge[i:i + 65536] for i in range(0, len(huge), 65536)]),
                            headers={"content-type": "application/json"})
        assert http.get("/health").status_code == 200
    for response in (declared, chunked):
        assert response.status_code == 413, response.text[:200]
        assert response.json()["error"] == "RequestTooLargeError" and "limit" in response.json()["detail"]


def test_true_is_not_session_1(server: ServerProcess) -> None:
    """Found by the fuzzing: pydantic read JSON true as the id 1, so {"id": true} closed session 1."""
    with httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT_S) as http:
        for body in ({"id": True}, {"id": True, "action": "look"}):
            response = http.post("/household/close" if "action" not in body else "/household/step", json=body)
            assert response.status_code == 422 and "not true/false" in response.json()["detail"], response.text
        reset = http.post("/webshop/reset", json={"env_idx": False, "id": 1})
        assert reset.status_code == 422 and "env_idx" in reset.json()["detail"]
