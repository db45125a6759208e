"""Free loopback ports for the processes a run starts (the broker, shards, the chief's control
channel, /metrics): drawn from the kernel, never one that another process of the run was promised."""

from __future__ import annotations

import socket
from collections.abc import Collection


def free_ports(n: int, host: str = "127.0.0.1", *, avoid: Collection[int] = ()) -> list[int]:
    """``n`` distinct ports free right now, none in ``avoid``: ports another process of the run will
    bind but has not bound yet, which the kernel would otherwise hand out again. All are held bound
    until the draw ends, so they differ."""
    socks: list[socket.socket] = []
    try:
        ports: list[int] = []
        while len(ports) < n:
            s = socket.socket()
            socks.append(s)
            s.bind((host, 0))
            if (port := s.getsockname()[1]) not in avoid:
                ports.append(port)
        return ports
    finally:
        for s in socks:
            s.close()
