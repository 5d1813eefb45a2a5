"""Several `rdma-cni serve` processes on one listening socket.

One interpreter runs one request's Python at a time (the GIL), so pods started at
once (a node rebooting) queue behind each other. After binding and preloading, the
server forks ``workers - 1`` copies; every process accepts on the same socket (the
kernel hands each connection to one of them). They share the store the way exec'd
plugins always did: its flock locks are per open file, so they serialize ADDs of
different processes exactly as they serialize different execs.

Children die with the parent (PR_SET_PDEATHSIG) and are told to stop (SIGTERM, by their
PIDs) when it is: each drains its own requests (:mod:`rdma_cni.resident.drain`), a
second signal to the parent is passed on (they wait no more), and the parent waits for
them as long as it drains, a moment more, then kills what is left. Only the parent
removes the socket path.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # main.py hands the server over; this module never imports it at run time
    from rdma_cni.resident.server import Server

logger = logging.getLogger("rdma_cni")
PR_SET_PDEATHSIG = 1
_STOP = {signal.SIGTERM, signal.SIGINT}
#: what the parent waits for its workers beyond its own drain (each exits once drained)
REAP_MARGIN = 2.0


def default_count() -> int:
    """One process per CPU serve may run on (its affinity: a container's cpuset, not the
    node's CPU count), at most 4."""
    return max(1, min(len(os.sched_getaffinity(0)), 4))


def _child(server: Server) -> None:
    server.owner = False
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the parent
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP)
    server.serve_forever()


class _Children:
    def __init__(self) -> None:
        self.pids: list[int] = []
        self.told = 0

    def tell(self) -> None:
        """SIGTERM to each: it stops and drains; a second time, it waits no more."""
        self.told += 1
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def reap(self, until: float) -> None:
        """Wait for each to exit, until ``until`` (monotonic); then SIGKILL what is left.
        A reaped one leaves :attr:`pids` with signals held (a stop arriving in between
        would signal its number, which another process may have by then)."""
        left = self.pids
        while left:
            for pid in list(left):
                self._reaped(pid)
            if left and time.monotonic() >= until:
                logger.warning("resident workers still running past the drain: %s "
                               "killed", left)
                for pid in left:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                until = float("inf")  # reaped below, now they die at once
            if left:
                time.sleep(0.02)


    def _reaped(self, pid: int) -> None:
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP)
        try:
            try:
                gone = os.waitpid(pid, os.WNOHANG)[0] == pid
            except ChildProcessError:
                gone = True
            if gone:
                self.pids.remove(pid)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _fork(server: Server, count: int) -> _Children:
    children = _Children()
    for _ in range(count):
        if server.stopping.is_set():
            break
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _child(server)
            except BaseException:
                logger.exception("resident worker %d failed", os.getpid())
                code = 1
            os._exit(code)
        children.pids.append(pid)
    if children.pids:
        logger.info("resident workers: %d (pids %s)", count + 1, children.pids)
    return children


def serve(server: Server, workers: int) -> None:
    """Serve with ``workers`` processes; returns when the parent is told to stop and the
    requests of every process are answered (or the drain's time is up). The SIGTERM and
    SIGINT handlers stopping ``server`` before the workers exist are the caller's
    (installed before the socket showed, see :func:`rdma_cni.resident.main.main`); from
    then on, the parent's also tell its workers."""
    # a stop arriving while forking waits until each process has its own handler (a
    # child must never take the parent's and remove the socket path)
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP)
    children = _fork(server, workers - 1)

    def stop(*_: object) -> None:
        server.stop()
        children.tell()

    for sig in _STOP:
        signal.signal(sig, stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP)
    try:
        if server.stopping.is_set():  # told to stop before serving: the socket goes too
            server.unlisten()
            if server.sock is not None:
                server.sock.close()
        else:
            server.serve_forever()
    finally:
        if not children.told:  # told before they were forked, or serving failed
            children.tell()
        stopped = server.stopped_at or time.monotonic()
        children.reap(stopped + server.drain_timeout + REAP_MARGIN)
