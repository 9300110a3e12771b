"""Registry database URLs: the SQLite default, the supported backends, and password redaction."""

from __future__ import annotations

import re
from pathlib import Path

from agentrl_core.store.errors import RegistryError

REGISTRY_FILE = "registry.db"
SUPPORTED_BACKENDS = ("sqlite", "postgresql")
_MASK = "***"
_SECRET_KEYS = re.compile(r"(password|passwd|secret|token)", re.IGNORECASE)
_PLACEHOLDER = "agentrl-redacted"
# user:password@ anywhere, for strings SQLAlchemy cannot parse (e.g. a scheme missing its colon).
_USERINFO = re.compile(r"(?P<head>[^:/@?#\s]+):(?P<pw>[^@/?#\s]*)@")
_QUERY_SECRET = re.compile(r"(?P<key>[?&][^=&#]*(?:password|passwd|secret|token)[^=&#]*)=(?P<val>[^&#]*)", re.IGNORECASE)


def redact_url(url: str) -> str:
    """The URL with its password (and any password/secret/token query value) replaced by ***."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError, TypeError):
        text = _USERINFO.sub(lambda m: f"{m['head']}:{_MASK}@", str(url))
        return _QUERY_SECRET.sub(lambda m: f"{m['key']}={_MASK}", text)
    query = {k: (_PLACEHOLDER if _SECRET_KEYS.search(k) else v) for k, v in parsed.query.items()}
    rendered = parsed.set(query=query).render_as_string(hide_password=True)  # password → ***
    return rendered.replace(_PLACEHOLDER, _MASK)


def secrets_of(url: str) -> list[str]:
    """The secret substrings of `url` (password, secret query values), to scrub from driver messages."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    found = [parsed.password] if parsed.password else []
    for key, value in parsed.query.items():
        if _SECRET_KEYS.search(key):
            found.extend([value] if isinstance(value, str) else list(value))
    return [s for s in found if s]


def resolve_url(url: str | None, root: str | Path) -> str:
    """`url`, or `sqlite:///<root>/registry.db` when None; the backend must be SQLite or PostgreSQL.

    The folder of a SQLite file is created; other backends are checked by name only here.
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if url is None:
        path = Path(root).expanduser().resolve() / REGISTRY_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{path}"
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as err:
        raise RegistryError(
            f"registry URL {redact_url(url)!r} is not a SQLAlchemy URL ({err}); use e.g. "
            "sqlite:////abs/path/registry.db or postgresql+psycopg://user@host:5432/db") from None
    if parsed.get_backend_name() not in SUPPORTED_BACKENDS:
        raise RegistryError(
            f"registry URL {redact_url(url)!r} uses backend {parsed.get_backend_name()!r}; supported: "
            f"{', '.join(SUPPORTED_BACKENDS)} (e.g. postgresql+psycopg://user@host:5432/db)")
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
    return url
