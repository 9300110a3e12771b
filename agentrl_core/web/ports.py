"""Port choice: a TCP port free on 127.0.0.1 right now (servers bind port 0 instead where they can)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at `host` at this moment (another process may take it before it is used:
    prefer binding port 0 where the program allows it)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
