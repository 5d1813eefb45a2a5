"""``serve`` under faults of its own node: a thread it cannot start, a server started on
its path meanwhile, a config path with a NUL, a defect in a request's handling, a ninth
log file while a request writes to the first, and the client's timeout variable."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rdma_cni.errors import ConfigError
from rdma_cni.resident import client, protocol, requestlog
from rdma_cni.resident.server import Server

ROOT = Path(__file__).resolve().parents[2]
ENV = {"CNI_COMMAND": "VERSION", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0"}


def _fds() -> list[int]:
    return [os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC),
            os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)]


def _ask(server: Server, conf: dict[str, Any], env: dict[str, str] = ENV) -> dict[str, Any]:
    server_end, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.handle(server_end, protocol.encode_request(env, json.dumps(conf).encode()),
                      _fds(), lambda: None)
        data = peer.recv(1 << 20)
        return protocol.decode_reply(data) if data else {}
    finally:
        peer.close()


def test_a_thread_it_cannot_start_declines_the_request_and_serve_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """serve ended (and left its socket behind) at the first request it had no thread for."""
    server = Server(str(tmp_path / "s.sock"))
    server.bind()
    runner = threading.Thread(target=server.serve_forever, daemon=True)
    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        if self.name == "request":
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    runner.start()
    try:
        for _ in range(3):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(5)
                sock.connect(server.path)
                sock.sendall(protocol.encode_request(ENV, b"{}"))
                reply = protocol.decode_reply(sock.recv(1 << 16))
            assert "no thread" in reply["refuse"]
        assert runner.is_alive() and os.path.exists(server.path)
        assert server.pool.threads == 0
    finally:
        server.stop()
        runner.join(5)


def test_a_stopping_server_leaves_the_socket_of_the_one_that_replaced_it(tmp_path: Path) -> None:
    old, new = Server(str(tmp_path / "s.sock")), Server(str(tmp_path / "s.sock"))
    old.bind()
    new.bind()  # an overlapping restart takes the path over
    taken = os.lstat(new.path).st_ino
    old.stop()
    assert os.lstat(new.path).st_ino == taken
    new.stop()
    assert not os.path.exists(new.path)


@pytest.mark.parametrize("kind", ["file", "directory", "symlink"])
def test_what_is_no_socket_at_its_path_is_refused_and_left_alone(tmp_path: Path,
                                                                  kind: str) -> None:
    """A regular file at --socket was replaced by the socket, and gone at exit."""
    path = tmp_path / "notasocket"
    if kind == "file":
        path.write_text("precious\n")
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to(tmp_path / "elsewhere")
    before = os.lstat(path)
    with pytest.raises(ConfigError, match="exists and is no socket: not replacing it"):
        Server(str(path)).bind()
    after = os.lstat(path)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert kind != "file" or path.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notasocket"]  # no temp dir left


def test_serve_on_a_file_is_one_line_and_the_file_stays(tmp_path: Path) -> None:
    path = tmp_path / "notasocket"
    path.write_text("precious\n")
    proc = subprocess.run([sys.executable, "-m", "rdma_cni", "serve", "--socket", str(path),
                           "--log-file", str(tmp_path / "log")], capture_output=True,
                          text=True, timeout=60, cwd=str(ROOT),
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1
    assert proc.stderr == f'rdma-cni serve: socket path "{path}" exists and is no socket: ' \
                          "not replacing it (remove it, or name another path)\n"
    assert path.read_text() == "precious\n"


def test_a_nul_in_a_config_path_is_answered(tmp_path: Path) -> None:
    """The request's thread died with a traceback (ValueError: embedded null byte) and the
    caller got no answer."""
    server = Server(str(tmp_path / "s.sock"))
    server.request_log = requestlog.RequestLog(None, lambda key, msg: None)
    conf = {"cniVersion": "1.1.0", "name": "n", "dataDir": "/tmp/da\x00ta",
            "logFile": str(tmp_path / "pl\x00ug.log")}
    reply = _ask(server, conf, {**ENV, "CNI_COMMAND": "STATUS"})
    assert reply["exit"] == 1 and json.loads(reply["stdout"])["code"] in (7, 50)


def test_a_defect_in_a_request_is_refused_not_dropped(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    server = Server(str(tmp_path / "s.sock"))

    def broken(*args: Any) -> dict[str, Any]:
        raise KeyError("x")

    monkeypatch.setattr(server, "_answer", broken)
    assert _ask(server, {}) == {"refuse": "internal error"}


def test_the_oldest_log_file_goes_and_only_once_no_request_writes_to_it(tmp_path: Path) -> None:
    """The ninth file closed the newest one (popitem), even while a request logged there."""
    log = requestlog.RequestLog(None, lambda key, msg: None)
    paths = [str(tmp_path / f"l{n}.log") for n in range(requestlog.MAX_FILES + 1)]
    first = log._file(paths[0], 20, "text")
    assert first is not None
    for path in paths[1:requestlog.MAX_FILES]:
        log._release(log._file(path, 20, "text"))
    newest = log.files[(paths[requestlog.MAX_FILES - 1], 20, "text")]
    log._release(log._file(paths[-1], 20, "text"))  # the ninth
    assert (paths[0], 20, "text") not in log.files and newest in log.files.values()
    assert first in log.retired  # still in use: not closed yet
    log._release(first)
    assert first not in log.retired and first not in log.users
    log.close()


@pytest.mark.parametrize("path", ["plugin.log", "./plugin.log", "logs/../plugin.log"])
def test_a_relative_log_file_goes_to_the_server_s_log(tmp_path: Path, path: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative logFile was opened under the server's working directory; in-process it
    is the runtime's: another file. The server's own log takes the lines, and says why."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "logs").mkdir()
    records: list[logging.LogRecord] = []
    own = logging.Handler()
    own.emit = records.append  # type: ignore[method-assign]
    warned: list[str] = []
    log = requestlog.RequestLog(own, lambda key, msg: warned.append(msg))
    root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with log.route({"logFile": path}, root):
            log.handle(logging.LogRecord("rdma_cni", logging.WARNING, "f", 1, "a line", None,
                                         None))
    finally:
        os.close(root)
        log.close()
    assert [r.getMessage() for r in records] == ["a line"]
    assert not (tmp_path / "plugin.log").exists()
    assert warned == [f"resident server: the request's logFile {json.dumps(path)} is not an "
                      "absolute path: the request's lines go to the server's log"]


@pytest.mark.parametrize(("value", "seconds"), [("abc", 25.0), ("inf", 25.0), ("nan", 25.0),
                                                ("0", 25.0), ("-3", 25.0), ("", 25.0),
                                                ("1e9", 25.0), ("2.5", 2.5), ("3600", 3600.0)])
def test_the_client_reads_its_timeout_as_the_front_does(value: str, seconds: float) -> None:
    """A bad RDMA_CNI_RESIDENT_TIMEOUT raised when the module was imported: a traceback and
    an empty stdout on the Python client's path."""
    assert client.reply_timeout(value) == seconds


