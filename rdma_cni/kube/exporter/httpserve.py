"""The exporter's HTTP server: prometheus_client's WSGI app behind a threading server
whose connections are bounded in number (:data:`MAX_CONNECTIONS`: past it a new one is
closed at once) and in time (a client silent for :data:`TIMEOUT` s is dropped). The
exporter listens on the node's address, which every pod reaches: without the bounds,
idle connections each held a thread and its memory for as long as they stayed open,
towards the container's memory limit."""

from __future__ import annotations

import logging
import socket
import threading
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

log = logging.getLogger("rdma_cni.kube.exporter")
MAX_CONNECTIONS = 32
TIMEOUT = 10.0


class _Handler(WSGIRequestHandler):
    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(TIMEOUT)

    def log_message(self, format: str, *args: Any) -> None:
        """No line per scrape."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)  # full: closed at once, nothing held
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

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
