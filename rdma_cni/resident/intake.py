"""The resident server's intake: one epoll loop per process accepts connections and
reads their request frames, so an idle or slow connection costs a table entry, not a
thread, and a legitimate request is read as soon as it arrives.

Bounds (each hit is logged, at most once a minute per kind, with a count):
- a connection delivers its whole frame within :data:`RECEIVE_DEADLINE` of being
  accepted (not per ``recv``), else it is closed;
- at most ``cap`` connections are open per process (those still sending and those
  being answered; from the descriptor limit, at most :data:`MAX_CONNECTIONS`); at the
  cap the oldest connection still sending is closed to make room;
- out of descriptors (``EMFILE``/``ENFILE``) on accept: the same, or accepting pauses
  for :data:`PAUSE`; the server never exits over it;
- a connection from a user other than root (or the server's own) is refused at once;
- more than :data:`protocol.MAX_FDS` descriptors or a frame over the size limit: closed;
- at most :data:`BYTE_BUDGET` bytes held for frames still arriving, all connections
  together (the oldest other one is closed to make room, else the one sending).
A closed connection makes its caller run the request in-process.
"""

from __future__ import annotations

import array
import contextlib
import errno
import logging
import os
import resource
import select
import socket
import struct
import threading
import time

from rdma_cni.resident import protocol
from rdma_cni.resident.notices import Notices  # serve makes them (intake.Notices)

logger = logging.getLogger("rdma_cni")
RECEIVE_DEADLINE = 5.0
#: what frames still arriving may hold per process (a request is a few KiB; CHANGELOG)
BYTE_BUDGET = 16 << 20
MAX_CONNECTIONS = 256
#: descriptors kept for the process itself, and counted per open connection (its
#: socket, the descriptors it passes, what answering it opens)
RESERVED_FDS, FDS_PER_CONNECTION = 64, 8
PAUSE = 0.1
_CRED = struct.Struct("3i")
_ANC = socket.CMSG_SPACE(protocol.MAX_FDS * array.array("i").itemsize)
_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
Request = tuple[socket.socket, bytes, list[int]]


