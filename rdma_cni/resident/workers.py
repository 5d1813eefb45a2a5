"""Several `rdma-cni serve` processes on one listening socket.

One interpreter runs one request's Python at a time (the GIL), so pods started at
once (a node rebooting) queue behind each other. After binding and preloading, the
server forks ``workers - 1`` copies; every process accepts on the same socket (the
kernel hands each connection to one of them). They share the store the way exec'd
plugins always did: its flock locks are per open file, so they serialize ADDs of
different processes exactly as they serialize different execs.

Children die with the parent (PR_SET_PDEATHSIG) and are ended by their PIDs when it
stops; only the parent removes the socket path.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # main.py hands the server over; this module never imports it at run time
    from rdma_cni.resident.server import Server

logger = logging.getLogger("rdma_cni")
PR_SET_PDEATHSIG = 1
_STOP = {signal.SIGTERM, signal.SIGINT}


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


def serve(server: Server, workers: int) -> None:
    """Serve with ``workers`` processes; returns when the parent is told to stop (its
    SIGTERM and SIGINT handlers, which stop ``server``, are the caller's: installed
    before the socket showed, see :func:`rdma_cni.resident.main.main`)."""
    children: list[int] = []
    # a stop arriving while forking waits until each process has its own handler (a
    # child must never take the parent's and remove the socket path)
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP)
    for _ in range(workers - 1):
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
        children.append(pid)
    if children:
        logger.info("resident workers: %d (pids %s)", workers, children)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP)
    try:
        if server.stopping.is_set():  # told to stop before serving: the socket goes too
            server.stop()
        else:
            server.serve_forever()
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
