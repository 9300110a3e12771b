"""A multi-turn chat conversation as a trainable Trajectory: loss on the assistant's tokens only.

The token layout is the agent loop's (`agentrl_core/rollout/agent_loop.py`), built with the same
`ChatFormat` calls, so SFT teaches the exact ids the model sees and writes when it plays:

    ids = prompt_ids(opening) + Σ_k [ assistant_ids(a_k) + user_turn_ids(u_{k+1}) ]

where `opening` is the optional system message plus the first user message, `assistant_ids(a)`
is encode(a) + [eos] (loss mask 1, unless the message says `"loss": false`) and every other id
has loss mask 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout.trajectory import Trajectory

Message = Mapping[str, Any]
ROLES = ("system", "user", "assistant")


def validate_messages(messages: Sequence[Message]) -> None:
    """Check the shape the agent loop produces: [system]? user (assistant user)* assistant?.

    Raises ValueError naming the first offending message and how to fix it.
    """
    if not messages:
        raise ValueError("empty conversation: it needs at least a user message and an assistant reply")
    for i, m in enumerate(messages):
        if m.get("role") not in ROLES:
            raise ValueError(f"message {i}: role {m.get('role')!r} is not one of {ROLES}")
        if not isinstance(m.get("content"), str):
            raise ValueError(f"message {i}: content must be a string, got {type(m.get('content')).__name__}")
    start = 1 if messages[0]["role"] == "system" else 0
    for i, m in enumerate(messages[start:], start):
        want = "user" if (i - start) % 2 == 0 else "assistant"
        if m["role"] != want:
            raise ValueError(f"message {i}: expected role {want!r}, got {m['role']!r}; after an optional system "
                             "message, user and assistant turns must alternate starting with user "
                             "(merge consecutive turns of the same role first)")
    if not any(m["role"] == "assistant" for m in messages):
        raise ValueError("the conversation has no assistant turn: there is nothing to train on")


def is_trainable(message: Message) -> bool:
    """An assistant message is trained on unless it carries `"loss": False` (AgentGym's flag)."""
    return message["role"] == "assistant" and message.get("loss", True) is not False


def conversation_to_trajectory(
    messages: Sequence[Message], chat: ChatFormat, *, task_id: int = 0, env: str = "sft",
    meta: Mapping[str, Any] | None = None,
) -> Trajectory:
    """Token ids and loss mask of a conversation, spliced turn by turn like the agent loop.

    `prompt_len` is the length of the opening (system + first user turn + generation prompt);
    `loss_mask` is 1 exactly on encode(content) + [eos] of each trainable assistant message.
    """
    validate_messages(messages)
    opening = 2 if messages[0]["role"] == "system" else 1
    traj = Trajectory(task_id=task_id, env=env, group=task_id, sample=0)
    traj.messages = [{"role": m["role"], "content": m["content"]} for m in messages]
    traj.extra = dict(meta or {})
    traj.append(chat.prompt_ids(traj.messages[:opening]), trainable=False)
    traj.prompt_len = len(traj.token_ids)
    for m in messages[opening:]:
        if m["role"] == "assistant":
            traj.append(chat.assistant_ids(m["content"]), trainable=is_trainable(m))
            traj.num_turns += 1
        else:
            traj.append(chat.user_turn_ids(m["content"]), trainable=False)
    traj.success = True
    traj.terminated = True
    return traj


def conversations_to_trajectories(
    conversations: Sequence[Mapping[str, Any]], chat: ChatFormat, *, max_tokens: int | None = None,
) -> list[Trajectory]:
    """Trajectories of `{"messages", "meta"}` records; task ids are the record indices.

    With `max_tokens`, a conversation longer than that is dropped (a truncated demo would teach
    the model to stop mid-episode); if none is left this fails.
    """
    out = []
    for i, conv in enumerate(conversations):
        meta = dict(conv.get("meta") or {})
        traj = conversation_to_trajectory(conv["messages"], chat, task_id=i, env=str(meta.get("env", "sft")),
                                          meta=meta)
        if max_tokens is None or len(traj.token_ids) <= max_tokens:
            out.append(traj)
    if conversations and not out:
        raise ValueError(f"every one of {len(conversations)} conversations is longer than {max_tokens} tokens; "
                         "raise the limit or shorten the data")
    return out
