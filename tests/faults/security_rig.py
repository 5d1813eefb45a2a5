"""What the security tests (tests/faults/test_security_*.py) attack the plugin with: a
process of another user in the node netns, a resident server in a private mount
namespace, raw frames, a flood of idle and slow connections, a log line checker.

Everything runs in namespaces and temp dirs the tests make; processes are ended by PID.
"""

from __future__ import annotations

import array
import contextlib
import errno
import json
import os
import re
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from rdma_cni.resident.server import _abandoned as closed  # the peer hung up

NOBODY = 65534
_LEVEL = "(DEBUG|INFO|WARNING|ERROR|CRITICAL) "
#: the start of every record of the plugin's log file (rdma_cni/logsetup.py's format)
RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \d+ " + _LEVEL)
#: the start of every line the plugin writes to stderr
STDERR_LINE = re.compile("rdma-cni: " + _LEVEL)
RAW_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029]")


def forged_lines(text: str, start: re.Pattern[str] = RECORD) -> list[str]:
    """Lines of a log that are neither a record of its own nor a traceback line below
    one (indented), plus any line holding a raw control character."""
    return [line for line in text.splitlines()
            if not (start.match(line) or line.startswith("    ")) or RAW_CONTROLS.search(line)]


def as_user(ns: str, script: str, *args: str, uid: int = NOBODY,
            timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``script`` (stdlib-only Python) run by ``uid`` in netns ``ns``."""
    return subprocess.run(
        ["ip", "netns", "exec", ns, "setpriv", f"--reuid={uid}", f"--regid={uid}",
         "--clear-groups", "/usr/bin/python3", "-c", script, *args],
        capture_output=True, text=True, timeout=timeout, cwd="/")


def private_mounts(hidden: Sequence[Path], argv: Sequence[str]) -> list[str]:
    """``argv`` run in a mount namespace of its own where each of ``hidden`` is an empty
    tmpfs: it sees other files there than the rest of the node."""
    mounts = " && ".join(f"mount -t tmpfs rdma-cni-test {json.dumps(str(p))}" for p in hidden)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'{mounts} && exec "$@"', "sh", *argv]


def raw_request(path: Path, header: bytes, stdin: bytes = b"{}",
                fds: Sequence[int] = (), timeout: float = 10) -> bytes:
    """Send one request frame with ``header`` as is; the reply body ('A'/'R'...) or b""
    when the server closed without one."""
    frame = struct.pack("=I", len(header)) + header + struct.pack("=I", len(stdin)) + stdin
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
        s.sendmsg([frame], anc if fds else [])
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data[4:] if len(data) >= 4 else b""


def own_fds() -> list[int]:
    """The descriptors a request carries: this thread's netns and the root dir."""
    return [os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC),
            os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)]


class Flood:
    """``idle`` connections that send nothing and ``slow`` ones that send one byte of a
    frame every ``every`` seconds, all kept open (a connection the server closes is
    opened again) until :meth:`stop`. Runs in the caller's netns (the socket is a path)."""

    def __init__(self, path: Path, idle: int, slow: int, every: float = 1.0) -> None:
        self.path, self.every = str(path), every
        self.kinds = ["idle"] * idle + ["slow"] * slow
        self.conns: list[socket.socket | None] = [None] * len(self.kinds)
        self.reopened = 0
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self, settle: float = 20.0) -> Flood:
        """Open them all (within ``settle`` seconds) and keep them open from then on."""
        deadline = time.monotonic() + settle
        while self.open_count() < len(self.kinds) and time.monotonic() < deadline:
            self._fill()
            time.sleep(0.01)
        self.thread.start()
        return self

    def open_count(self) -> int:
        return sum(c is not None for c in self.conns)

    def _connect(self) -> socket.socket | None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(self.path)
        except OSError as exc:
            s.close()
            if exc.errno in (errno.EAGAIN, errno.ECONNREFUSED, errno.ENOENT):
                return None
            raise
        return s

    def _fill(self) -> None:
        for i, c in enumerate(self.conns):
            if c is None:
                c = self.conns[i] = self._connect()
                if c is None:
                    return
                if self.kinds[i] == "slow":  # a header length it will never finish
                    with contextlib.suppress(OSError):
                        c.send(struct.pack("=I", 60000))

    def _run(self) -> None:
        while not self.stop_flag.wait(self.every):
            for i, (kind, c) in enumerate(zip(self.kinds, self.conns, strict=True)):
                if c is not None and kind == "slow":
                    with contextlib.suppress(OSError):
                        c.send(b"\x00")
                if c is not None and closed(c):
                    c.close()
                    self.conns[i] = None
                    self.reopened += 1
            self._fill()

    def stop(self) -> None:
        self.stop_flag.set()
        if self.thread.is_alive():
            self.thread.join()
        for c in self.conns:
            if c is not None:
                c.close()
