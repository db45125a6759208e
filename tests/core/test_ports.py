import socket
from pathlib import Path

from core import ports
from core.ports import free_ports


def test_free_ports_are_distinct_and_never_one_promised_to_another_process() -> None:
    # Promise every port of a first draw: a second draw of as many must find others.
    promised = free_ports(50)
    again = free_ports(50, avoid=promised)
    assert len(set(promised)) == len(set(again)) == 50 and not set(again) & set(promised)


def test_ports_lie_below_the_kernels_own_range_and_a_recent_promise_is_not_drawn_again() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    first, second = free_ports(200), free_ports(200)  # no avoid: the draw remembers its promises
    assert all(p < low for p in first + second)  # a client's outgoing connection cannot take one
    assert not set(first) & set(second)


def test_a_port_someone_holds_is_never_drawn() -> None:
    held = [socket.create_server(("127.0.0.1", p)) for p in free_ports(20)]
    try:
        taken = {s.getsockname()[1] for s in held}
        ports._promised.clear()  # forget the promises: only the bind check is left
        assert not set(free_ports(500)) & taken
    finally:
        for s in held:
            s.close()
