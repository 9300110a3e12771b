"""Length-prefixed pickle frames between the env server and its worker processes.

frame = 8-byte big-endian payload length + pickle(payload). Both ends are our own processes over a
private socket pair (never a network socket), so pickle carries nothing from outside. The server
reads with asyncio streams (any event loop, uvloop included); workers use plain blocking sockets.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct
from typing import Any

HEADER = struct.Struct("!Q")


def encode(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other end closed the socket")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def send(sock: socket.socket, obj: Any) -> None:
    """Send one frame (blocking)."""
    sock.sendall(encode(obj))


def recv(sock: socket.socket) -> Any:
    """Receive one frame (blocking); EOFError when the other end closed."""
    (size,) = HEADER.unpack(_recv_exactly(sock, HEADER.size))
    return pickle.loads(_recv_exactly(sock, size))


async def read(reader: asyncio.StreamReader) -> Any:
    """Read one frame from an asyncio stream; asyncio.IncompleteReadError at end of stream."""
    (size,) = HEADER.unpack(await reader.readexactly(HEADER.size))
    return pickle.loads(await reader.readexactly(size))
