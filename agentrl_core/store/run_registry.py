"""The run registry: runs, stages, checkpoints, metrics and evaluation results in one SQL database.

`open_registry(url, root)` opens SQLite at `<root>/registry.db` when `url` is None, or any
SQLAlchemy URL of SQLite/PostgreSQL, and migrates it to the newest schema. Every write is
idempotent on its natural key (run name, stage name, checkpoint URI, (run, stage, step, metric),
the evaluation key), so a retried task never duplicates rows. Reads return frozen records.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, and_, delete, exists, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from agentrl_core.secrets import Secret, reveal
from agentrl_core.store import to_records
from agentrl_core.store.database import make_engine
from agentrl_core.store.disk_full import registry_disk_full
from agentrl_core.store.errors import RegistryError
from agentrl_core.store.migrate import current_revision, upgrade
from agentrl_core.store.records import (
    CHECKPOINT_KINDS,
    RUN_STATUSES,
    STAGE_STATUSES,
    CheckpointRecord,
    EvalRecord,
    MetricRecord,
    RunRecord,
    StageRecord,
)
from agentrl_core.store.schema import Checkpoint, EvalResult, Metric, Run, Stage, utcnow
from agentrl_core.store.urls import redact_url, resolve_url, secrets_of

_CHUNK = 500  # rows per multi-row INSERT (well under SQLite's bound-parameter limit)


def _check_choice(what: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(f"{what} must be one of {list(valid)}, got {value!r}")


def _check_json(what: str, value: Any) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{what} must be JSON-serialisable without NaN/inf ({err}); "
                        "for a config pass cfg.model_dump(mode='json')") from None


def _metric_value(name: str, value: Any) -> float | None:
    """float(value), or None when it is None or not finite (NULL in the table)."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"metric {name!r} must be a number, got {type(value).__name__}: {value!r}") from None
    return number if math.isfinite(number) else None


