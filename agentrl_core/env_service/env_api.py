"""Wire types: the pydantic request/response models shared by the env server and its client.

Native API (one server for every env) and AgentGym's convention A (`/create`, `/reset`, `/step`,
`/observation`, `/available_actions`, `/detail`, `/close`) for clients users already have.
Errors travel as a real HTTP status plus an `ErrorResponse` body naming the error type.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator


def _refuse_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("must be an integer, not true/false")
    return value


WireInt = Annotated[int, BeforeValidator(_refuse_bool)]
"""An integer field of a request (an id, a task index, a seed): JSON true/false are refused, where
pydantic would read them as 1/0 and so address session 1 by accident."""


class _Request(BaseModel):
    """Native requests reject unknown keys (a typo is a 422 that names the key, not a silent default)."""

    model_config = ConfigDict(extra="forbid")


# -- native API ----------------------------------------------------------------------------------
class EnvInfo(BaseModel):
    """What a client needs to know about one hosted env."""

    name: str
    action_format: str
    reward_range: tuple[float, float]
    system_prompt: str
    max_steps: int
    split_sizes: dict[str, int]
    version: int = 1
    agentgym_convention: Literal["A", "B"] = "A"


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"
    envs: list[str]
    sessions: int


class MetricsResponse(BaseModel):
    """GET /metrics: load and health figures of the server and its workers."""

    sessions: dict[str, int]
    sessions_total: int
    sessions_created: int
    sessions_closed: int
    sessions_lost: int
    steps_total: int
    steps_by_env: dict[str, int]
    steps_repeated: int = 0
    """Steps sent again (their answer lost on the way) that got their result again instead of being applied twice."""
    steps_per_s: float
    step_latency_ms: dict[str, float]
    workers_shared: int
    workers_dedicated: int
    workers_idle: int = 0
    sessions_on_reused_workers: int = 0
    worker_restarts: int
    worker_deaths: int
    server_rss_mb: float | None
    workers_rss_mb: float | None


class TaskIdsResponse(BaseModel):
    task_ids: list[int]


class CreateSessionRequest(_Request):
    """Create a session of `env` and reset it to `task_id`."""

    env: str
    task_id: WireInt
    seed: WireInt | None = None
    options: dict[str, Any] | None = None


class ResetRequest(_Request):
    task_id: WireInt
    seed: WireInt | None = None
    options: dict[str, Any] | None = None


class SessionResponse(BaseModel):
    """The observation after create or reset."""

    session_id: int
    observation: str
    info: dict[str, Any] = Field(default_factory=dict)


class StepRequest(_Request):
    action: str
    step: int | None = Field(default=None, ge=0)
    """The steps the session has taken since its last reset before this one (0 for the first), when given: an
    idempotency key. A step sent again with the number of the step the session took last, and the same action,
    gets that step's result again instead of being applied twice, so a client may resend a step whose answer
    was lost; any other number is refused (409, StepOutOfOrderError). Without it, a step is applied as sent."""


class StepResponse(BaseModel):
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = Field(default_factory=dict)


class ExpertResponse(BaseModel):
    action: str


class ErrorResponse(BaseModel):
    """Body of every non-2xx response: `error` is the exception type name, `detail` says what to do."""

    error: str
    detail: str


ERROR_STATUS: dict[str, int] = {
    "UnknownEnvError": 404,
    "SessionNotFoundError": 404,
    "TaskNotFoundError": 404,
    "NotFound": 404,
    "ResetNeededError": 409,
    "StepOutOfOrderError": 409,
    "SessionLostError": 410,
    "RequestTooLargeError": 413,
    "InvalidRequestError": 422,
    "TooManySessionsError": 429,
    "EnvServerError": 500,
    "MissingExtraError": 501,
    "EnvTimeoutError": 504,
}
"""Error type name -> HTTP status, as the server sends them."""


# -- AgentGym convention A -----------------------------------------------------------------------
class _AgentGymRequest(BaseModel):
    """AgentGym clients send extra keys (e.g. ALFWorld's `world_type`): accept and ignore them."""

    model_config = ConfigDict(extra="ignore")


class AgentGymCreateResponse(BaseModel):
    id: int


class AgentGymResetRequest(_AgentGymRequest):
    """The task index arrives as `data_idx` (most AgentGym envs) or `game` (ALFWorld)."""

    id: WireInt
    data_idx: WireInt | None = None
    game: WireInt | None = None

    @model_validator(mode="after")
    def _needs_task(self) -> "AgentGymResetRequest":
        if self.data_idx is None and self.game is None:
            raise ValueError("give the task index as `data_idx` (or `game`)")
        return self

    @property
    def task_id(self) -> int:
        return self.data_idx if self.data_idx is not None else int(self.game)  # type: ignore[arg-type]


class AgentGymResetResponse(BaseModel):
    id: int
    observation: str
    available_actions: list[str] = Field(default_factory=list)
    reward: float = 0.0
    done: bool = False


class AgentGymStepRequest(_AgentGymRequest):
    id: WireInt
    action: str


class AgentGymStepResponse(BaseModel):
    observation: str
    reward: float
    done: bool
    available_actions: list[str] = Field(default_factory=list)
    info: dict[str, Any] = Field(default_factory=dict)


class AgentGymCloseRequest(_AgentGymRequest):
    id: WireInt


class AgentGymCloseResponse(BaseModel):
    id: int
    closed: bool = True


# -- AgentGym convention B (WebShop, SQLGym, SearchQA) -------------------------------------------
class AgentGymBResetRequest(_AgentGymRequest):
    """The task index arrives as `session_id` (WebShop), `item_id` (SQLGym) or `id`."""

    env_idx: WireInt
    session_id: WireInt | None = None
    item_id: WireInt | None = None
    id: WireInt | None = None

    @model_validator(mode="after")
    def _needs_task(self) -> "AgentGymBResetRequest":
        if self.session_id is None and self.item_id is None and self.id is None:
            raise ValueError("give the task index as `session_id`, `item_id` or `id`")
        return self

    @property
    def task_id(self) -> int:
        for value in (self.session_id, self.item_id, self.id):
            if value is not None:
                return value
        raise AssertionError("validated above")


class AgentGymBStepRequest(_AgentGymRequest):
    env_idx: WireInt
    action: str


class AgentGymBStepResponse(BaseModel):
    """WebShop/SQLGym name the observation `state`; `observation` carries the same text."""

    state: str
    observation: str
    reward: float
    done: bool
    info: dict[str, Any] = Field(default_factory=dict)


class AgentGymBCloseRequest(_AgentGymRequest):
    env_idx: WireInt


class AgentGymBCloseResponse(BaseModel):
    closed: bool = True
