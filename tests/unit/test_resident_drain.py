"""``serve`` told to stop drains (rdma_cni/resident/drain.py): the socket path goes at
once, a connection whose request no thread has taken is refused, the request a thread
runs is answered before ``serve_forever`` returns; the wait is bounded, and a second
stop ends it."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rdma_cni.resident import protocol
from rdma_cni.resident.server import Server

ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "", "CNI_IFNAME": "eth0",
       "CNI_PATH": "/opt/cni/bin"}
FRAME = protocol.encode_request(ENV, json.dumps({"cniVersion": "1.1.0"}).encode())


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.text = ""

    def emit(self, record: logging.LogRecord) -> None:
        self.text += record.getMessage() + "\n"


@pytest.fixture
def warnings() -> Iterator[_Lines]:
    """The server's warnings, whatever earlier tests made of the logger's propagation."""
    logger, lines = logging.getLogger("rdma_cni"), _Lines()
    level = logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)


def _reply(sock: socket.socket) -> dict[str, Any]:
    data = b""
    while chunk := sock.recv(1 << 16):
        data += chunk
    return protocol.decode_reply(data) if data else {}


class _Held:
    """A server whose requests take ``seconds`` and then answer exit 0."""

    def __init__(self, tmp_path: Path, seconds: float) -> None:
        self.server = Server(str(tmp_path / "s.sock"))
        self.server.bind()
        self.started = threading.Event()

        def slow(conn: socket.socket, data: bytes, fds: list[int], release: Any) -> None:
            self.started.set()
            time.sleep(seconds)
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):  # an abandoned one: its client is gone
                conn.sendall(protocol.encode_reply({"exit": 0, "stdout": "{}", "stderr": ""}))
            conn.close()

        self.server.handle = slow  # type: ignore[method-assign]
        self.runner = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.runner.start()

    def ask(self) -> socket.socket:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(10)
        c.connect(self.server.path)
        c.sendall(FRAME)
        assert self.started.wait(5), "the request never reached a thread"
        return c


def test_stop_answers_the_running_request_and_refuses_the_waiting_one(tmp_path: Path) -> None:
    held = _Held(tmp_path, 1.0)
    running = held.ask()
    waiting = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        waiting.settimeout(10)
        waiting.connect(held.server.path)
        waiting.sendall(FRAME[:3])  # accepted, its request not complete
        time.sleep(0.3)
        held.server.stop()
        assert not os.path.exists(held.server.path)
        assert "refuse" in _reply(waiting)
        assert held.runner.is_alive(), "serve_forever did not wait for the running request"
        assert _reply(running)["exit"] == 0
        held.runner.join(5)
        assert not held.runner.is_alive()
    finally:
        running.close()
        waiting.close()


def test_the_drain_is_bounded(tmp_path: Path, warnings: _Lines) -> None:
    held = _Held(tmp_path, 5.0)
    held.server.drain_timeout = 0.3
    running = held.ask()
    try:
        start = time.monotonic()
        held.server.stop()
        held.runner.join(5)
        assert not held.runner.is_alive() and time.monotonic() - start < 2
        assert "1 request(s) still running, abandoned (drain timeout)" in warnings.text
    finally:
        running.close()


def test_a_second_stop_ends_the_drain(tmp_path: Path, warnings: _Lines) -> None:
    held = _Held(tmp_path, 5.0)
    running = held.ask()
    try:
        held.server.stop()
        time.sleep(0.3)
        assert held.runner.is_alive()
        held.server.stop()
        held.runner.join(2)
        assert not held.runner.is_alive()
        assert "abandoned (told to stop again)" in warnings.text
    finally:
        running.close()


def test_a_stop_before_serving_ends_it_cleanly(tmp_path: Path) -> None:
    """SIGTERM to a worker still starting up (its handler runs as it unblocks signals,
    before the intake is made) closed the listener under it: the worker died with a
    traceback (OSError EBADF from the intake's setblocking) and exited 1."""
    server = Server(str(tmp_path / "s.sock"))
    server.bind()
    server.stop()
    assert not os.path.exists(server.path)
    server.serve_forever()  # returns at once, raising nothing
    assert server.sock is not None and server.sock.fileno() < 0


def test_stops_while_serving_never_fail_a_step(tmp_path: Path) -> None:
    """The listener is closed by the loop's own thread, never under a step."""
    for _ in range(20):
        server = Server(str(tmp_path / "s.sock"))
        server.bind()
        failed: list[BaseException] = []

        def run(s: Server = server, failed: list[BaseException] = failed) -> None:
            try:
                s.serve_forever()
            except BaseException as exc:  # what the worker would die of
                failed.append(exc)

        runner = threading.Thread(target=run)
        runner.start()
        time.sleep(0.005)
        server.stop()
        runner.join(5)
        assert not runner.is_alive() and failed == []


def test_a_reaped_worker_is_never_signalled_again() -> None:
    """A second stop during the reap signalled every worker's number, those reaped
    already too (a number another process may have been given since)."""
    from rdma_cni.resident.workers import _Children

    children = _Children()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    children.pids.append(pid)
    children.reap(time.monotonic() + 5)
    assert children.pids == []
