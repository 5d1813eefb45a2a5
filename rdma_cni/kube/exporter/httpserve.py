"""The exporter's HTTP server: prometheus_client's WSGI app behind a threading server
whose connections are bounded in number (:data:`MAX_CONNECTIONS` in all,
:data:`PER_CLIENT` from one address: past either a new one is closed at once) and in
time (a connection is shut :data:`TIMEOUT` s after it was accepted, whatever it sends).
The exporter listens on the node's address, which every pod reaches: without the
bounds, idle connections each held a thread and its memory for as long as they stayed
open, towards the container's memory limit, and one client trickling bytes into its
connections kept every slot from the scraper."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

log = logging.getLogger("rdma_cni.kube.exporter")
MAX_CONNECTIONS = 32
PER_CLIENT = 4
TIMEOUT = 10.0


class _Handler(WSGIRequestHandler):
    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(TIMEOUT)
        # the whole connection's deadline: a read's timeout restarts at every byte
        self._deadline = threading.Timer(TIMEOUT, self._cut)
        self._deadline.daemon = True
        self._deadline.start()

    def _cut(self) -> None:
        with contextlib.suppress(OSError):  # closed meanwhile
            self.connection.shutdown(socket.SHUT_RDWR)

    def finish(self) -> None:
        self._deadline.cancel()
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """No line per scrape."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.lock = threading.Lock()
        self.open: dict[str, int] = {}  # client address -> its connections served
        super().__init__(*args, **kwargs)

    def _take(self, client: str) -> bool:
        with self.lock:
            if sum(self.open.values()) >= MAX_CONNECTIONS or \
                    self.open.get(client, 0) >= PER_CLIENT:
                return False
            self.open[client] = self.open.get(client, 0) + 1
            return True

    def _give(self, client: str) -> None:
        with self.lock:
            self.open[client] -= 1
            if not self.open[client]:
                del self.open[client]

    def process_request(self, request: Any, client_address: Any) -> None:
        client = str(client_address[0])
        if not self._take(client):
            self.shutdown_request(request)  # full: closed at once, nothing held
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._give(client)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._give(str(client_address[0]))

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
