"""A flow's secrets: refuse inline ones in stored parameters, load Prefect Secret blocks the recipe names."""

from __future__ import annotations

import os
from typing import Any

from prefect import get_run_logger

from agentrl_core.config import RecipeConfig
from agentrl_core.errors import ConfigError
from agentrl_core.secrets import PREFECT_PREFIX, block_env_name, secret_fields

HOW = ("pass it as env:VARIABLE (set on the machine that runs the flow: the worker's environment) or "
       "prefect-secret:BLOCK_NAME (a Prefect Secret block), or give a database password through PGPASSWORD/~/.pgpass")


def check_parameters(recipe: RecipeConfig, overrides: list[str], *, recipe_was_sent: bool) -> None:
    """Refuse a credential typed into the flow's stored parameters: any `overrides` item (a plain list,
    stored as sent), and the `recipe` of a deployment run (sent as raw JSON). A recipe object handed to
    the flow in-process is stored redacted, so it may hold one (`agentrl run` moves it out first)."""
    from prefect.runtime import deployment

    inline = [name for name, secret in secret_fields(recipe) if secret.has_inline_secret]
    in_overrides = [name for name in inline if any(o.strip().startswith(f"{name}=") for o in overrides)]
    in_recipe = inline if recipe_was_sent and deployment.id else []
    if in_overrides or in_recipe:
        names = ", ".join(sorted(set(in_overrides + in_recipe)))
        scrubbed = _scrub_parameters()
        raise ConfigError(
            f"{names}: a password or key typed into the flow run's parameters is stored by Prefect in plain text; "
            f"{HOW}. {scrubbed} Consider the credential exposed and rotate it.")


def check_sent_secrets(**named: Any) -> None:
    """Refuse a credential sent as raw JSON to a deployment run (batch-eval, nightly-eval): Prefect has
    stored it in plain text before the flow starts. `named` maps a parameter name to its Secret (or None).
    In-process calls pass secret objects, which Prefect stores redacted, and are accepted."""
    from prefect.runtime import deployment

    if not deployment.id:
        return
    inline = sorted(name for name, secret in named.items() if secret is not None and secret.has_inline_secret)
    if inline:
        scrubbed = _scrub_parameters()
        raise ConfigError(
            f"{', '.join(inline)}: a password or key sent in the deployment run's parameters is stored by Prefect in "
            f"plain text; {HOW}. {scrubbed} Consider the credential exposed and rotate it.")


def _scrub_parameters() -> str:
    """Overwrite this flow run's stored parameters with redacted ones (best effort); says what happened."""
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    from agentrl_core.secrets import redact_text

    try:
        params: dict[str, Any] = dict(flow_run.parameters or {})
        redacted = {k: _redact_value(v, redact_text) for k, v in params.items()}
        with get_client(sync_client=True) as client:
            client.update_flow_run(flow_run.id, parameters=redacted)
    except Exception as exc:  # noqa: BLE001  (the refusal matters more than the scrub)
        return f"(Removing it from the run's stored parameters failed: {type(exc).__name__}.)"
    return "It was removed from this run's stored parameters."


def _redact_value(value: Any, redact: Any) -> Any:
    if isinstance(value, str):
        key, sep, text = value.partition("=")
        return f"{key}={redact(text)}" if sep else redact(value)
    if isinstance(value, list):
        return [_redact_value(v, redact) for v in value]
    if isinstance(value, dict):
        return {k: _redact_value(v, redact) for k, v in value.items()}
    return value


def load_secret_blocks(recipe: RecipeConfig) -> None:
    """Put the value of every Prefect Secret block the recipe names (prefect-secret:NAME) into this
    process's environment (`block_env_name`), where its servers, subprocesses and Ray workers find it."""
    from prefect.blocks.system import Secret as SecretBlock

    for name, secret in secret_fields(recipe):
        if not secret.is_reference or not secret.shown.startswith(PREFECT_PREFIX):
            continue
        block = secret.shown[len(PREFECT_PREFIX):]
        try:
            value = SecretBlock.load(block).get()
        except ValueError as exc:
            raise ConfigError(f"{name}: cannot load the Prefect Secret block {block!r} ({exc}); create it with "
                              f"`prefect block create secret` or in the UI (Blocks → Secret)") from None
        os.environ[block_env_name(block)] = str(value)
        get_run_logger().info("%s: loaded from the Prefect Secret block %r", name, block)


def prepare_secrets(recipe: RecipeConfig, overrides: list[str], *, recipe_was_sent: bool) -> None:
    """What a flow does with its recipe's secrets before any work: `check_parameters`, `load_secret_blocks`."""
    check_parameters(recipe, overrides, recipe_was_sent=recipe_was_sent)
    load_secret_blocks(recipe)