def raise_fd_limit() -> int:
    """Lift the soft descriptor limit to the hard one; returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 16
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def connection_cap(fd_limit: int) -> int:
    return max(4, min(MAX_CONNECTIONS, (fd_limit - RESERVED_FDS) // FDS_PER_CONNECTION))


class _Pending:
    __slots__ = ("buf", "deadline", "fds", "sock")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline = sock, deadline
        self.buf = b""
        self.fds: list[int] = []


class Intake:
    def __init__(self, listener: socket.socket, cap: int, notices: Notices) -> None:
        self.listener, self.cap, self.notices = listener, cap, notices
        self.pending: dict[int, _Pending] = {}  # oldest first
        self.accepted = 0
        self._open = 0  # pending, and handed over but not yet finished
        self._buffered = 0  # bytes of the pending connections' frames
        self._lock = threading.Lock()
        self._poller = select.epoll()  # O(ready) a round, not O(open)
        self._listening = False
        self._paused_until = 0.0
        self._uids = {0, os.geteuid()}
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._wake_lock = threading.RLock()
        self._poller.register(self._wake_r, select.EPOLLIN)
        listener.setblocking(False)

    def wake(self) -> None:
        # never once closed (the number may be reused); reentrant: a signal handler
        # (serve's stop) may wake in the thread that holds it
        with self._wake_lock, contextlib.suppress(OSError):
            if self._wake_w >= 0:
                os.write(self._wake_w, b"w")

    def finished(self) -> None:
        """A connection handed over by :meth:`step` was answered and closed."""
        with self._lock:
            self._open -= 1

    def step(self, accept_max: int, timeout: float) -> list[Request]:
        """One round: accept up to ``accept_max`` connections, read what arrived, close
        what is past its deadline; returns the requests now complete."""
        if self.listener.fileno() < 0:
            return []  # stopped: the listener is closed
        now = time.monotonic()
        self._listen(accept_max > 0 and now >= self._paused_until)
        if self.pending:
            timeout = min(timeout, next(iter(self.pending.values())).deadline - now)
        if self._paused_until > now:
            timeout = min(timeout, self._paused_until - now)
        done: list[Request] = []
        for fd, _events in self._poller.poll(max(0.0, timeout) + 0.001):
            if fd == self._wake_r:
                with contextlib.suppress(OSError):
                    os.read(self._wake_r, 512)
            elif fd == self.listener.fileno():
                done += self._accept(accept_max)
            elif fd in self.pending:
                got = self._receive(self.pending[fd])
                if got is not None:
                    done.append(got)
        self._expire(time.monotonic())
        return done

    def refuse_pending(self, reason: str) -> None:
        """Stopping: the connections whose request is not complete yet are refused."""
        for p in list(self.pending.values()):
            self._drop(p, reason)

    def close(self) -> None:
        for p in list(self.pending.values()):
            self._drop(p)
        with self._wake_lock:
            wake_w, self._wake_w = self._wake_w, -1
            for fd in (self._wake_r, wake_w):
                os.close(fd)
        self._poller.close()

    def _listen(self, on: bool) -> None:
        if on != self._listening:
            if on:
                self._poller.register(self.listener.fileno(), select.EPOLLIN)
            else:
                self._poller.unregister(self.listener.fileno())
            self._listening = on

    def _accept(self, accept_max: int) -> list[Request]:
        done: list[Request] = []
        for _ in range(accept_max):
            try:
                conn, _addr = self.listener.accept()
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno in _OUT_OF_FDS:
                    self._out_of_fds(exc)
                    break
                if exc.errno in (errno.ECONNABORTED, errno.EINTR, errno.EPROTO):
                    continue
                if exc.errno != errno.EBADF:  # EBADF: stopping, the listener is closed
                    self.notices.warn("accept", f"resident server failed to accept: {exc}")
                    self._paused_until = time.monotonic() + PAUSE
                break
            self.accepted += 1
            p = self._admit(conn)
            # a caller sends its frame right after connecting: read it now, before later
            # connections could push this one out as the oldest still sending
            got = self._receive(p) if p is not None else None
            if got is not None:
                done.append(got)
        return done

    def _out_of_fds(self, exc: OSError) -> None:
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.notices.warn("fds", f"resident server out of descriptors ({exc.strerror}, limit "
                                 f"{limit}): closing the oldest connection still sending "
                                 "its request")
        if not self._evict():
            self._paused_until = time.monotonic() + PAUSE

    def _admit(self, conn: socket.socket) -> _Pending | None:
        conn.setblocking(False)
        uid = self._peer_uid(conn)
        if uid not in self._uids:
            self.notices.warn("peer", f"resident server refused a connection from uid {uid}: "
                                      "only root may use the socket")
            refuse(conn, "only root may use the resident socket")
            return None
        with self._lock:
            full = self._open >= self.cap
        if full:
            self.notices.warn("cap", f"resident server connection cap reached ({self.cap} "
                                     "open): closing the oldest connection still sending its "
                                     "request")
            if not self._evict():
                refuse(conn, "resident server busy")
                return None
        with self._lock:
            self._open += 1
        p = _Pending(conn, time.monotonic() + RECEIVE_DEADLINE)
        self.pending[conn.fileno()] = p
        self._poller.register(conn.fileno(), select.EPOLLIN)
        return p

    @staticmethod
    def _peer_uid(conn: socket.socket) -> int:
        try:
            raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
        except OSError:
            return -1
        return int(_CRED.unpack(raw)[1])

    def _receive(self, p: _Pending) -> Request | None:
        try:
            chunk, anc, flags, _addr = p.sock.recvmsg(65536, _ANC)
        except BlockingIOError:
            return None
        except OSError:
            self._drop(p)
            return None
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                got = array.array("i")
                got.frombytes(data[: len(data) - len(data) % got.itemsize])
                p.fds += list(got)
        p.buf += chunk
        self._buffered += len(chunk)
        size = protocol.request_size(p.buf)
        bad = flags & socket.MSG_CTRUNC or len(p.fds) > protocol.MAX_FDS or \
            (size or len(p.buf)) > protocol.MAX_FRAME or not self._room(p)
        if bad or not chunk:
            if bad:
                self.notices.warn("frame", "resident server closed a connection sending a "
                                           "malformed request (size or descriptors)")
            self._drop(p)
            return None
        if size is None or len(p.buf) < size:
            return None
        self._poller.unregister(p.sock.fileno())
        del self.pending[p.sock.fileno()]
        self._buffered -= len(p.buf)
        return p.sock, p.buf[:size], p.fds

    def _room(self, p: _Pending) -> bool:
        """Within :data:`BYTE_BUDGET`, the oldest other frames closed to get there if need be."""
        while self._buffered > BYTE_BUDGET:
            other = next((q for q in self.pending.values() if q is not p), None)
            if other is None:
                return False
            self.notices.warn("bytes", "resident server closed the oldest connection still "
                                       f"sending: {BYTE_BUDGET >> 20} MiB of requests arriving")
            self._drop(other)
        return True

    def _expire(self, now: float) -> None:
        while self.pending:
            p = next(iter(self.pending.values()))
            if p.deadline > now:
                return
            self.notices.warn("slow", "resident server closed a connection that sent no "
                                      f"complete request within {RECEIVE_DEADLINE:g} s")
            self._drop(p)

    def _evict(self) -> bool:
        if not self.pending:
            return False
        self._drop(next(iter(self.pending.values())))
        return True

    def _drop(self, p: _Pending, refusal: str = "") -> None:
        fd = p.sock.fileno()
        if self.pending.pop(fd, None) is not None:
            self._buffered -= len(p.buf)
        with contextlib.suppress(OSError, ValueError):
            self._poller.unregister(fd)
        for passed in p.fds:
            with contextlib.suppress(OSError):
                os.close(passed)
        if refusal:
            refuse(p.sock, refusal)
        else:
            p.sock.close()
        with self._lock:
            self._open -= 1


def refuse(conn: socket.socket, reason: str) -> None:
    """Answer with a refusal (the caller runs the request in-process), and close."""
    with contextlib.suppress(OSError):
        conn.send(protocol.encode_reply({"refuse": reason}))
    conn.close()
