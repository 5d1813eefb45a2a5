"""``serve`` takes one connection at a time: an idle process accepts one, and while it
has an ADD in hand it leaves the next to an idle sibling for ``HANDOFF`` (then takes one
more, so a stalled request never holds the others up). Pods started at once so spread
over the processes instead of one process taking every connection waiting and running
them as threads behind one interpreter lock (bench figure 4)."""

from __future__ import annotations

import itertools
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from rdma_cni.resident import protocol
from rdma_cni.resident.server import HANDOFF, Server

ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "", "CNI_IFNAME": "eth0",
       "CNI_PATH": "/opt/cni/bin"}


def test_an_idle_process_takes_one_waiting_connection_at_a_time(tmp_path: Path) -> None:
    server = Server(str(tmp_path / "s.sock"))
    server.bind()
    started: list[float] = []
    done = threading.Event()

    def slow(conn: socket.socket, data: bytes, fds: list[int], release: Any) -> None:
        started.append(time.monotonic())
        time.sleep(0.3)  # an ADD in hand
        for fd in fds:
            os.close(fd)
        conn.close()
        if len(started) == 4:
            done.set()

    server.handle = slow  # type: ignore[method-assign]
    frame = protocol.encode_request(ENV, json.dumps({"cniVersion": "1.1.0"}).encode())
    clients = []
    for _ in range(4):  # all waiting before the process looks
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(server.path)
        c.sendall(frame)
        clients.append(c)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert done.wait(20)
    finally:
        server.stop()
        thread.join(10)
        for c in clients:
            c.close()
    gaps = [b - a for a, b in itertools.pairwise(started)]
    assert all(g >= HANDOFF * 0.9 for g in gaps), gaps
