"""Serving: an OpenAI-compatible HTTP server over agentrl's engines (see `openai_server`).

Importing this package is cheap: the server module (FastAPI, torch) loads on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OpenAIServerStartError", "create_app", "launch_openai_server", "serve_openai"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from agentrl_core.serving import openai_server

        return getattr(openai_server, name)
    raise AttributeError(f"module 'agentrl_core.serving' has no attribute {name!r}")
