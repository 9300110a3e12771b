"""SFT conversations from our rollouts and from AgentGym trajectories; a JSONL dataset on disk.

A conversation record is `{"messages": [{"role", "content"[, "loss"]}], "meta": {...}}`; roles are
system / user / assistant, and an assistant message with `"loss": false` is kept as context but
not trained on. One record per line in a JSONL file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout.io import read_trajectories
from agentrl_core.rollout.trajectory import Trajectory
from agentrl_core.sft_data.chat_trajectory import conversations_to_trajectories, validate_messages

Conversation = dict[str, Any]
_AGENTGYM_ROLES = {"human": "user", "gpt": "assistant", "system": "system"}


# -- our rollouts --------------------------------------------------------------------------------
def trajectory_to_conversation(traj: Trajectory) -> Conversation:
    """The messages of a rollout (as the agent loop recorded them) plus where they came from."""
    meta = {"source": "rollout", "env": traj.env, "task_id": traj.task_id, "group": traj.group,
            "sample": traj.sample, "reward": traj.reward, "num_turns": traj.num_turns}
    return {"messages": [{"role": m["role"], "content": m["content"]} for m in traj.messages], "meta": meta}


def keep_for_sft(traj: Trajectory, min_reward: float | None = None) -> bool:
    """Successful, error-free, not truncated, ends on an assistant turn, and reward >= min_reward if given."""
    if traj.error is not None or not traj.success or traj.truncated:
        return False
    if not traj.messages or traj.messages[-1]["role"] != "assistant":
        return False
    return min_reward is None or traj.reward >= min_reward


def rollouts_to_conversations(paths: Iterable[Path], min_reward: float | None = None) -> list[Conversation]:
    """Conversations of the kept trajectories of rollout parquet files (see `keep_for_sft`)."""
    out = []
    for path in paths:
        out.extend(trajectory_to_conversation(t) for t in read_trajectories(Path(path)) if keep_for_sft(t, min_reward))
    return out


# -- AgentGym (AgentTraj-L) ----------------------------------------------------------------------
def agentgym_to_conversation(item: Mapping[str, Any], system: str | None = None) -> Conversation:
    """One AgentTraj item `{"item_id", "conversations": [{"from", "loss", "value"}]}` as a conversation.

    human -> user, gpt -> assistant. A gpt turn with `"loss": false` keeps `"loss": False` (masked
    out); `true` or null means trained on. Consecutive turns of one role are joined with a blank
    line (the template needs alternation). `system`, if given, opens the conversation.
    """
    turns = item.get("conversations")
    if not isinstance(turns, list) or not turns:
        raise ValueError(f"AgentGym item {item.get('item_id')!r} has no 'conversations' list")
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for i, turn in enumerate(turns):
        role = _AGENTGYM_ROLES.get(turn.get("from"))
        if role is None:
            raise ValueError(f"AgentGym item {item.get('item_id')!r} turn {i}: 'from' must be one of "
                             f"{sorted(_AGENTGYM_ROLES)}, got {turn.get('from')!r}")
        msg: dict[str, Any] = {"role": role, "content": str(turn.get("value", ""))}
        if role == "assistant" and turn.get("loss") is False:
            msg["loss"] = False
        if messages and messages[-1]["role"] == role:
            if messages[-1].get("loss", True) != msg.get("loss", True):
                raise ValueError(f"AgentGym item {item.get('item_id')!r} turn {i}: consecutive gpt turns "
                                 "with different loss flags cannot be merged")
            messages[-1]["content"] += "\n\n" + msg["content"]
        else:
            messages.append(msg)
    while messages and messages[-1]["role"] != "assistant":
        messages.pop()  # a trailing observation teaches nothing
    item_id = item.get("item_id")
    env = str(item_id).rsplit("_", 1)[0] if isinstance(item_id, str) and "_" in item_id else "agentgym"
    conv = {"messages": messages, "meta": {"source": "agentgym", "item_id": item_id, "env": env}}
    validate_messages(conv["messages"])
    return conv


def read_agentgym_json(path: Path, system: str | None = None) -> list[Conversation]:
    """Conversations of an AgentGym trajectory file (a JSON list of items)."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of AgentGym items, got {type(data).__name__}")
    return [agentgym_to_conversation(item, system) for item in data]


# -- JSONL dataset -------------------------------------------------------------------------------
def write_jsonl(path: Path, conversations: Sequence[Conversation]) -> Path:
    """Write one conversation per line (validated first; atomically: temp file, then rename)."""
    path = Path(path)
    for i, conv in enumerate(conversations):
        _check_record(conv, f"conversation {i}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w", encoding="utf-8") as f:
        for conv in conversations:
            f.write(json.dumps({"messages": conv["messages"], "meta": conv.get("meta", {})}, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path


def read_jsonl(path: Path) -> list[Conversation]:
    """Read back a JSONL dataset; a malformed line fails with its line number."""
    out = []
    with Path(path).open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                conv = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{n}: not valid JSON ({err})") from err
            _check_record(conv, f"{path}:{n}")
            conv.setdefault("meta", {})
            out.append(conv)
    return out


def _check_record(conv: Any, where: str) -> None:
    if not isinstance(conv, dict) or not isinstance(conv.get("messages"), list):
        raise ValueError(f"{where}: a record must be an object with a 'messages' list")
    if not isinstance(conv.get("meta", {}), dict):
        raise ValueError(f"{where}: 'meta' must be an object")
    try:
        validate_messages(conv["messages"])
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from err


# -- a dataset file for the SFT stage --------------------------------------------------------------
def read_conversations(path: Path) -> list[Conversation]:
    """Conversations of a dataset file: `.jsonl` (our format) or `.json` (an AgentGym trajectory list)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SFT dataset {path} does not exist; set sft.dataset to a .jsonl or .json file")
    if path.suffix == ".jsonl":
        return read_jsonl(path)
    if path.suffix == ".json":
        return read_agentgym_json(path)
    raise ValueError(f"SFT dataset {path}: unknown suffix {path.suffix!r}; use .jsonl (conversations) or "
                     ".json (AgentGym trajectories)")


def load_sft_dataset(path: Path, chat: ChatFormat, max_tokens: int | None = None) -> list[Trajectory]:
    """Trainable trajectories of a dataset file, spliced like the agent loop (see `sft_data.chat`)."""
    convs = read_conversations(path)
    if not convs:
        raise ValueError(f"SFT dataset {path} holds no conversations")
    return conversations_to_trajectories(convs, chat, max_tokens=max_tokens)
