"""``rdma-cni serve``: the resident process. One thread per request (one at a time
while sibling processes are idle, see HANDOFF), each running the same dispatcher as
the exec'd binary, with the pod netns handed over as a
file descriptor (so the server never needs the client's mount namespace).

It refuses (and the client runs in-process) when the client is in another
network namespace than the server, or when the frame is malformed.
"""

from __future__ import annotations

import argparse
import array
import gc
import io
import json
import logging
import os
import select
import signal
import socket
import stat
import threading
import time
from typing import Any

from rdma_cni import log
from rdma_cni.cni import dispatch
from rdma_cni.cni.request import Request
from rdma_cni.resident import protocol

logger = logging.getLogger("rdma_cni")
#: a process with a request in hand leaves the next connection to an idle sibling
#: (``serve --workers``: the kernel hands each connection to one of the processes in
#: accept) for this long, then takes it on itself, so a slow request (a kubelet that
#: stalls) never holds up the others. Pods started at once spread over the processes
#: instead of queueing as threads behind one GIL (32 at once on 2 CPUs: about 0.24 s
#: instead of 0.45, bench figure 4). Only an ADD holds its process so: the other
#: commands mostly wait for the kernel (a DEL's link deletion), and run side by side.
HANDOFF = 0.05
PRELOAD = ("rdma_cni.cni.commands.add", "rdma_cni.cni.commands.delete",
           "rdma_cni.cni.commands.check", "rdma_cni.cni.commands.status",
           "rdma_cni.models.netconf", "rdma_cni.adapters.netlink")


