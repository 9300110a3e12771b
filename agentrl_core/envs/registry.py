"""The environment registry: name -> Env class, so configs and servers can pick envs by name."""

from __future__ import annotations

from typing import Any, TypeVar

from agentrl_core.envs.base import Env
from agentrl_core.errors import UnknownEnvError

E = TypeVar("E", bound=type[Env])

_REGISTRY: dict[str, type[Env]] = {}
_VERSIONED: dict[str, type[Env]] = {}  # "name-v1" -> class


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
    _VERSIONED[versioned_id(cls)] = cls
    return cls


def versioned_id(cls: type[Env]) -> str:
    """The versioned id of an env class: "<name>-v<version>" (e.g. "alfworld-v1")."""
    return f"{cls.name}-v{getattr(cls, 'version', 1)}"


def versioned_ids() -> list[str]:
    """Every registered versioned id, sorted."""
    return sorted(_VERSIONED)


def available_names() -> list[str]:
    """Registered names whose optional dependencies are installed here, sorted."""
    return [n for n in names() if _REGISTRY[n].missing_extra() is None]


def names() -> list[str]:
    """Registered environment names, sorted."""
    return sorted(_REGISTRY)


def env_class(name: str) -> type[Env]:
    """The class registered under `name` or its versioned id; UnknownEnvError lists the valid names."""
    try:
        return _REGISTRY[name] if name in _REGISTRY else _VERSIONED[name]
    except KeyError:
        raise UnknownEnvError(f"unknown environment {name!r}; registered: {', '.join(names()) or '(none)'}") from None


def make(name: str, **kwargs: Any) -> Env:
    """A new instance of the env registered under `name`, built with `kwargs`."""
    return env_class(name)(**kwargs)