class Registry:
    """An open run registry; thread-safe (a session per call). Close it with `close()` or `with`."""

    def __init__(self, engine: Engine, url: str) -> None:
        self._engine = engine
        self._url = url
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self._dialect = engine.dialect.name

    @property
    def url(self) -> str:
        """The database URL with its password redacted."""
        return redact_url(self._url)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for migrations and ad-hoc queries)."""
        return self._engine

    def revision(self) -> str | None:
        """The schema revision the database is at."""
        return current_revision(self._engine)

    def close(self) -> None:
        """Release every pooled connection; calling it twice is harmless."""
        self._engine.dispose()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------
    def _error(self, action: str, err: Exception) -> RegistryError:
        message = str(getattr(err, "orig", None) or err).strip().splitlines()[0]
        for secret in secrets_of(self._url):
            message = message.replace(secret, "***")
        return RegistryError(f"registry {self.url}: {action} failed: {message}")

    @contextmanager
    def _tx(self, action: str) -> Iterator[Session]:
        """A session in one transaction, committed at the end; database errors become RegistryError,
        a full disk DiskFullError (the transaction is rolled back: no half-written rows)."""
        try:
            with self._sessions.begin() as session:
                yield session
        except SQLAlchemyError as err:
            raise (registry_disk_full(self._url, err) or self._error(action, err)) from None

    def _insert(self, table):
        if self._dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        return insert(table)

    def _require_run(self, session: Session, run_id: int) -> None:
        if session.get(Run, run_id) is None:
            raise RegistryError(f"registry {self.url}: no run with id {run_id}; create it with ensure_run(name, ...)")

    def _run_id(self, session: Session, name: str) -> int:
        run_id = session.scalar(select(Run.id).where(Run.name == name))
        if run_id is None:
            raise RegistryError(f"registry {self.url}: no run named {name!r}; create it with ensure_run({name!r}, ...)")
        return run_id

    # -- runs and stages ----------------------------------------------------------------------
    def ensure_run(self, name: str, *, recipe: dict, flow_run_id: str | None = None) -> int:
        """Id of the run `name`, created if new; an existing run gets status "running" and this recipe
        (and `flow_run_id` when given)."""
        _check_json("recipe", recipe)
        now = utcnow()
        stmt = self._insert(Run).values(name=name, recipe=recipe, status="running", flow_run_id=flow_run_id,
                                        created_at=now, updated_at=now)
        changes: dict[str, Any] = {"recipe": stmt.excluded.recipe, "status": "running", "updated_at": now}
        if flow_run_id is not None:
            changes["flow_run_id"] = flow_run_id
        stmt = stmt.on_conflict_do_update(index_elements=[Run.name], set_=changes).returning(Run.id)
        with self._tx(f"ensure_run({name!r})") as session:
            return session.scalar(stmt)

    def set_run_status(self, run_id: int, status: str) -> None:
        """Set a run's status: "running", "completed", "failed" or "interrupted" (stopped by a signal)."""
        _check_choice("run status", status, RUN_STATUSES)
        with self._tx(f"set_run_status({run_id})") as session:
            self._require_run(session, run_id)
            session.execute(update(Run).where(Run.id == run_id).values(status=status, updated_at=utcnow()))

    def run(self, name: str) -> RunRecord | None:
        """The run `name`, or None."""
        with self._tx(f"run({name!r})") as session:
            row = session.scalar(select(Run).where(Run.name == name))
            return None if row is None else to_records.run_record(row)

    def runs(self) -> list[RunRecord]:
        """Every run, oldest first."""
        with self._tx("runs()") as session:
            return [to_records.run_record(r) for r in session.scalars(select(Run).order_by(Run.id))]

    def ensure_stage(self, run_id: int, name: str, index: int) -> int:
        """Id of stage `name` of the run, created "pending" if new (an existing one takes this `index`)."""
        stmt = self._insert(Stage).values(run_id=run_id, name=name, index=index, status="pending")
        stmt = stmt.on_conflict_do_update(index_elements=[Stage.run_id, Stage.name],
                                          set_={"index": stmt.excluded.index}).returning(Stage.id)
        with self._tx(f"ensure_stage({run_id}, {name!r})") as session:
            self._require_run(session, run_id)
            return session.scalar(stmt)

    def set_stage_status(self, stage_id: int, status: str, checkpoint_uri: str | None = None) -> None:
        """Set a stage's status; "running" stamps started_at, "completed"/"failed" stamp finished_at."""
        _check_choice("stage status", status, STAGE_STATUSES)
        now = utcnow()
        values: dict[str, Any] = {"status": status}
        if status == "running":
            values.update(started_at=now, finished_at=None)
        elif status in ("completed", "failed"):
            values["finished_at"] = now
        if checkpoint_uri is not None:
            values["checkpoint_uri"] = checkpoint_uri
        with self._tx(f"set_stage_status({stage_id})") as session:
            if session.execute(update(Stage).where(Stage.id == stage_id).values(**values)).rowcount != 1:
                raise RegistryError(f"registry {self.url}: no stage with id {stage_id}; create it with ensure_stage")

    def stages(self, run: str) -> list[StageRecord]:
        """The stages of run `run`, in `index` order."""
        query = select(Stage, Run.name).join(Run, Stage.run_id == Run.id).where(Run.name == run)
        with self._tx(f"stages({run!r})") as session:
            return [to_records.stage_record(s, r) for s, r in session.execute(query.order_by(Stage.index, Stage.id))]

    # -- checkpoints ----------------------------------------------------------------------------
    def add_checkpoint(self, run_id: int, *, stage: str, step: int, uri: str, kind: str,
                       meta: dict | None = None) -> int:
        """Record a checkpoint; adding the same `uri` again returns its id (and replaces `meta` if given).

        The same URI under a different run, stage, step or kind is an error, not an overwrite.
        """
        _check_choice("checkpoint kind", kind, CHECKPOINT_KINDS)
        _check_json("checkpoint meta", meta or {})
        stmt = self._insert(Checkpoint).values(run_id=run_id, stage=stage, step=step, uri=uri, kind=kind,
                                               meta=meta or {}, created_at=utcnow())
        stmt = stmt.on_conflict_do_nothing(index_elements=[Checkpoint.uri]).returning(Checkpoint.id)
        with self._tx(f"add_checkpoint({uri!r})") as session:
            self._require_run(session, run_id)
            new_id = session.scalar(stmt)
            if new_id is not None:
                return new_id
            row = session.scalar(select(Checkpoint).where(Checkpoint.uri == uri))
            if (row.run_id, row.stage, row.step, row.kind) != (run_id, stage, step, kind):
                raise RegistryError(
                    f"registry {self.url}: checkpoint {uri!r} is already recorded as run id {row.run_id}, stage "
                    f"{row.stage!r}, step {row.step}, kind {row.kind!r}; a URI names one checkpoint only")
            if meta is not None:
                row.meta = meta
            return row.id

    def checkpoints(self, *, run: str | None = None, kind: str | None = None) -> list[CheckpointRecord]:
        """Checkpoints, optionally of one run and/or kind, ordered by run then step."""
        query = select(Checkpoint, Run.name).join(Run, Checkpoint.run_id == Run.id)
        if run is not None:
            query = query.where(Run.name == run)
        if kind is not None:
            query = query.where(Checkpoint.kind == kind)
        with self._tx("checkpoints()") as session:
            rows = session.execute(query.order_by(Run.name, Checkpoint.step, Checkpoint.id))
            return [to_records.checkpoint_record(c, r) for c, r in rows]

    def unevaluated(self, *, env: str, split: str, seed: int, k: int, engine: str, kind: str | None = "hf",
                    run: str | None = None) -> list[CheckpointRecord]:
        """Checkpoints (of `kind`, optionally of one run) with no result for this env/split/seed/k/engine."""
        done = exists().where(and_(EvalResult.checkpoint_uri == Checkpoint.uri, EvalResult.env == env,
                                   EvalResult.split == split, EvalResult.seed == seed, EvalResult.k == k,
                                   EvalResult.engine == engine))
        query = select(Checkpoint, Run.name).join(Run, Checkpoint.run_id == Run.id).where(~done)
        if kind is not None:
            query = query.where(Checkpoint.kind == kind)
        if run is not None:
            query = query.where(Run.name == run)
        with self._tx("unevaluated()") as session:
            rows = session.execute(query.order_by(Run.name, Checkpoint.step, Checkpoint.id))
            return [to_records.checkpoint_record(c, r) for c, r in rows]

    # -- metrics --------------------------------------------------------------------------------
    def log_metrics(self, run_id: int, *, stage: str, step: int, metrics: Mapping[str, float | None]) -> None:
        """Upsert one step's scalars; a non-finite or None value is stored as NULL."""
        self.log_metrics_many(run_id, stage=stage, records=[(step, metrics)])

    def log_metrics_many(self, run_id: int, *, stage: str,
                         records: Iterable[tuple[int, Mapping[str, float | None]]]) -> int:
        """Upsert many steps' scalars in one transaction (a later duplicate wins); returns the value count."""
        rows: dict[tuple[int, str], dict[str, Any]] = {}
        for step, metrics in records:
            for name, value in metrics.items():
                rows[(int(step), name)] = {"run_id": run_id, "stage": stage, "step": int(step), "name": name,
                                           "value": _metric_value(name, value)}
        batch = list(rows.values())
        with self._tx(f"log_metrics(run id {run_id}, {stage!r})") as session:
            self._require_run(session, run_id)
            for start in range(0, len(batch), _CHUNK):
                stmt = self._insert(Metric).values(batch[start:start + _CHUNK])
                session.execute(stmt.on_conflict_do_update(
                    index_elements=[Metric.run_id, Metric.stage, Metric.step, Metric.name],
                    set_={"value": stmt.excluded.value}))
        return len(batch)

    def delete_metrics(self, run_id: int, *, stage: str, after_step: int) -> int:
        """Delete a stage's metrics past `after_step` (a run resumed from there rewrote them); returns the count."""
        stmt = delete(Metric).where(Metric.run_id == run_id, Metric.stage == stage, Metric.step > after_step)
        with self._tx(f"delete_metrics(run id {run_id}, {stage!r})") as session:
            return session.execute(stmt).rowcount

    def metrics(self, *, run: str, stage: str | None = None, names: Iterable[str] | None = None) -> list[MetricRecord]:
        """Scalars of run `run` (optionally one stage, some names), ordered by stage, name, step."""
        query = select(Metric, Run.name).join(Run, Metric.run_id == Run.id).where(Run.name == run)
        if stage is not None:
            query = query.where(Metric.stage == stage)
        if names is not None:
            query = query.where(Metric.name.in_(list(names)))
        with self._tx(f"metrics({run!r})") as session:
            rows = session.execute(query.order_by(Metric.stage, Metric.name, Metric.step))
            return [MetricRecord(r, m.stage, m.step, m.name, m.value) for m, r in rows]

    # -- evaluation results -----------------------------------------------------------------------
    @staticmethod
    def _eval_key(checkpoint_uri: str, env: str, split: str, seed: int, k: int, engine: str):
        return and_(EvalResult.checkpoint_uri == checkpoint_uri, EvalResult.env == env, EvalResult.split == split,
                    EvalResult.seed == seed, EvalResult.k == k, EvalResult.engine == engine)

    def has_eval(self, *, checkpoint_uri: str, env: str, split: str, seed: int, k: int, engine: str) -> bool:
        """Whether a result with this key is recorded."""
        query = select(exists().where(self._eval_key(checkpoint_uri, env, split, seed, k, engine)))
        with self._tx(f"has_eval({checkpoint_uri!r}, {env!r})") as session:
            return bool(session.scalar(query))

    def add_eval(self, record: EvalRecord) -> int:
        """Record an evaluation result; the same key again replaces the values. Returns its id."""
        _check_json("eval metrics", record.metrics)
        values = to_records.eval_values(record)
        with self._tx(f"add_eval({record.checkpoint_uri!r}, {record.env!r})") as session:
            values["run_id"] = None if record.run is None else self._run_id(session, record.run)
            stmt = self._insert(EvalResult).values(**values, created_at=utcnow())
            stmt = stmt.on_conflict_do_update(
                index_elements=[EvalResult.checkpoint_uri, EvalResult.env, EvalResult.split, EvalResult.seed,
                                EvalResult.k, EvalResult.engine],
                set_={name: stmt.excluded[name] for name in to_records.EVAL_VALUE_FIELDS + ("run_id",)})
            return session.scalar(stmt.returning(EvalResult.id))

    def evals(self, *, env: str | None = None, checkpoint_uri: str | None = None,
              run: str | None = None) -> list[EvalRecord]:
        """Recorded results, filtered by env, checkpoint and/or run, ordered by their key."""
        query = select(EvalResult, Run.name).outerjoin(Run, EvalResult.run_id == Run.id)
        if env is not None:
            query = query.where(EvalResult.env == env)
        if checkpoint_uri is not None:
            query = query.where(EvalResult.checkpoint_uri == checkpoint_uri)
        if run is not None:
            query = query.where(Run.name == run)
        order = (EvalResult.checkpoint_uri, EvalResult.env, EvalResult.split, EvalResult.seed, EvalResult.k,
                 EvalResult.engine)
        with self._tx("evals()") as session:
            return [to_records.eval_record(e, r) for e, r in session.execute(query.order_by(*order))]

    def delete_eval(self, *, checkpoint_uri: str, env: str, split: str, seed: int, k: int, engine: str) -> bool:
        """Forget one result (so a batch evaluates it again); returns whether one existed."""
        stmt = delete(EvalResult).where(self._eval_key(checkpoint_uri, env, split, seed, k, engine))
        with self._tx(f"delete_eval({checkpoint_uri!r}, {env!r})") as session:
            return session.execute(stmt).rowcount > 0


def _connect_error(url: str, err: Exception, secrets: list[str]) -> RegistryError:
    message = str(getattr(err, "orig", None) or err).strip()
    for secret in secrets:
        message = message.replace(secret, "***")
    return RegistryError(
        f"cannot open the registry at {redact_url(url)}: {message}. Check that the database server is "
        "running and the URL's host, port, user, password and database name; or leave store.registry_url "
        "unset to use SQLite at <run root>/registry.db")


def open_registry(url: str | Secret | None, root: str | Path, *, echo: bool = False) -> Registry:
    """Open (and migrate to the newest schema) the registry at `url` (text, or a secret setting such as
    store.registry_url, revealed here), or SQLite at `<root>/registry.db`."""
    resolved = resolve_url(reveal(url, "store.registry_url"), root)
    secrets = secrets_of(resolved)
    engine = make_engine(resolved, echo=echo)
    try:
        with engine.connect():
            pass
        upgrade(engine)
    except SQLAlchemyError as err:
        engine.dispose()
        raise (registry_disk_full(resolved, err) or _connect_error(resolved, err, secrets)) from None
    except RegistryError:
        engine.dispose()
        raise
    return Registry(engine, resolved)