def _ino(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


class Server:
    def __init__(self, path: str, handlers: dispatch.Handlers | None = None) -> None:
        self.path = path
        self.handlers = handlers
        fd = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self.netns = _ino(fd)
        os.close(fd)
        self.sock: socket.socket | None = None
        self.stopping = threading.Event()
        self.idle = threading.Semaphore(1)  # held while this process serves a request
        self.owner = True  # removes the socket path at stop (a forked worker does not)

    def bind(self) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", mode=0o700, exist_ok=True)
        if os.path.exists(self.path) and stat.S_ISSOCK(os.lstat(self.path).st_mode):
            os.unlink(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        tmp = f"{self.path}.{os.getpid()}"
        sock.bind(tmp)
        sock.listen(128)
        os.chmod(tmp, 0o600)
        os.rename(tmp, self.path)  # clients never see a half-made socket, nor one not listening
        self.sock = sock

    def serve_forever(self) -> None:
        assert self.sock is not None
        self.sock.settimeout(0.5)
        while not self.stopping.is_set():
            held = _Held(self.idle if self.idle.acquire(timeout=HANDOFF) else None)
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                held.release()
                continue
            except OSError:
                held.release()
                if self.stopping.is_set():
                    break
                raise
            threading.Thread(target=self._handle_in, args=(conn, held), daemon=True).start()

    def _handle_in(self, conn: socket.socket, held: _Held) -> None:
        try:
            self.handle(conn, held)
        finally:
            held.release()

    def stop(self) -> None:
        self.stopping.set()
        if self.sock is not None:
            self.sock.close()
        if not self.owner:
            return
        try:
            if os.path.exists(self.path):
                os.unlink(self.path)
        except OSError:
            pass

    def handle(self, conn: socket.socket, held: _Held) -> None:
        fds: list[int] = []
        try:
            conn.settimeout(10.0)
            data, fds = _receive(conn)
            conn.sendall(protocol.encode_reply(self._answer(conn, data, fds, held)))
        except (OSError, ValueError) as exc:
            logger.warning("resident request failed: %s", exc)
        finally:
            for fd in fds:
                os.close(fd)
            conn.close()

    def _answer(self, conn: socket.socket, data: bytes, fds: list[int],
                held: _Held) -> dict[str, Any]:
        env, stdin = protocol.decode_request(data)
        if env.get("CNI_COMMAND") != "ADD":
            held.release()
        if not fds or _ino(fds[0]) != self.netns:
            return {"refuse": "client is in another network namespace"}
        if env.get("CNI_NETNS") and len(fds) < 2:
            return {"refuse": "no netns descriptor"}
        out, err = io.StringIO(), io.StringIO()
        pod_fd = fds[1] if len(fds) > 1 else None
        start = time.monotonic()

        def watch(req: Request) -> None:
            req.abandoned = lambda: _abandoned(conn)

        code = dispatch.run(env, stdin, out, err, handlers=self.handlers, netns_fd=pod_fd,
                            on_request=watch)
        logger.info("resident %s %s exit %d in %.1f ms", env.get("CNI_COMMAND"),
                    env.get("CNI_CONTAINERID", "")[:12], code, (time.monotonic() - start) * 1e3)
        return {"exit": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


class _Held:
    """This process's busy mark while it serves a request (see HANDOFF); released once."""

    def __init__(self, sem: threading.Semaphore | None) -> None:
        self._sem = sem

    def release(self) -> None:
        sem, self._sem = self._sem, None
        if sem is not None:
            sem.release()


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


def _receive(conn: socket.socket) -> tuple[bytes, list[int]]:
    fds: list[int] = []
    buf = b""
    anc_size = socket.CMSG_SPACE(2 * array.array("i").itemsize)
    while True:
        chunk, anc, _flags, _addr = conn.recvmsg(65536, anc_size)
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                got = array.array("i")
                got.frombytes(payload[: len(payload) - len(payload) % got.itemsize])
                fds += list(got)
        if not chunk:
            raise ValueError("resident request truncated")
        buf += chunk
        size = protocol.request_size(buf)
        if size is not None and len(buf) >= size:
            return buf[:size], fds
        if len(buf) > protocol.MAX_FRAME:
            raise ValueError("resident request too large")


def _args(argv: list[str]) -> argparse.Namespace:
    """Options; with --config, the config's residentSocket, logFile and logLevel are the
    defaults (an explicit option wins)."""
    from rdma_cni.cliargs import parser

    p = parser("rdma-cni serve", "Resident server: answers the plugin's CNI requests "
               "without a new process each time (the plugin falls back to running in-process).",
               config_help="JSON object shaped like the plugin's conflist entry: its "
               "residentSocket, logFile and logLevel become the defaults")
    p.add_argument("--socket", help=f"unix socket to listen on (default {protocol.DEFAULT_SOCKET})")
    p.add_argument("--log-file", help="log file (default /var/log/rdma-cni.log)")
    p.add_argument("--log-level", help="debug, info, warning or error (default info)")
    p.add_argument("--workers", type=_count, default=None,
                   help="processes accepting on the socket (default: CPUs, at most 4)")
    args = p.parse_args(argv)
    conf: dict[str, Any] = {}
    if args.config:
        from rdma_cni.models.subconfig import read_json_object

        conf = read_json_object(args.config)
    args.socket = args.socket or conf.get("residentSocket") or protocol.DEFAULT_SOCKET
    if args.log_file is None:  # "" in the config turns the file off, as in the plugin
        args.log_file = conf.get("logFile", "/var/log/rdma-cni.log")
    args.log_level = args.log_level or conf.get("logLevel") or "info"
    return args


def main(argv: list[str]) -> int:
    args = _args(argv)
    log.setup({"logFile": args.log_file, "logLevel": args.log_level})
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    from rdma_cni.adapters import rtnlcodec
    from rdma_cni.resident import workers

    rtnlcodec.enable()  # requests packed here, not by pyroute2 (rdma_cni/adapters/rtnlcodec.py)
    server = Server(args.socket)
    # told to stop from the moment the socket can be seen (a DaemonSet rollout, a test)
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    signal.signal(signal.SIGINT, lambda *_: server.stop())
    server.bind()  # clients connecting from here on wait in the backlog, not in-process
    logger.info("rdma-cni serving on %s", args.socket)

    # what start-up made lives as long as the process: out of the collector's sight, a
    # full collection walks only what requests leave behind (and forked workers keep
    # sharing those pages: a collection writes to every object it walks)
    gc.collect()
    gc.freeze()
    workers.serve(server, args.workers or workers.default_count())
    return 0


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError(
            f"--workers must be an integer 1-64, got {json.dumps(text)}")
    return value
