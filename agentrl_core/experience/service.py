"""The experience pool service: one FastAPI app over an ExperienceStore, run as its own process.

Routes: POST /summarise (trajectories -> rule-based experiences stored; counts back), POST
/experiences (already summarised experiences, e.g. by a model), POST /retrieve (query text, env,
k -> experiences with cosine similarity), GET /stats, GET /health. Failures are real HTTP codes
with an ErrorResponse body: 422 for a malformed request, 400 for a well-formed one that cannot be
served (e.g. a trajectory without a user message), 413 for a body over the limit (MAX_BODY_BYTES),
500 otherwise. The embedding model is loaded on the first request that needs it.

Run: `python -m agentrl_core.experience.service --host 127.0.0.1 --port 8001 --db sqlite:///experience.db`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentrl_core.errors import ServerStartError
from agentrl_core.experience.pool_api import (
    AddRequest,
    AddResponse,
    ErrorResponse,
    HealthResponse,
    RetrievedExperience,
    RetrieveRequest,
    RetrieveResponse,
    StatsResponse,
    SummariseRequest,
    SummariseResponse,
)
from agentrl_core.experience.store import Embed, ExperienceStore, safe_url
from agentrl_core.experience.summarise import ExperienceRecord, summarise_trajectory
from agentrl_core.web.app_runner import add_server_args, init_server_process, run_app
from agentrl_core.web.auth import UnauthenticatedBindError, check_bind, server_token
from agentrl_core.web.body_limit import MIB, BodyLimit, BodySizeLimit
from agentrl_core.web.error_bodies import ErrorKinds, install_error_handlers, respond_with_error_body

log = logging.getLogger(__name__)

DB_ENV = "AGENTRL_EXPERIENCE_DB"
"""The store's URL when launched (launcher.py): the environment keeps a password off the command line."""
MAX_BODY_BYTES = 16 * MIB
"""Largest request body by default: 4x the most ExperienceClient puts in one request (client.MAX_REQUEST_BYTES),
which splits a step's trajectories into requests of at most that size."""
MAX_BODY_ENV = "AGENTRL_EXPERIENCE_MAX_BODY_MB"
"""Raises the pool's body limit (MiB) where no --max-body-mb is given (e.g. for a pool a run starts)."""


class _Counters:
    def __init__(self) -> None:
        self.summarised = 0
        self.retrievals = 0


def create_app(db_url: str, embed: Embed | None = None, *, body_limit: BodyLimit | None = None) -> FastAPI:
    """The app over a store at `db_url`; `embed` defaults to the MiniLM embedder (loaded lazily);
    `body_limit` to MAX_BODY_BYTES (or $AGENTRL_EXPERIENCE_MAX_BODY_MB)."""
    if embed is None:
        from agentrl_core.experience.embed import MiniLMEmbedder

        embed = MiniLMEmbedder()
    store = ExperienceStore(db_url, embed)
    counters = _Counters()
    app = FastAPI(title="agentrl experience pool")
    app.add_middleware(BodySizeLimit, limit=body_limit or BodyLimit.resolve(MAX_BODY_BYTES, MAX_BODY_ENV),
                       error_body=lambda m: ErrorResponse(error="RequestTooLarge", detail=m).model_dump())
    _install_error_handlers(app)
    _routes(app, store, counters, embed)
    app.state.store = store
    return app


def _summarise(store: ExperienceStore, body: SummariseRequest) -> SummariseResponse:
    records: list[ExperienceRecord] = []
    for i, traj in enumerate(body.trajectories):
        try:
            rec = summarise_trajectory(traj, include_failures=body.include_failures, min_score=body.min_score)
        except ValueError as err:
            raise _BadRequest(f"trajectories[{i}]: {err}") from None
        if rec is not None:
            records.append(rec)
    added, duplicates = store.add(records)
    return SummariseResponse(received=len(body.trajectories), added=added, duplicates=duplicates,
                             skipped=len(body.trajectories) - len(records))


def _routes(app: FastAPI, store: ExperienceStore, counters: _Counters, embed: Embed) -> None:
    # plain `def` handlers: FastAPI runs them in its thread pool, so embedding never blocks the loop
    @app.get("/health")
    def health() -> HealthResponse:
        return HealthResponse(experiences=len(store))

    @app.get("/stats")
    def stats() -> StatsResponse:
        return StatsResponse(experiences=len(store), by_env=store.counts_by_env(), summarised=counters.summarised,
                             retrievals=counters.retrievals, embedded_texts=int(getattr(embed, "computed", 0)),
                             db=safe_url(store.url))

    @app.post("/summarise")
    def summarise(body: SummariseRequest) -> SummariseResponse:
        out = _summarise(store, body)
        counters.summarised += len(body.trajectories)
        return out

    @app.post("/experiences")
    def add(body: AddRequest) -> AddResponse:
        records = [ExperienceRecord(e.env, e.task_id, e.when_to_use, e.content, e.score) for e in body.experiences]
        added, duplicates = store.add(records)
        return AddResponse(added=added, duplicates=duplicates)

    @app.post("/retrieve")
    def retrieve(body: RetrieveRequest) -> RetrieveResponse:
        hits = store.retrieve(body.query, body.k, body.env, body.min_score)
        counters.retrievals += 1
        return RetrieveResponse(experiences=[
            RetrievedExperience(id=h.id, env=h.record.env, task_id=h.record.task_id, when_to_use=h.record.when_to_use,
                                content=h.record.content, score=h.record.score, similarity=h.similarity)
            for h in hits])


class _BadRequest(Exception):
    """A well-formed request the pool cannot serve (HTTP 400)."""


def _install_error_handlers(app: FastAPI) -> None:
    """A request the pool cannot serve is a 400; the rest are web.error_bodies' generic kinds."""

    async def bad_request(_: Request, exc: Exception) -> JSONResponse:
        return respond_with_error_body(400, "BadRequest", str(exc))

    kinds = ErrorKinds(invalid="InvalidRequest", unexpected="ExperiencePoolError",
                       http={404: "NotFound", 413: "RequestTooLarge"})
    install_error_handlers(app, respond_with_error_body, kinds, log=log, own=[(_BadRequest, bad_request)])


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:

    p = add_server_args(argparse.ArgumentParser(prog="python -m agentrl_core.experience.service",
                                                description="Serve the agentrl experience pool over HTTP."))
    p.add_argument("--db", default=os.environ.get(DB_ENV, "sqlite:///experience.db"),
                   help=f"SQLAlchemy URL of the store (default: ${DB_ENV}, which keeps a password off the command line)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: a bad database URL or a taken port exits with code 2."""
    from sqlalchemy.exc import ArgumentError, OperationalError


    args = _parse_args(argv)
    init_server_process(args)
    try:
        check_bind(args.host, server_token(), allow_unauthenticated=args.allow_unauthenticated, what="experience pool")
        app: Any = create_app(args.db, body_limit=BodyLimit.resolve(MAX_BODY_BYTES, MAX_BODY_ENV, args.max_body_mb))
        run_app(app, args.host, args.port, log_level=args.log_level, port_file=args.port_file,
                banner=f"agentrl experience pool ({safe_url(args.db)}) on http://{{}}",
                allow_unauthenticated=args.allow_unauthenticated)
    except (ArgumentError, OperationalError, ServerStartError, UnauthenticatedBindError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
