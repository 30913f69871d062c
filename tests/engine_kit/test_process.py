"""engine_kit.process.free_port: a server's port is drawn below the host's ephemeral range, so no outbound
connection can be numbered with it while the engine loads for minutes before binding it."""
from __future__ import annotations

import socket

from eagle3lib.engine_kit import process


def test_a_servers_port_is_free_and_below_the_ephemeral_range():
    low, high = process.ephemeral_range()
    assert 1024 <= low <= high
    ports = {process.free_port() for _ in range(20)}
    assert all(max(1024, low - process.PORTS_BELOW) <= p < max(1025, low) for p in ports)
    for p in ports:                                   # nothing listens there: it binds
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((process.HOST, p))


def test_a_port_taken_is_never_handed_out(monkeypatch):
    """With the whole drawing window one taken port, the draw gives up on it and the OS picks one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind((process.HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(process, "ephemeral_range", lambda: (port + 1, 60999))
        monkeypatch.setattr(process, "PORTS_BELOW", 1)
        assert process.free_port() != port
