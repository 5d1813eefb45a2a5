"""The resident server as tests run it: ``rdma-cni serve`` in a node netns
(:class:`Serve`), and stand-ins that accept and then misbehave (:class:`FakeServer`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cnirunner import HOST_TREE, PYTHON, REPO, install_host_tree


class Serve:
    """``rdma-cni serve`` in ``ns``; ``argv`` runs it (default: python -m rdma_cni of this
    checkout). Its stderr goes to ``<log>.stderr`` (:attr:`stderr`)."""

    def __init__(self, ns: str, sock: Path, log: Path,
                 argv: Sequence[str] = (str(PYTHON), "-m", "rdma_cni"),
                 options: Sequence[str] = ()) -> None:
        self.sock, self.log = sock, log
        self.stderr_file = log.with_name(log.name + ".stderr")
        env = {**os.environ, "PYTHONPATH": str(REPO)} if tuple(argv)[:1] == (str(PYTHON),) \
            else None
        with open(self.stderr_file, "wb") as err:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", ns, *argv, "serve",
                 "--socket", str(sock), "--log-file", str(log), *options],
                stdout=subprocess.DEVNULL, stderr=err, env=env)
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert self.proc.poll() is None, self.stderr
            assert time.monotonic() < deadline, "resident server did not start"
            time.sleep(0.05)

    @property
    def stderr(self) -> str:
        return self.stderr_file.read_text(errors="replace") if self.stderr_file.exists() else ""

    def served(self, command: str) -> int:
        text = self.log.read_text() if self.log.exists() else ""
        return sum(1 for line in text.splitlines() if f"resident {command} " in line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=20)


class FakeServer:
    """A socket that accepts and then does ``act(conn)`` (hang, half reply, garbage)."""

    def __init__(self, path: Path, act: Callable[[socket.socket], None]) -> None:
        self.path, self.act, self.accepted = path, act, 0
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(8)
        self.listener.settimeout(0.1)
        self.stop_flag = threading.Event()
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop_flag.is_set():
            try:
                conn = self.listener.accept()[0]
            except TimeoutError:
                continue
            self.accepted += 1
            self.held.append(conn)
            conn.settimeout(5)
            try:
                conn.recv(1 << 20)
                self.act(conn)
            except OSError:
                pass

    def close(self) -> None:
        self.stop_flag.set()
        self.thread.join()
        for c in self.held:
            c.close()
        self.listener.close()
        self.path.unlink()


def front_layout(built: list[str], dest: Path) -> list[str]:
    """The host tree built beside the image bundle ``built`` laid out by `install`'s own
    functions in ``dest`` (``<dest>/rdma-cni -> rdma-cni.versions/<version>-<digest>/
    rdma-cni-front``); the argv of the front. :func:`image_of` gives its server."""
    tree = Path(built[0]).parent.parent / HOST_TREE.name
    front = str(install_host_tree(dest, tree))
    _IMAGE_OF[front] = list(built)
    return [front]


def image_of(front: list[str]) -> list[str]:
    """The image's bundle (what runs `serve`, as in the DaemonSet) of a front laid out
    by :func:`front_layout`."""
    return list(_IMAGE_OF[front[0]])


_IMAGE_OF: dict[str, list[str]] = {}
