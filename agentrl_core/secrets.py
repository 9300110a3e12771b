"""Secret settings: a value that may hold a credential, shown redacted and revealed only where used.

A secret setting holds one of:
- a reference, which is not itself secret and is shown as written: `env:VAR` (the environment
  variable VAR of the process that uses it) or `prefect-secret:NAME` (a Prefect `Secret` block; the
  flow loads it into this process's environment, see `block_env_name`);
- a literal (e.g. a URL). Its credentials (a URL's password, `password/secret/token/key` query
  values; the whole text of a non-URL secret such as an API key) are replaced by `***` wherever the
  setting is shown: str(), repr(), logs, and every serialisation of the config (the recipe Prefect
  stores, reports, registry rows, artifacts). Pickle (Ray) keeps the value.

`.reveal()` gives the real value; a redacted literal read back from a stored recipe fails there,
saying how to pass the value instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import core_schema

from agentrl_core.errors import ConfigError

ENV_PREFIX = "env:"
PREFECT_PREFIX = "prefect-secret:"
MASK = "***"
REVEAL = "reveal_secrets"
"""Serialisation context key: `model_dump(context={REVEAL: True})` keeps literals (in-process copies only)."""

_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^:/@?#]*)(?::(?P<pw>[^@/?#]*))?@")
_QUERY_SECRET = re.compile(r"(?P<key>[?&;][^=&#]*(?:password|passwd|secret|token|key|signature|credential)[^=&#]*)="
                           r"(?P<val>[^&#]*)", re.IGNORECASE)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SecretUnavailableError(ConfigError):
    """A secret setting could not be revealed: its variable or block is missing, or it was redacted."""


def block_env_name(block: str) -> str:
    """The environment variable a flow loads Prefect Secret block `block` into (children inherit it)."""
    return "AGENTRL_PREFECT_SECRET_" + re.sub(r"[^A-Za-z0-9]", "_", block).upper()


def redact_text(text: str, *, url: bool = True) -> str:
    """`text` with its credentials masked: a URL's password (or a bare `token@`) and secret query
    values; a non-URL secret (`url=False`) entirely."""
    if not url:
        return MASK if text else text
    match = _USERINFO.match(text)
    if match and (match["pw"] is not None or match["user"]):
        user = match["user"] if match["pw"] is not None else ""  # a bare "token@" is all secret
        text = f"{match['scheme']}{user}:{MASK}@{text[match.end():]}" if user else f"{match['scheme']}{MASK}@{text[match.end():]}"
    return _QUERY_SECRET.sub(lambda m: f"{m['key']}={MASK}", text)


class Secret:
    """A secret setting (see the module docstring): `.reveal()` for the value, `.shown` for display.

    `url=True` (SecretUrl) masks only a URL's credentials, so the host stays visible; `url=False`
    (SecretKey) masks the whole literal.
    """

    __slots__ = ("_text", "_url")

    def __init__(self, text: str, *, url: bool = True) -> None:
        if not isinstance(text, str):
            raise TypeError(f"a secret setting is text, got {type(text).__name__}")
        self._text = text
        self._url = url
        if self.is_reference:
            self._check_reference()

    # -- what it is ----------------------------------------------------------------------------
    @property
    def is_reference(self) -> bool:
        """True for `env:VAR` and `prefect-secret:NAME` (not secret themselves)."""
        return self._text.startswith((ENV_PREFIX, PREFECT_PREFIX))

    @property
    def has_inline_secret(self) -> bool:
        """True when the literal holds a credential (showing it would reveal something)."""
        return not self.is_reference and self.shown != self._text

    @property
    def is_redacted(self) -> bool:
        """True when this literal is a redacted copy (read back from a stored recipe or report)."""
        return not self.is_reference and (MASK in self._text)

    @property
    def shown(self) -> str:
        """What every display and serialisation shows: a reference as written, a literal redacted."""
        return self._text if self.is_reference else redact_text(self._text, url=self._url)

    def _check_reference(self) -> None:
        prefix, _, name = self._text.partition(":")
        if not name or (prefix == "env" and not _ENV_NAME.fullmatch(name)):
            raise ValueError(f"{self._text!r} is not a valid reference: use env:VARIABLE_NAME or prefect-secret:BLOCK_NAME")

    # -- the value -----------------------------------------------------------------------------
    def reveal(self, what: str = "a secret setting") -> str:
        """The real value: the environment variable, the loaded block, or the literal."""
        if self._text.startswith(ENV_PREFIX):
            return _from_env(self._text[len(ENV_PREFIX):], what)
        if self._text.startswith(PREFECT_PREFIX):
            name = self._text[len(PREFECT_PREFIX):]
            value = os.environ.get(block_env_name(name))
            if value is None:
                raise SecretUnavailableError(
                    f"{what}: the Prefect Secret block {name!r} was not loaded in this process; agentrl's flows "
                    f"load it (tasks/secrets.py), or set {block_env_name(name)} in the environment")
            return value
        if self.is_redacted:
            raise SecretUnavailableError(
                f"{what} is a redacted copy ({self.shown!r}): the real value never leaves the process that was "
                "given it. Pass it as env:VARIABLE (set on the machine that runs the flow) or "
                "prefect-secret:BLOCK_NAME (a Prefect Secret block)")
        return self._text

    # -- Python protocols ----------------------------------------------------------------------
    def __str__(self) -> str:
        return self.shown

    def __repr__(self) -> str:
        return f"Secret({self.shown!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._text == self._text

    def __hash__(self) -> int:
        return hash(("Secret", self._text))

    def __reduce__(self) -> tuple[Any, ...]:  # pickle (Ray actors, subprocesses) keeps the value
        return (_restore, (self._text, self._url))

    # -- pydantic ------------------------------------------------------------------------------
    @classmethod
    def _schema(cls, url: bool) -> core_schema.CoreSchema:
        def coerce(value: Any) -> Secret:
            if isinstance(value, Secret):
                return value
            if isinstance(value, str):
                return Secret(value, url=url)
            raise ValueError(f"expected text, got {type(value).__name__}")

        def serialise(value: Secret | str, info: core_schema.SerializationInfo) -> str:
            secret = value if isinstance(value, Secret) else Secret(str(value), url=url)  # set by model_copy
            context = info.context if isinstance(info.context, dict) else {}
            return secret._text if context.get(REVEAL) else secret.shown

        return core_schema.no_info_plain_validator_function(
            coerce, serialization=core_schema.plain_serializer_function_ser_schema(serialise, info_arg=True))


def _restore(text: str, url: bool) -> Secret:
    return Secret(text, url=url)


def _from_env(name: str, what: str) -> str:
    value = os.environ.get(name)
    if value is None:
        raise SecretUnavailableError(f"{what} is env:{name}, but {name} is not set in the environment of this process "
                                     "(set it where the flow runs: the worker's or the shell's environment)")
    return value


class _SecretAnnotation:
    """pydantic glue: validates text into a Secret, serialises it shown (or revealed with REVEAL)."""

    url = True

    @classmethod
    def __get_pydantic_core_schema__(cls, _source: Any, _handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return Secret._schema(cls.url)

    @classmethod
    def __get_pydantic_json_schema__(cls, _schema: Any, _handler: GetJsonSchemaHandler) -> dict[str, Any]:
        kind = "URL" if cls.url else "value"
        return {"type": "string", "description": f"A secret {kind}: env:VAR, prefect-secret:BLOCK, or the "
                                                  "value itself (its credentials are never stored)"}


class _KeyAnnotation(_SecretAnnotation):
    url = False


SecretUrl = Annotated[Secret, _SecretAnnotation]
"""Field type of a URL that may carry credentials (only those are masked: the host stays visible)."""
SecretKey = Annotated[Secret, _KeyAnnotation]
"""Field type of a key or token (wholly masked)."""


def reveal(value: Secret | str | None, what: str = "a secret setting") -> str | None:
    """`value.reveal()` for a Secret, a plain str unchanged, None for None."""
    if value is None or isinstance(value, str):
        return value
    return value.reveal(what)


def worker_environment(model: Any) -> dict[str, str]:
    """The variables a remote worker (a Ray actor on another node) needs to reveal `model`'s secret
    settings and reach the run's servers: each env:VAR that is set, each loaded block, the bearer token.
    The Ray driver puts them in the object store and each actor adopts them (`adopt_worker_environment`)."""
    from agentrl_core.web.auth import TOKEN_ENV

    names = {TOKEN_ENV}
    for _, secret in secret_fields(model):
        text = secret.shown
        if text.startswith(ENV_PREFIX):
            names.add(text[len(ENV_PREFIX):])
        elif text.startswith(PREFECT_PREFIX):
            names.add(block_env_name(text[len(PREFECT_PREFIX):]))
    return {name: os.environ[name] for name in sorted(names) if name in os.environ}


def adopt_worker_environment(environment: Mapping[str, str] | None) -> None:
    """In a remote worker: take the variables `worker_environment` gathered (sent through Ray's object store,
    so they appear in no job or actor metadata) into this process's environment."""
    os.environ.update(environment or {})


def move_inline_secrets(model: Any, prefix: str = "AGENTRL_SECRET_") -> dict[str, str]:
    """Move every credential typed into `model`'s secret settings into this process's environment:
    the setting becomes `env:<prefix><DOTTED_NAME>` (so what is stored and shown is only the reference)
    and that variable holds the value. Returns {dotted name: variable}. `model` is changed in place."""
    moved: dict[str, str] = {}
    for name, secret in secret_fields(model):
        if not secret.has_inline_secret:
            continue
        var = prefix + re.sub(r"[^A-Za-z0-9]", "_", name).upper()
        os.environ[var] = secret.reveal(name)
        *path, field = name.split(".")
        owner = model
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, field, Secret(ENV_PREFIX + var, url=secret._url))
        moved[name] = var
    return moved


def secret_fields(model: Any, prefix: str = "") -> list[tuple[str, Secret]]:
    """(dotted name, Secret) of every set secret setting in a pydantic model tree."""
    from pydantic import BaseModel

    found: list[tuple[str, Secret]] = []
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, Secret):
            found.append((prefix + name, value))
        elif isinstance(value, BaseModel):
            found.extend(secret_fields(value, f"{prefix}{name}."))
    return found
