"""Wire types: the pydantic request/response models shared by the experience service and its client."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Request(BaseModel):
    """Requests reject unknown keys, so a typo is a 422 naming the key rather than a silent default."""

    model_config = ConfigDict(extra="forbid")


class Message(_Request):
    role: Literal["system", "user", "assistant"]
    content: str


class TrajectoryIn(_Request):
    """The part of a trajectory a summariser reads: the chat, where it ran, and how it ended.

    `messages` must be the chat WITHOUT any injected experience block (the client removes it).
    """

    env: str = Field(min_length=1)
    task_id: int | None = None
    messages: list[Message] = Field(min_length=2)
    reward: float
    success: bool


class SummariseRequest(_Request):
    trajectories: list[TrajectoryIn] = Field(max_length=10_000)
    include_failures: bool = False
    """Also store a "what not to do" lesson from failed trajectories."""
    min_score: float = 0.0
    """Successful trajectories with a reward below this are skipped."""


class SummariseResponse(BaseModel):
    received: int
    added: int
    duplicates: int
    skipped: int
    """Trajectories that gave no experience (failed without include_failures, below min_score, no actions)."""


class ExperienceIn(_Request):
    """An already summarised experience (e.g. by a model summariser running next to the engine)."""

    env: str = Field(min_length=1)
    task_id: int | None = None
    when_to_use: str = Field(min_length=1, max_length=20_000)
    content: str = Field(min_length=1, max_length=20_000)
    score: float = 0.0


class AddRequest(_Request):
    experiences: list[ExperienceIn] = Field(max_length=10_000)


class AddResponse(BaseModel):
    added: int
    duplicates: int


class RetrieveRequest(_Request):
    query: str = Field(min_length=1, max_length=20_000)
    env: str | None = None
    """Only experiences of this env (None: any env)."""
    k: int = Field(3, ge=1, le=100)
    min_score: float | None = None
    """Only experiences whose score is at least this."""


class RetrievedExperience(BaseModel):
    id: int
    env: str
    task_id: int | None
    when_to_use: str
    content: str
    score: float
    similarity: float
    """Cosine similarity of the query's and the experience's `when_to_use` embeddings."""


class RetrieveResponse(BaseModel):
    experiences: list[RetrievedExperience]


class StatsResponse(BaseModel):
    experiences: int
    by_env: dict[str, int]
    summarised: int
    """Trajectories received by /summarise since the service started."""
    retrievals: int
    embedded_texts: int
    """Distinct texts the embedding model has computed (each is cached)."""
    db: str
    """The database URL, password hidden."""


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"
    experiences: int


class ErrorResponse(BaseModel):
    """Body of every non-2xx response: `error` names the failure, `detail` says what to fix."""

    error: str
    detail: str
