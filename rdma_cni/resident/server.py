"""``rdma-cni serve``: the resident process. Connections are accepted and their frames
read by one poll loop per process (:mod:`rdma_cni.resident.intake`: deadlines, caps,
peer check); each complete request runs on a thread of its own, one waiting for work
when there is one (:mod:`rdma_cni.resident.pool`) (one ADD at a time while
sibling processes are idle, see HANDOFF) through the same dispatcher as the exec'd
binary, with the pod netns handed over as a file descriptor.

It refuses (and the client runs in-process) when the frame is malformed or of another
protocol version, when the client is in another network namespace than the server, or
when the server does not see the caller's store and kubelet files
(:mod:`rdma_cni.resident.view`).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import select
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from rdma_cni.adapters import fsops
from rdma_cni.cni import dispatch
from rdma_cni.cni.request import Request
from rdma_cni.errors import ConfigError, clipped, shown
from rdma_cni.resident import drain, intake, protocol, view
from rdma_cni.resident.pool import Pool

logger = logging.getLogger("rdma_cni")
#: a process with a request in hand leaves the next connection to an idle sibling
#: (``serve --workers``: the kernel hands each connection to one of the processes in
#: accept) for this long, then takes it on itself, so a slow request (a kubelet that
#: stalls) never holds up the others. Pods started at once spread over the processes
#: instead of queueing as threads behind one GIL (32 at once on 2 CPUs: about 0.24 s
#: instead of 0.45, bench figure 4). An idle process, too, accepts one connection and
#: then looks again: it took every connection waiting at once before, and ran them as
#: threads behind its one lock while its sibling idled (figure 4: 0.91x -> 0.82x, CPU
#: 212 -> 182 ms, bench/README.md). Only an ADD holds its process so: the other commands
#: mostly wait for the kernel (a DEL's link deletion), and run side by side.
HANDOFF = 0.05
#: commands whose answer depends on the store or the kubelet's files: served only when
#: the server sees the caller's (:mod:`rdma_cni.resident.view`)
VIEWED = ("ADD", "DEL", "CHECK", "STATUS", "GC")
BACKLOG = 1024
SEND_TIMEOUT = 5.0


def _ino(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


class Server:
    def __init__(self, path: str, handlers: dispatch.Handlers | None = None,
                 cap: int = intake.MAX_CONNECTIONS) -> None:
        self.path = path
        self.handlers = handlers
        self.cap = cap
        fd = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self.netns = _ino(fd)
        os.close(fd)
        self.sock: socket.socket | None = None
        self.stopping = threading.Event()
        self.stopped_at = 0.0  # monotonic, when first told to stop
        self.drain_timeout = drain.DRAIN_TIMEOUT
        self.notices = intake.Notices()
        self.intake: intake.Intake | None = None  # made per process by serve_forever
        self.owner = True  # removes the socket path at stop (a forked worker does not)
        self._busy = 0  # ADDs (and requests not yet known not to be one) in hand, see HANDOFF
        self.request_log: Any = None  # each request's lines to its logFile (requestlog.py)
        self.pool = Pool(self._handle_in)  # the request threads, waiting for work
        self._lock = threading.Lock()
        self.bound: tuple[int, int] | None = None  # the socket file this server made

    def bind(self) -> None:
        """Listen on the socket path. The socket is made with its final mode (0600: the
        umask is set before ``bind``) in a directory of its own only root can enter, and
        renamed into place once listening: no one else can ever connect, clients never
        see a half-made socket."""
        _refuse_other(self.path)
        parent = os.path.dirname(self.path) or "."
        os.makedirs(parent, mode=0o700, exist_ok=True)
        private = tempfile.mkdtemp(prefix=".s", dir=parent)  # 0700
        tmp = os.path.join(private, "s")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            old = os.umask(0o177)
            try:
                sock.bind(tmp)
            finally:
                os.umask(old)
            sock.listen(BACKLOG)
            if _refuse_other(self.path):
                os.unlink(self.path)  # a socket: a server before this one left it
            os.rename(tmp, self.path)
            self.bound = fsops.dev_ino(self.path, follow=False)
        except BaseException:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        finally:
            os.rmdir(private)
        self.sock = sock

    def serve_forever(self) -> None:
        assert self.sock is not None
        self.intake = intake.Intake(self.sock, self.cap, self.notices)
        deferred: float | None = None
        try:
            while not self.stopping.is_set():
                now = time.monotonic()
                busy = self._busy > 0
                deferred = (deferred or now) if busy else None
                waited = deferred is None or now - deferred >= HANDOFF
                ready = self.intake.step(1 if waited else 0, HANDOFF if busy else 0.5)
                if ready and busy:  # work taken; an idle connection accepted is none
                    deferred = time.monotonic()
                for conn, data, fds in ready:
                    self._submit(conn, data, fds)
            self.sock.close()  # stopping (drain.py): here, never under a step (unlisten)
            self.intake.refuse_pending("resident server stopping")
            self.pool.running.drain(self.stopped_at + self.drain_timeout)
        finally:
            self.intake.close()

    def _submit(self, conn: socket.socket, data: bytes, fds: list[int]) -> None:
        if self.stopping.is_set():
            self._decline(conn, fds, "resident server stopping")
            return
        self._hold(+1)
        try:
            self.pool.submit(conn, data, fds)
        except RuntimeError as exc:  # no thread to be had (a pids limit)
            self._hold(-1)
            self._decline(conn, fds, f"no thread to serve it: {exc}")

    def _hold(self, n: int) -> None:
        with self._lock:
            self._busy += n
        if n < 0 and self.intake is not None:
            self.intake.wake()

    def _handle_in(self, conn: socket.socket, data: bytes, fds: list[int]) -> None:
        held = [True]

        def release() -> None:
            if held[0]:
                held[0] = False
                self._hold(-1)

        try:
            self.handle(conn, data, fds, release)
        finally:
            release()
            if self.intake is not None:
                self.intake.finished()

    def _decline(self, conn: socket.socket, fds: list[int], why: str) -> None:
        """Refuse a request this process cannot take on (the caller runs it in-process)."""
        self.notices.warn("decline", f"resident server declines a request: {why}")
        for fd in fds:
            os.close(fd)
        conn.settimeout(0)
        intake.refuse(conn, why)
        if self.intake is not None:
            self.intake.finished()

    def stop(self) -> None:
        """SIGTERM, SIGINT: accept nothing more, the path goes, the running requests are
        answered (:meth:`serve_forever`); a second time: they are waited for no more."""
        if self.stopping.is_set():
            self.pool.running.hurry.set()
        else:
            self.stopped_at = time.monotonic()
            self.stopping.set()
        self.unlisten()

    def unlisten(self) -> None:
        """Wake the loop, which closes the listener, and (its maker) remove the path at
        once: a new server may bind it. A signal handler's: it closes nothing a step uses."""
        if self.intake is not None:
            self.intake.wake()
        if not self.owner:
            return
        try:  # only the socket it made: a server started since took the path over
            if self.bound is not None and fsops.dev_ino(self.path, follow=False) == self.bound:
                os.unlink(self.path)
        except OSError:
            pass

    def handle(self, conn: socket.socket, data: bytes, fds: list[int],
               release: Callable[[], None]) -> None:
        after: list[Callable[[], None]] = []  # bookkeeping, once the answer is out
        try:
            conn.setblocking(True)
            conn.settimeout(SEND_TIMEOUT)
            conn.sendall(protocol.encode_reply(self._answer(conn, data, fds, release,
                                                            after.append)))
        except OSError as exc:
            logger.warning("resident request failed: %s", exc)
        except Exception as exc:  # a defect: refused, so that the caller runs it in-process
            logger.error("resident request failed: internal error: %s",
                         clipped(f"{type(exc).__name__}: {exc}", 500))
            with contextlib.suppress(OSError):
                conn.sendall(protocol.encode_reply({"refuse": "internal error"}))
        finally:
            for fd in fds:
                os.close(fd)
            conn.close()
            for job in after:
                job()

    def _answer(self, conn: socket.socket, data: bytes, fds: list[int],
                release: Callable[[], None],
                defer: Callable[[Callable[[], None]], None]) -> dict[str, Any]:
        try:
            env, stdin = protocol.decode_request(data)
        except ValueError as exc:
            self.notices.warn("malformed", f"resident server refused a request: {exc}")
            return {"refuse": f"malformed request: {exc}"}
        command = env.get("CNI_COMMAND", "")
        if command != "ADD":
            release()
        conf = view.decoded(stdin)
        refusal = self._refusal(command, env, conf, fds)
        if refusal:
            return {"refuse": refusal}
        out, err = io.StringIO(), io.StringIO()
        pod_fd = fds[protocol.FD_POD] if len(fds) > protocol.FD_POD else None
        start = time.monotonic()

        def watch(req: Request) -> None:
            req.abandoned = lambda: _abandoned(conn)

        with self._request_log(conf, fds):
            code = dispatch.run(env, stdin, out, err, handlers=self.handlers,
                                netns_fd=pod_fd, on_request=watch, defer=defer)
        logger.info("resident %s %s exit %d in %.1f ms", command,
                    env.get("CNI_CONTAINERID", "")[:12], code, (time.monotonic() - start) * 1e3)
        return {"exit": code, "stdout": out.getvalue(), "stderr": err.getvalue()}

    def _request_log(self, conf: dict[str, Any] | None,
                     fds: list[int]) -> contextlib.AbstractContextManager[None]:
        if self.request_log is None:
            return contextlib.nullcontext()
        return self.request_log.route(conf, fds[protocol.FD_ROOT])

    def _refusal(self, command: str, env: dict[str, str], conf: dict[str, Any] | None,
                 fds: list[int]) -> str:
        """Why this server must not serve the request ("" when it may)."""
        if len(fds) <= protocol.FD_ROOT or _ino(fds[protocol.FD_NETNS]) != self.netns:
            return "client is in another network namespace"
        if env.get("CNI_NETNS") and len(fds) <= protocol.FD_POD:
            return "no netns descriptor"
        if command in VIEWED:
            why = view.mismatch(conf, fds[protocol.FD_ROOT])
            if why:
                self.notices.warn(f"view:{why}", f"resident server declines {command}: {why}; "
                                  "the caller runs it in-process")
                return f"the server does not see the caller's files: {why}"
        return ""


def _refuse_other(path: str) -> bool:
    """Whether a socket is at ``path`` (replaced by ``bind``). Anything else there (a
    file, a directory, a link) is not the server's to replace, nor to remove at exit:
    refused."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(mode):
        raise ConfigError(f"socket path {shown(path, 256)} exists and is no socket: "
                          "not replacing it (remove it, or name another path)")
    return True


def _abandoned(conn: socket.socket) -> bool:
    """The client closed its end (it gave up waiting and runs the request itself)."""
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN | select.POLLHUP)
    for _fd, events in poller.poll(0):
        if events & (select.POLLHUP | select.POLLERR):
            return True
        try:
            return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True
    return False
