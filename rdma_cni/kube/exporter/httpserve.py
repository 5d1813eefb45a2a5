"""The exporter's HTTP server: prometheus_client's WSGI app behind a threading server
whose connections are bounded in number, size and time. The exporter listens on the
node's address, which every pod reaches, and every process of the node connects from
the one host address the kubelet's probes come from too:

- at most :data:`MAX_CONNECTIONS` in all and :data:`PER_CLIENT` from one address; past
  either, a new connection takes the place of the oldest one that has sent no whole
  request in :data:`GRACE` s (cut, it held a thread and nothing else), else it is
  closed at once: connections held open and idle, by one process or several, never
  keep a probe or the scraper out;
- a request's line and headers are read up to :data:`HEAD_LIMIT` bytes in all (past it:
  431 and the connection closed); a body is never read;
- a connection is shut :data:`TIMEOUT` s after it was accepted, whatever it sends.

Without them a client's idle connections held every slot, and four connections of 99
header lines of 64 KiB took the container past its memory limit."""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

log = logging.getLogger("rdma_cni.kube.exporter")
MAX_CONNECTIONS = 32
PER_CLIENT = 4
TIMEOUT = 10.0
GRACE = 0.25
HEAD_LIMIT = 16 * 1024
TOO_LARGE = (b"HTTP/1.0 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n"
             b"Connection: close\r\n\r\n")


@dataclass(eq=False)
class _Slot:
    client: str
    sock: Any
    since: float = field(default_factory=time.monotonic)
    busy: bool = False  # has sent its whole request: never cut to make room

    def cut(self) -> None:
        with contextlib.suppress(OSError):  # closed meanwhile
            self.sock.shutdown(socket.SHUT_RDWR)


class _Handler(WSGIRequestHandler):
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(TIMEOUT)
        self._sockfile = self.rfile
        # the whole connection's deadline: a read's timeout restarts at every byte
        self._deadline = threading.Timer(TIMEOUT, self._cut)
        self._deadline.daemon = True
        self._deadline.start()

    def _cut(self) -> None:
        with contextlib.suppress(OSError):  # closed meanwhile
            self.connection.shutdown(socket.SHUT_RDWR)

    def handle(self) -> None:
        head = self._read_head()
        if head is None or not self.server.served(self.connection):
            return  # went away, was cut to make room, or was answered 431
        self.rfile = io.BytesIO(head)  # what the request handler reads: the head only
        super().handle()

    def _read_head(self) -> bytes | None:
        """The request line and headers, at most HEAD_LIMIT bytes in all (the standard
        library's limits are 100 lines of 64 KiB each); None when there is none."""
        head = b""
        while True:
            line = self._sockfile.readline(HEAD_LIMIT + 1 - len(head))
            head += line
            if len(head) > HEAD_LIMIT:
                self._too_large()
                return None
            if not line.endswith(b"\n"):
                return None  # closed or cut before the end of the head
            if line in (b"\r\n", b"\n"):
                return head

    def _too_large(self) -> None:
        """Answer 431, then discard a little of what follows before the close (closing
        on unread bytes resets the connection, which can lose the answer)."""
        with contextlib.suppress(OSError):
            self.connection.sendall(TOO_LARGE)
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(0.2)
            for _ in range(16):
                if not self.connection.recv(65536):
                    break

    def finish(self) -> None:
        self._deadline.cancel()
        super().finish()
        self._sockfile.close()

    def get_stderr(self) -> Any:
        """Where wsgiref prints a failure: one escaped log line, never a traceback."""
        from rdma_cni.kube.exporter.appguard import OneLine

        return OneLine()

    def log_message(self, format: str, *args: Any) -> None:
        """No line per scrape."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.lock = threading.Lock()
        self.slots: dict[Any, _Slot] = {}  # connection -> its slot, oldest first
        super().__init__(*args, **kwargs)

    def _take(self, request: Any, client: str) -> bool:
        with self.lock:
            mine = [s for s in self.slots.values() if s.client == client]
            if len(mine) >= PER_CLIENT or len(self.slots) >= MAX_CONNECTIONS:
                pool = mine if len(mine) >= PER_CLIENT else list(self.slots.values())
                ripe = time.monotonic() - GRACE
                victim = next((s for s in pool if not s.busy and s.since <= ripe), None)
                if victim is None:
                    return False
                del self.slots[victim.sock]
                victim.cut()
            self.slots[request] = _Slot(client, request)
            return True

    def served(self, request: Any) -> bool:
        """Mark ``request``'s connection as one with a whole request (False: it was cut
        to make room meanwhile)."""
        with self.lock:
            slot = self.slots.get(request)
            if slot is not None:
                slot.busy = True
            return slot is not None

    def _give(self, request: Any) -> None:
        with self.lock:
            self.slots.pop(request, None)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._take(request, str(client_address[0])):
            self.shutdown_request(request)  # full: closed at once, nothing held
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._give(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._give(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went silent or away: no traceback on stderr."""
        log.debug("connection from %s ended early", client_address)


def start(app: Any, host: str, port: int) -> WSGIServer:
    """Serve ``app`` on ``host``:``port`` in a daemon thread; the server (``.server_port``)."""
    bound = type("_Bound", (_Server,), {"address_family":
                                        socket.AF_INET6 if ":" in host else socket.AF_INET})
    httpd: WSGIServer = make_server(host, port, app, bound, handler_class=_Handler)
    threading.Thread(target=httpd.serve_forever, name="exporter-http", daemon=True).start()
    return httpd
