"""verl-style RL parquet files: read them into task records, write our env tasks in that schema.

One row per task (verl's `RLHFDataset` schema, as its `examples/data_preprocess/*.py` write it):
  data_source: str                     the dataset/env name ("webshop", "openai/gsm8k")
  agent_name: str (optional)           verl agent loop to run ("tool_agent")
  prompt: list<{role: str, content: str}>
  ability: str                         ("math", "shopping", "agent")
  reward_model: {style: str, ground_truth: str}   style "rule" or "interaction"
  extra_info: {split: str, index: int, ..., interaction_kwargs: {name, ...}, tools_kwargs: {...}}
The env of a row is extra_info.env, else interaction_kwargs.name, else data_source. Its task id is
the first present of extra_info.task_id, interaction_kwargs.{task_id, session_id, data_idx,
item_id, game, id} (AgentGym's reset keys), extra_info.index.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrl_core.env_service.client import EnvClient

REQUIRED_COLUMNS = ("data_source", "prompt", "extra_info")
"""Columns every readable file must have."""
SCHEMA_HELP = (
    "a verl RL parquet has data_source (str), prompt (list of {role, content}), ability (str), "
    "reward_model {style, ground_truth}, extra_info {split, index, interaction_kwargs, ...}"
)
ID_KEYS = ("task_id", "session_id", "data_idx", "item_id", "game", "id")
"""interaction_kwargs keys that name a task id, in the order they are tried."""


@dataclass
class TaskRecord:
    """One task row: which env and task, the opening messages, and what a verifier checks."""

    env: str
    task_id: int
    prompt: list[dict[str, str]]
    split: str | None = None
    data_source: str | None = None
    ability: str | None = None
    reward_style: str | None = None
    ground_truth: str | None = None
    agent_name: str | None = None
    extra_info: dict[str, Any] = field(default_factory=dict)


def _as_dict(value: Any, what: str, row: int) -> dict[str, Any]:
    """A struct column value as a dict (a JSON string is decoded; None is empty)."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(f"row {row}: {what} is a string but not JSON ({value[:80]!r})") from None
    if not isinstance(value, dict):
        raise ValueError(f"row {row}: {what} must be a struct/dict, got {type(value).__name__}")
    return value


def _messages(value: Any, row: int) -> list[dict[str, str]]:
    """The prompt as role/content messages (a plain string is one user message)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"row {row}: prompt must be a non-empty list of {{role, content}}, got {value!r:.80}")
    out = []
    for msg in value:
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str) or not isinstance(msg.get("content"), str):
            raise ValueError(f"row {row}: each prompt message needs string role and content, got {msg!r:.80}")
        out.append({"role": msg["role"], "content": msg["content"]})
    return out


def _as_id(value: Any, where: str, row: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit():
        raise ValueError(f"row {row}: {where} = {value!r} is not a non-negative integer task id")
    return int(value)


def task_id_of(extra: dict[str, Any], row: int) -> int:
    """The row's task id (see the module docstring for the order of the keys tried)."""
    if extra.get("task_id") is not None:
        return _as_id(extra["task_id"], "extra_info.task_id", row)
    kwargs = _as_dict(extra.get("interaction_kwargs"), "extra_info.interaction_kwargs", row)
    for key in ID_KEYS:
        if kwargs.get(key) is not None:
            return _as_id(kwargs[key], f"extra_info.interaction_kwargs.{key}", row)
    if extra.get("index") is not None:
        return _as_id(extra["index"], "extra_info.index", row)
    raise ValueError(
        f"row {row}: no task id: set extra_info.task_id, extra_info.interaction_kwargs.<one of {list(ID_KEYS)}> "
        "or extra_info.index"
    )


def env_of(row_data: dict[str, Any], extra: dict[str, Any], row: int) -> str:
    """The row's env: extra_info.env, else interaction_kwargs.name, else data_source."""
    kwargs = _as_dict(extra.get("interaction_kwargs"), "extra_info.interaction_kwargs", row)
    for value in (extra.get("env"), kwargs.get("name"), row_data.get("data_source")):
        if isinstance(value, str) and value:
            return value
    raise ValueError(f"row {row}: no env name in extra_info.env, interaction_kwargs.name or data_source")


def record_from_row(data: dict[str, Any], row: int) -> TaskRecord:
    """One parquet row (as a dict) → TaskRecord; ValueError names the row and the field."""
    extra = _as_dict(data.get("extra_info"), "extra_info", row)
    reward = _as_dict(data.get("reward_model"), "reward_model", row)
    truth = reward.get("ground_truth")
    return TaskRecord(
        env=env_of(data, extra, row),
        task_id=task_id_of(extra, row),
        prompt=_messages(data.get("prompt"), row),
        split=extra.get("split"),
        data_source=data.get("data_source"),
        ability=data.get("ability"),
        reward_style=reward.get("style"),
        ground_truth=None if truth is None else str(truth),
        agent_name=data.get("agent_name"),
        extra_info=extra,
    )


def read_verl_parquet(path: str | Path) -> list[TaskRecord]:
    """Every row of a verl-style parquet as a TaskRecord; ValueError on missing columns or bad rows."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"task file {path} does not exist")
    table = pq.read_table(path)
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise ValueError(f"{path} lacks column(s) {missing} (it has {table.column_names}); {SCHEMA_HELP}")
    try:
        return [record_from_row(data, i) for i, data in enumerate(table.to_pylist())]
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def row_of(record: TaskRecord) -> dict[str, Any]:
    """A TaskRecord as a verl row (the inverse of `record_from_row` for records it produced)."""
    return {
        "data_source": record.data_source if record.data_source is not None else record.env,
        "agent_name": record.agent_name,
        "prompt": [{"role": m["role"], "content": m["content"]} for m in record.prompt],
        "ability": record.ability,
        "reward_model": {"style": record.reward_style, "ground_truth": record.ground_truth},
        "extra_info": record.extra_info,
    }


def write_verl_parquet(records: Sequence[TaskRecord], path: str | Path) -> Path:
    """Write `records` in verl's schema (to a temporary name, then renamed); return the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not records:
        raise ValueError("no task records to write")
    rows = [row_of(r) for r in records]
    fixed = pa.schema([
        ("data_source", pa.string()),
        ("agent_name", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
    ])
    columns = {name: pa.array([r[name] for r in rows], type=fixed.field(name).type) for name in fixed.names}
    columns["extra_info"] = pa.array([r["extra_info"] for r in rows])  # a struct inferred from the dicts
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        pq.write_table(pa.table(columns), tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def env_task_records(
    client: "EnvClient", env: str, split: str, task_ids: Sequence[int], *, agent_name: str | None = "tool_agent"
) -> list[TaskRecord]:
    """Task records of `env`'s `task_ids` from its server: the env's system prompt and each task's
    first observation (one short session per task), an "interaction" reward, ids in extra_info."""
    system = client.env_info(env).system_prompt
    records = []
    for index, task_id in enumerate(task_ids):
        sid, observation, _info = client.create(env, int(task_id))
        client.close_session(sid)
        records.append(TaskRecord(
            env=env, task_id=int(task_id), split=split, data_source=env, ability="agent",
            reward_style="interaction", ground_truth=None, agent_name=agent_name,
            prompt=[{"role": "system", "content": system}, {"role": "user", "content": observation}],
            extra_info={"split": split, "index": index, "task_id": int(task_id), "env": env,
                        "interaction_kwargs": {"name": env, "task_id": int(task_id)}},
        ))
    return records
