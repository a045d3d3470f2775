"""Free TCP ports."""

from __future__ import annotations

import socket

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    """A TCP port nothing listens on at ``host`` right now (another process may take it
    before the caller binds it: a caller that must not lose that race retries)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
