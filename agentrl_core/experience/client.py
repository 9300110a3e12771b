"""The experience pool client: one httpx client, typed errors, wire models in and out."""

from __future__ import annotations

from typing import Any, Iterator, Sequence, TypeVar

import httpx
from pydantic import BaseModel

from agentrl_core.secrets import redact_text
from agentrl_core.web.auth import auth_headers
from agentrl_core.experience.errors import (
    ExperienceError,
    ExperienceRequestError,
    ExperienceServerError,
    ExperienceUnavailableError,
)
from agentrl_core.experience.summarise import ExperienceRecord
from agentrl_core.experience.pool_api import (
    AddRequest,
    AddResponse,
    ErrorResponse,
    ExperienceIn,
    HealthResponse,
    RetrievedExperience,
    RetrieveRequest,
    RetrieveResponse,
    StatsResponse,
    SummariseRequest,
    SummariseResponse,
    TrajectoryIn,
)

MAX_REQUEST_BYTES = 4 << 20
"""Most bytes of trajectories (or experiences) sent in one request. `summarise` and `add` split a larger
batch into several requests, so the largest request a run sends stays a quarter of the pool's body limit
(service.MAX_BODY_BYTES) however many trajectories a step has (one over this size goes alone)."""
MAX_REQUEST_ITEMS = 10_000
"""Most trajectories (or experiences) in one request: the pool API's cap (pool_api.SummariseRequest)."""

M = TypeVar("M", bound=BaseModel)


def request_batches(items: Sequence[M], max_bytes: int = MAX_REQUEST_BYTES,
                    max_items: int = MAX_REQUEST_ITEMS) -> Iterator[list[M]]:
    """`items` in order, in consecutive batches of at most `max_items` whose JSON is at most `max_bytes`
    (an item larger than that forms a batch alone). No items: one empty batch (the request is still sent)."""
    batch: list[M] = []
    size = 0
    for item in items:
        n = len(item.model_dump_json().encode())
        if batch and (size + n > max_bytes or len(batch) == max_items):
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += n
    if batch or not items:
        yield batch


def error_from_response(resp: httpx.Response) -> ExperienceError:
    """The typed exception for a non-2xx response: 4xx → ExperienceRequestError, 5xx → ExperienceServerError."""
    try:
        body = ErrorResponse.model_validate(resp.json())
        detail = f"{body.error}: {body.detail}"
    except ValueError:
        detail = resp.text[:500]
    where = f"{resp.request.method} {resp.request.url.path}"
    cls = ExperienceRequestError if resp.status_code < 500 else ExperienceServerError
    return cls(f"experience pool answered {resp.status_code} to {where}: {detail}")


class ExperienceClient:
    """Talks to one pool: `summarise`, `add`, `retrieve`, `stats`, `health`. A context manager.

    `max_request_bytes` caps one request's trajectories (or experiences); larger batches are split.
    """

    def __init__(self, url: str, timeout: float = 60.0, *, max_request_bytes: int = MAX_REQUEST_BYTES) -> None:
        self.url = url.rstrip("/")
        self.max_request_bytes = max_request_bytes
        self._http = httpx.Client(base_url=self.url, timeout=timeout, headers=auth_headers())  # AGENTRL_SERVER_TOKEN
        self.shown = redact_text(self.url)  # for messages: no credentials

    def _request(self, method: str, path: str, body: BaseModel | None, out: type[BaseModel]) -> Any:
        try:
            resp = self._http.request(method, path, json=None if body is None else body.model_dump(mode="json"))
        except httpx.TimeoutException as err:
            raise ExperienceUnavailableError(f"experience pool at {self.shown} timed out on {path}: {err}") from None
        except httpx.TransportError as err:
            raise ExperienceUnavailableError(
                f"cannot reach the experience pool at {self.shown} ({type(err).__name__}: {err}); is it running?"
            ) from None
        if resp.status_code >= 400:
            raise error_from_response(resp)
        return out.model_validate(resp.json())

    def health(self) -> HealthResponse:
        return self._request("GET", "/health", None, HealthResponse)

    def stats(self) -> StatsResponse:
        return self._request("GET", "/stats", None, StatsResponse)

    def summarise(self, trajectories: Sequence[TrajectoryIn | dict[str, Any]], *, include_failures: bool = False,
                  min_score: float = 0.0) -> SummariseResponse:
        """Send trajectories (wire models or dicts with env, task_id, messages, reward, success) to be summarised."""
        trajs = [t if isinstance(t, TrajectoryIn) else TrajectoryIn.model_validate(t) for t in trajectories]
        total = SummariseResponse(received=0, added=0, duplicates=0, skipped=0)
        for batch in request_batches(trajs, self.max_request_bytes):  # each request well under the pool's body limit
            body = SummariseRequest(trajectories=batch, include_failures=include_failures, min_score=min_score)
            part = self._request("POST", "/summarise", body, SummariseResponse)
            total = SummariseResponse(received=total.received + part.received, added=total.added + part.added,
                                      duplicates=total.duplicates + part.duplicates,
                                      skipped=total.skipped + part.skipped)
        return total

    def add(self, records: Sequence[ExperienceRecord]) -> AddResponse:
        """Store already summarised experiences."""
        added = duplicates = 0
        for batch in request_batches([ExperienceIn(**r.to_dict()) for r in records], self.max_request_bytes):
            part = self._request("POST", "/experiences", AddRequest(experiences=batch), AddResponse)
            added, duplicates = added + part.added, duplicates + part.duplicates
        return AddResponse(added=added, duplicates=duplicates)

    def retrieve(self, query: str, *, env: str | None = None, k: int = 3,
                 min_score: float | None = None) -> list[RetrievedExperience]:
        body = RetrieveRequest(query=query, env=env, k=k, min_score=min_score)
        return self._request("POST", "/retrieve", body, RetrieveResponse).experiences

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "ExperienceClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
