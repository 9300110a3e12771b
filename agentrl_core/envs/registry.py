"""The environment registry: name -> Env class, so configs and servers can pick envs by name."""

from __future__ import annotations

from typing import Any, TypeVar

from agentrl_core.envs.base import Env
from agentrl_core.errors import UnknownEnvError

E = TypeVar("E", bound=type[Env])

_REGISTRY: dict[str, type[Env]] = {}


def register(cls: E) -> E:
    """Class decorator: register `cls` under `cls.name` (re-registering the same class is a no-op)."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__qualname__} needs a non-empty class attribute `name` to be registered")
    existing = _REGISTRY.get(name)
    same = existing is not None and (existing.__module__, existing.__qualname__) == (cls.__module__, cls.__qualname__)
    if existing is not None and not same:
        raise ValueError(f"env name {name!r} is already registered by {existing.__module__}.{existing.__qualname__}")
    _REGISTRY[name] = cls
    return cls


def names() -> list[str]:
    """Registered environment names, sorted."""
    return sorted(_REGISTRY)


def env_class(name: str) -> type[Env]:
    """The class registered under `name`; UnknownEnvError lists the valid names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownEnvError(f"unknown environment {name!r}; registered: {', '.join(names()) or '(none)'}") from None


def make(name: str, **kwargs: Any) -> Env:
    """A new instance of the env registered under `name`, built with `kwargs`."""
    return env_class(name)(**kwargs)
