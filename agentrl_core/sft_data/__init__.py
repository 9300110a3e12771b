"""SFT datasets: chat conversations as trainable trajectories, ReAct/ADaPT formats, converters, packing."""

from agentrl_core.sft_data.chat_trajectory import (
    conversation_to_trajectory,
    conversations_to_trajectories,
    validate_messages,
)
from agentrl_core.sft_data.conversations import (
    agentgym_to_conversation,
    keep_for_sft,
    load_sft_dataset,
    read_agentgym_json,
    read_conversations,
    read_jsonl,
    rollouts_to_conversations,
    trajectory_to_conversation,
    write_jsonl,
)
from agentrl_core.sft_data.formats import (
    AdaptPlan,
    ReActTurn,
    adapt_plan_messages,
    parse_adapt_plan,
    parse_react,
    render_adapt_plan,
    render_adapt_think,
    render_conversation,
    render_react,
)
from agentrl_core.sft_data.packing import (
    PackedBatch,
    block_causal_mask,
    pack,
    packed_logprobs,
    per_sample_nll,
    plan_packs,
)

__all__ = [
    "AdaptPlan",
    "PackedBatch",
    "ReActTurn",
    "adapt_plan_messages",
    "agentgym_to_conversation",
    "block_causal_mask",
    "conversation_to_trajectory",
    "conversations_to_trajectories",
    "keep_for_sft",
    "load_sft_dataset",
    "pack",
    "packed_logprobs",
    "parse_adapt_plan",
    "parse_react",
    "per_sample_nll",
    "plan_packs",
    "read_agentgym_json",
    "read_conversations",
    "read_jsonl",
    "render_adapt_plan",
    "render_adapt_think",
    "render_conversation",
    "render_react",
    "rollouts_to_conversations",
    "trajectory_to_conversation",
    "validate_messages",
    "write_jsonl",
]
