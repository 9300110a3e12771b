"""The native rollout engine: kept KV caches, continuous batching and packed forwards (see engine.py)."""

from agentrl_core.rollout.native.engine import NativeEngine
from agentrl_core.rollout.native.forward import SUPPORTED_TYPES, native_support

__all__ = ["NativeEngine", "SUPPORTED_TYPES", "native_support"]
