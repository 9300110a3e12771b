"""The environment client: ONE httpx client for the env server, and RemoteEnv (the Env contract over HTTP).

Transient failures (connection errors, timeouts, 429, 502/503/504) are retried a bounded number
of times with exponential backoff; a step that names its number (RemoteEnv's do) is sent again when its
answer was lost or the server refused it (429/503), the server answering a resend of the step it took
last with that step's result instead of applying it twice; a step without one only when the connection
was never made (it may otherwise have been applied); a session's creation also when the server refused it
(429/503: nothing was created) but never after a sent request went unanswered: resending it would
start a second session, and a worker process with it, beside the one the server may still be starting.
Every other failure becomes a typed exception named for the boundary (see `agentrl_core.envs.errors`).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import httpx

from agentrl_core.env_service.env_api import (
    CreateSessionRequest,
    EnvInfo,
    ErrorResponse,
    ExpertResponse,
    ResetRequest,
    SessionResponse,
    StepRequest,
    StepResponse,
    TaskIdsResponse,
)
from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.errors import (
    EnvError,
    EnvServerError,
    EnvServerUnavailable,
    EnvTimeoutError,
    InvalidRequestError,
    ResetNeededError,
    SessionLostError,
    SessionNotFoundError,
    StepOutOfOrderError,
    TaskNotFoundError,
    TooManySessionsError,
    UnknownEnvError,
)
from agentrl_core.errors import MissingExtraError
from agentrl_core.secrets import redact_text
from agentrl_core.web.auth import auth_headers

TRANSIENT_STATUS = frozenset({429, 502, 503, 504})
REFUSED_STATUS = frozenset({429, 503})
"""Answers that say the server did nothing (too many sessions, unavailable): safe to send again."""
MAX_BACKOFF_S = 10.0
SESSION_START_TIMEOUT_S = 180.0
"""The least time a session's creation is given: an env with a worker process per session (ALFWorld) starts
one, and the server starts a bounded number at once, so a burst of creations queues there (48 ALFWorld
sessions at once take ~30 s on 2 cores)."""
_BY_NAME: dict[str, type[EnvError]] = {
    cls.__name__: cls
    for cls in (
        UnknownEnvError, SessionNotFoundError, TaskNotFoundError, ResetNeededError,
        InvalidRequestError, TooManySessionsError, EnvServerError, SessionLostError, EnvTimeoutError,
        MissingExtraError, StepOutOfOrderError,
    )
}
_BY_STATUS: dict[int, type[EnvError]] = {
    409: ResetNeededError, 422: InvalidRequestError, 429: TooManySessionsError,
    502: EnvServerUnavailable, 503: EnvServerUnavailable, 504: EnvServerUnavailable,
}


def error_from_response(resp: httpx.Response, attempts: int = 1) -> EnvError:
    """The typed exception for a non-2xx response (by the body's `error` name, else by status)."""
    request = resp.request
    where = f"HTTP {resp.status_code} from {request.method} {request.url.path}"
    if attempts > 1:
        where += f", {attempts} attempts"
    try:
        body = ErrorResponse.model_validate(resp.json())
        name, detail = body.error, body.detail
    except (ValueError, TypeError):  # not our server, or a proxy's HTML page
        name, detail = "", resp.text[:300] or resp.reason_phrase
    cls = _BY_NAME.get(name) or _BY_STATUS.get(resp.status_code)
    if cls is None:
        cls = InvalidRequestError if 400 <= resp.status_code < 500 else EnvServerError
    if name == "NotFound":  # a route that does not exist: most likely a wrong base URL
        detail += " (is the base URL an agentrl env server?)"
    exc = cls(f"{detail} ({where})")
    exc.status_code = resp.status_code  # type: ignore[attr-defined]
    return exc


def _retry_after(resp: httpx.Response) -> float:
    """The server's Retry-After in seconds (0 if absent or not a number)."""
    try:
        return max(0.0, float(resp.headers.get("Retry-After", "0")))
    except ValueError:
        return 0.0


class EnvClient:
    """Talks to one env server. `close(sid)` closes a session; `close()` closes the client."""

    def __init__(
        self,
        base_url: str,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
        *,
        transport: httpx.BaseTransport | None = None,
        http: Any = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`retries`: extra attempts after the first; the k-th waits `backoff * 2**k` s (capped).

        `transport` (e.g. httpx.MockTransport) or a ready `http` client with httpx.Client's
        `request`/`close` (e.g. FastAPI's TestClient) replace the network, for tests.
        """
        if retries < 0 or backoff < 0:
            raise ValueError(f"retries and backoff must be >= 0, got {retries}, {backoff}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._sleep = sleep
        self._http = http or httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport,
                                          headers=auth_headers())  # AGENTRL_SERVER_TOKEN, when set

    # -- transport -----------------------------------------------------------------------------
    def _request(
        self, method: str, path: str, *, json: Any = None, params: Any = None, repeatable: bool = True,
        retry_refused: bool | None = None, resend_unanswered: bool | None = None,
        timeout: tuple[float, float, float, float] | None = None,
    ) -> httpx.Response:
        """Send with bounded retries; `repeatable=False` retries only when nothing reached the server, or
        (`retry_refused`, default `repeatable`) when it answered that it did nothing (REFUSED_STATUS), or
        (`resend_unanswered`, default `repeatable`) when a sent request's answer never came.
        `timeout`: this request's (connect, read, write, pool) seconds, instead of the client's: a plain tuple,
        which httpx and httpx2 clients both take (Starlette's TestClient is built on httpx2 where it is installed)."""
        retry_refused = repeatable if retry_refused is None else retry_refused
        resend_unanswered = repeatable if resend_unanswered is None else resend_unanswered
        extra = {} if timeout is None else {"timeout": timeout}
        last: str = ""
        last_resp: httpx.Response | None = None  # set when the last failure was a transient status
        for attempt in range(self.retries + 1):
            if attempt:
                retry_after = _retry_after(last_resp) if last_resp is not None else 0.0
                self._sleep(min(max(self.backoff * 2 ** (attempt - 1), retry_after), MAX_BACKOFF_S))
            last_resp = None
            try:
                resp = self._http.request(method, path, json=json, params=params, **extra)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                last = f"{type(exc).__name__}: {exc}"  # the request never reached the server: safe to resend
                continue
            except httpx.TransportError as exc:
                if not resend_unanswered:
                    raise EnvServerUnavailable(
                        f"{method} {path} failed after the request was sent ({type(exc).__name__}: {exc}); "
                        "it may have been applied, so it was not retried"
                    ) from exc
                last = f"{type(exc).__name__}: {exc}"
                continue
            if resp.is_success:
                return resp
            retry = repeatable and resp.status_code in TRANSIENT_STATUS
            if not (retry or (retry_refused and resp.status_code in REFUSED_STATUS)):
                raise error_from_response(resp)
            last_resp = resp
        if last_resp is not None:  # still overloaded: the server's own words are the best message
            raise error_from_response(last_resp, attempts=self.retries + 1)
        raise EnvServerUnavailable(
            f"{method} {redact_text(self.base_url)}{path}: gave up after {self.retries + 1} attempts; last: {last}. "
            "Is the env server running (agentrl_core.env_service.launch_server / "
            "python -m agentrl_core.env_service.server)?"
        )

    # -- API -----------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return self._request("GET", "/health").json()

    def envs(self) -> list[EnvInfo]:
        return [EnvInfo.model_validate(e) for e in self._request("GET", "/envs").json()]

    def env_info(self, name: str) -> EnvInfo:
        return EnvInfo.model_validate(self._request("GET", f"/envs/{name}").json())

    def task_ids(self, env: str, split: str) -> list[int]:
        resp = self._request("GET", f"/envs/{env}/tasks", params={"split": split})
        return TaskIdsResponse.model_validate(resp.json()).task_ids

    def create(
        self, env: str, task_id: int, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[int, str, dict[str, Any]]:
        """Create a session and reset it: (session_id, observation, info). Given at least
        SESSION_START_TIMEOUT_S, and not sent again once sent (see the module docstring)."""
        body = CreateSessionRequest(env=env, task_id=task_id, seed=seed, options=options).model_dump()
        resp = self._request("POST", "/sessions", json=body, repeatable=False, retry_refused=True,
                             timeout=(self.timeout, max(self.timeout, SESSION_START_TIMEOUT_S), self.timeout, self.timeout))
        out = SessionResponse.model_validate(resp.json())
        return out.session_id, out.observation, out.info

    def reset(
        self, sid: int, task_id: int, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Reset session `sid` to a task: (observation, info)."""
        body = ResetRequest(task_id=task_id, seed=seed, options=options).model_dump()
        out = SessionResponse.model_validate(self._request("POST", f"/sessions/{sid}/reset", json=body).json())
        return out.observation, out.info

    def step(self, sid: int, action: str, number: int | None = None) -> StepResult:
        """One step. With `number` (the steps the session has taken since its reset) it is sent again after a
        lost answer, the server returning the step's result rather than applying it twice; without it, it is
        never resent unless the connection was never made (see the module docstring)."""
        body = StepRequest(action=action, step=number).model_dump(exclude_none=True)
        resp = self._request("POST", f"/sessions/{sid}/step", json=body, repeatable=False,
                             retry_refused=number is not None, resend_unanswered=number is not None)
        out = StepResponse.model_validate(resp.json())
        return StepResult(out.observation, out.reward, out.terminated, out.truncated, out.info)

    def expert(self, sid: int) -> str:
        return ExpertResponse.model_validate(self._request("GET", f"/sessions/{sid}/expert").json()).action

    def close_session(self, sid: int) -> None:
        self._request("DELETE", f"/sessions/{sid}")

    def close(self, sid: int | None = None) -> None:
        """Close session `sid`; without an argument, close this client's connections."""
        if sid is not None:
            self.close_session(sid)
        else:
            self._http.close()

    def __enter__(self) -> "EnvClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RemoteEnv(Env):
    """The Env contract over HTTP: the first reset creates a session, later resets reuse it."""

    def __init__(self, client: EnvClient, env_name: str) -> None:
        super().__init__()
        info = client.env_info(env_name)
        self.client = client
        self.info = info
        # instance attributes shadow the ClassVars of Env with the server's values
        self.name = info.name  # type: ignore[misc]
        self.action_format = info.action_format  # type: ignore[misc]
        self.system_prompt = info.system_prompt  # type: ignore[misc]
        self.reward_range = tuple(info.reward_range)  # type: ignore[misc]
        self.max_steps = info.max_steps
        self.session_id: int | None = None
        self.steps = 0  # since the last reset: each step names its number, so a lost answer is resent safely
        self._task_ids: dict[str, list[int]] = {}

    def task_ids(self, split: str) -> Sequence[int]:
        if split not in self._task_ids:
            self._task_ids[split] = self.client.task_ids(self.name, split)
        return self._task_ids[split]

    def reset(
        self, *, task_id: int, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Create the session on first use; later resets reuse it."""
        if self.session_id is None:
            self.session_id, obs, info = self.client.create(self.name, task_id, seed, options)
        else:
            obs, info = self.client.reset(self.session_id, task_id, seed, options)
        self._active, self.steps = True, 0
        return obs, info

    def step(self, action: str) -> StepResult:
        """The server decides (409 -> ResetNeededError), so the contract is checked over the wire."""
        if self.session_id is None:
            raise ResetNeededError(f"{self.name}: call reset() before step()")
        result = self.client.step(self.session_id, action, self.steps)
        self.steps += 1
        self._active = not (result.terminated or result.truncated)
        return result

    def _reset(self, *, task_id: int, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return self.reset(task_id=task_id, seed=seed, options=options)

    def _step(self, action: str) -> StepResult:
        return self.step(action)

    def expert_action(self) -> str:
        if self.session_id is None:
            raise ResetNeededError(f"{self.name}: call reset() before expert_action()")
        return self.client.expert(self.session_id)

    def close(self) -> None:
        """Delete the server session (the client stays open: it may be shared)."""
        if self.session_id is not None:
            try:
                self.client.close_session(self.session_id)
            except SessionNotFoundError:
                pass  # already gone (expired or closed): nothing to release
            self.session_id = None
        self._active = False