def test_frames_still_arriving_hold_at_most_the_byte_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections each sending a large frame one byte short were bounded in number and
    time, not in bytes: 250 of them held 0.5 GiB in one serve process."""
    from rdma_cni.resident import intake

    monkeypatch.setattr(intake, "BYTE_BUDGET", 256 << 10)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "s.sock"))
    listener.listen(64)
    taker = intake.Intake(listener, 64, intake.Notices())
    frame = protocol.encode_request(ENV, b"x" * (1 << 20))
    clients = []
    try:
        for _ in range(8):  # 100 KiB each of a 1 MiB frame
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(str(tmp_path / "s.sock"))
            c.sendall(frame[:100 << 10])
            clients.append(c)
            for _ in range(5):
                taker.step(8, 0.01)
            assert taker._buffered <= intake.BYTE_BUDGET
        assert len(taker.pending) <= 3 and taker._buffered == sum(
            len(p.buf) for p in taker.pending.values())
        clients[0].settimeout(1)
        assert clients[0].recv(10) == b""  # the oldest was closed to make room
        small = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # a request still passes
        small.connect(str(tmp_path / "s.sock"))
        small.sendall(protocol.encode_request(ENV, b"{}"))
        clients.append(small)
        got: list[Any] = []
        for _ in range(20):
            got += taker.step(8, 0.01)
            if got:
                break
        assert len(got) == 1 and got[0][1] == protocol.encode_request(ENV, b"{}")
        got[0][0].close()
    finally:
        for c in clients:
            c.close()
        taker.close()
        listener.close()


def test_idle_connections_do_not_hold_up_a_request_while_one_is_in_hand(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy process (an ADD in hand) took one connection per HANDOFF (50 ms), idle ones
    included: 150 idle connections ahead of a request held it up 7.7 s."""
    server = Server(str(tmp_path / "s.sock"))
    server.bind()
    taken: list[float] = []
    monkeypatch.setattr(server.pool, "submit", lambda conn, data, fds: (
        taken.append(time.monotonic()), [os.close(fd) for fd in fds], conn.close()))
    server._hold(+1)  # an ADD in hand
    idle = []
    for _ in range(40):
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(server.path)
        idle.append(c)
    runner = threading.Thread(target=server.serve_forever, daemon=True)
    start = time.monotonic()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as real:
        real.connect(server.path)
        real.sendall(protocol.encode_request(ENV, b"{}"))
        runner.start()
        try:
            deadline = start + 10
            while not taken and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            server.stop()
            runner.join(5)
            for c in idle:
                c.close()
    assert taken and taken[0] - start < 1.0  # 40 x 50 ms = 2 s before
