"""Free loopback ports for the processes a run starts (the broker, shards, the chief's control
channel, /metrics): free right now, outside the range the kernel hands out on its own, and never
one that another process of the run was promised."""

from __future__ import annotations

import random
import socket
from collections import deque
from collections.abc import Collection
from pathlib import Path

# A port drawn by bind(0) comes from the kernel's ephemeral range, which every outgoing connection
# (a Kafka client, an HTTP probe) also draws from: between our draw and the child's bind, such a
# connection can take the port. Drawing below that range leaves only our own draws to collide.
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10_000  # below this lie the well-known and commonly configured service ports
_RECENT = 4096  # ports this process promised lately, not drawn again while their owners start
_promised: deque[int] = deque(maxlen=_RECENT)
_random = random.SystemRandom()


def _unassigned_range() -> range | None:
    """The ports at or above ``_LOWEST`` that the kernel never hands out on its own, or None
    where the ephemeral range cannot be read or leaves too few of them."""
    try:
        low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return range(_LOWEST, low) if low - _LOWEST >= 4 * _RECENT else None


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:  # no SO_REUSEADDR: a port still in TIME_WAIT counts as taken
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _kernel_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def free_ports(n: int, host: str = "127.0.0.1", *, avoid: Collection[int] = ()) -> list[int]:
    """``n`` distinct ports free right now, none in ``avoid`` (ports another process of the run
    will bind but has not bound yet) and none this process handed out lately."""
    unassigned = _unassigned_range()
    ports: list[int] = []
    while len(ports) < n:
        port = _random.choice(unassigned) if unassigned is not None else _kernel_port(host)
        if port in avoid or port in ports or port in _promised or not _bindable(host, port):
            continue
        ports.append(port)
    _promised.extend(ports)
    return ports
