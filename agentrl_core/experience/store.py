"""The experience store: SQL rows (SQLAlchemy 2.0; SQLite or PostgreSQL) plus in-memory vectors for top-k.

One table, portable types only. An experience is unique per (env, sha256(content)): adding the
same lesson again is counted as a duplicate, not stored twice. Each row keeps the float32
embedding of its `when_to_use` as bytes; on open all vectors are loaded into one matrix, and
every insert appends to it, so retrieval never reads the table:
    sim_i = v_i · q  (rows and query L2-normalised, so this is the cosine), top-k by sim desc, id asc,
among the rows of the requested env with score >= min_score.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Sequence

import numpy as np
from sqlalchemy import DateTime, Float, Integer, LargeBinary, String, Text, UniqueConstraint, create_engine, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from agentrl_core.experience.summarise import ExperienceRecord

Embed = Callable[[Sequence[str]], np.ndarray]


class _Base(DeclarativeBase):
    pass


class ExperienceRow(_Base):
    __tablename__ = "experiences"
    __table_args__ = (UniqueConstraint("env", "content_hash", name="uq_experience_env_content"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    env: Mapped[str] = mapped_column(String(128), index=True)
    task_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    when_to_use: Mapped[str] = mapped_column(Text)
    content: Mapped[str] = mapped_column(Text)
    content_hash: Mapped[str] = mapped_column(String(64))
    score: Mapped[float] = mapped_column(Float)
    embedding: Mapped[bytes] = mapped_column(LargeBinary)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))


@dataclass(frozen=True)
class Hit:
    """A retrieved experience and its cosine similarity to the query."""

    id: int
    record: ExperienceRecord
    similarity: float


def content_hash(content: str) -> str:
    """sha256 of the lesson text with runs of whitespace collapsed (so reflowed text is the same lesson)."""
    return hashlib.sha256(" ".join(content.split()).encode()).hexdigest()


def safe_url(url: str) -> str:
    """The URL with any password hidden, for logs and /stats."""
    return make_url(url).render_as_string(hide_password=True)


class ExperienceStore:
    """Add and retrieve experiences; `embed(texts) -> [n, d]` float32 with unit rows, called only for new rows."""

    def __init__(self, url: str, embed: Embed) -> None:
        self.url, self.embed = url, embed
        self.engine = create_engine(url)
        _Base.metadata.create_all(self.engine)
        self._lock = threading.Lock()
        self._load()

    def _load(self) -> None:
        with Session(self.engine) as s:
            rows = s.execute(select(ExperienceRow).order_by(ExperienceRow.id)).scalars().all()
        self._ids = np.array([r.id for r in rows], dtype=np.int64)
        self._envs = np.array([r.env for r in rows], dtype=object)
        self._scores = np.array([r.score for r in rows], dtype=np.float64)
        self._records = {r.id: _record(r) for r in rows}
        self._keys = {(r.env, r.content_hash) for r in rows}
        vecs = [np.frombuffer(r.embedding, dtype=np.float32) for r in rows]
        self._matrix = np.stack(vecs) if vecs else None

    def __len__(self) -> int:
        return len(self._ids)

    def counts_by_env(self) -> dict[str, int]:
        envs, counts = np.unique(self._envs.astype(str), return_counts=True) if len(self) else ([], [])
        return {str(e): int(c) for e, c in zip(envs, counts)}

    def add(self, records: Sequence[ExperienceRecord]) -> tuple[int, int]:
        """Store the records not yet present; returns (added, duplicates)."""
        with self._lock:
            fresh, seen = [], set(self._keys)
            for rec in records:
                key = (rec.env, content_hash(rec.content))
                if key not in seen:
                    seen.add(key)
                    fresh.append((rec, key[1]))
            if fresh:
                self._insert(fresh, self._embed_checked([r.when_to_use for r, _ in fresh]))
            return len(fresh), len(records) - len(fresh)

    def _embed_checked(self, texts: list[str]) -> np.ndarray:
        vecs = np.asarray(self.embed(texts), dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[0] != len(texts):
            raise ValueError(f"the embedder returned shape {vecs.shape} for {len(texts)} texts")
        if self._matrix is not None and vecs.shape[1] != self._matrix.shape[1]:
            raise ValueError(f"the embedder gives {vecs.shape[1]}-d vectors but the store at {safe_url(self.url)} "
                             f"holds {self._matrix.shape[1]}-d ones; use the same embedding model or a new database")
        return vecs

    def _insert(self, fresh: list[tuple[ExperienceRecord, str]], vecs: np.ndarray) -> None:
        now = datetime.now(timezone.utc)
        rows = [ExperienceRow(env=r.env, task_id=r.task_id, when_to_use=r.when_to_use, content=r.content,
                              content_hash=h, score=float(r.score), embedding=v.tobytes(), created=now)
                for (r, h), v in zip(fresh, vecs)]
        with Session(self.engine, expire_on_commit=False) as s, s.begin():
            s.add_all(rows)
            s.flush()  # the database assigns the ids
        ids = [r.id for r in rows]
        self._ids = np.concatenate([self._ids, np.array(ids, dtype=np.int64)])
        self._envs = np.concatenate([self._envs, np.array([r.env for r, _ in fresh], dtype=object)])
        self._scores = np.concatenate([self._scores, np.array([r.score for r, _ in fresh], dtype=np.float64)])
        self._records.update({i: r for i, (r, _) in zip(ids, fresh)})
        self._keys.update((r.env, h) for r, h in fresh)
        self._matrix = vecs if self._matrix is None else np.concatenate([self._matrix, vecs])

    def search(self, query_vec: np.ndarray, k: int, env: str | None = None, min_score: float | None = None) -> list[Hit]:
        """The k most similar experiences (ties: older first) among env's with score >= min_score."""
        with self._lock:
            if self._matrix is None:
                return []
            keep = np.ones(len(self._ids), dtype=bool)
            if env is not None:
                keep &= self._envs == env
            if min_score is not None:
                keep &= self._scores >= min_score
            idx = np.flatnonzero(keep)
            sims = self._matrix[idx] @ np.asarray(query_vec, dtype=np.float32).reshape(-1)
            order = np.lexsort((self._ids[idx], -sims))[:k]
            return [Hit(int(self._ids[idx[j]]), self._records[int(self._ids[idx[j]])], float(sims[j])) for j in order]

    def retrieve(self, query: str, k: int, env: str | None = None, min_score: float | None = None) -> list[Hit]:
        """search() with the query text embedded by the store's embedder."""
        return self.search(self.embed([query])[0], k, env, min_score)

    def close(self) -> None:
        self.engine.dispose()


def _record(row: ExperienceRow) -> ExperienceRecord:
    return ExperienceRecord(env=row.env, task_id=row.task_id, when_to_use=row.when_to_use, content=row.content,
                            score=row.score)
