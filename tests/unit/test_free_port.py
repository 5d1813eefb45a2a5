"""The tests' free port is one the kernel never hands out by itself: below the ephemeral
range of port-0 binds and outgoing connections, so nothing but the test's own server
binds it between the choice and that bind."""

from __future__ import annotations

import socket
from pathlib import Path

from support.proc import EPHEMERAL, free_port


def test_a_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    low = int(Path(EPHEMERAL).read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(1024 <= p < low for p in ports), sorted(ports)
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_not_given() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port()))
        held.listen()
        taken = held.getsockname()[1]
        assert all(free_port() != taken for _ in range(200))
