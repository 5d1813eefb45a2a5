"""One unary gRPC call over a unix socket: the kubelet's PodResources, the runtime's CRI.

The HTTP/2 connection is h2's (sans-IO: it owns the protocol, this module the socket);
the gRPC layer on top is what the gRPC-over-HTTP/2 spec defines for a unary call: a
POST to ``/<service>/<method>`` with ``content-type: application/grpc`` and ``te:
trailers``, the message framed as 1 byte "compressed" (0) + 4 bytes big-endian length,
and the outcome in ``grpc-status``/``grpc-message`` (trailers, or the headers of a
trailers-only answer).

Why not grpcio: its extension module is 17 MB, more than the rest of the host plugin's
runtime together, and it costs about 30 ms to import on every in-process ADD; a client
that asks one question per exec needs none of its channels, retries or name resolution.
(The device plugin, a gRPC *server* in the DaemonSet's image, keeps grpcio.)
"""

from __future__ import annotations

import socket
import time
from typing import Any
from urllib.parse import unquote

__all__ = ["DEADLINE_EXCEEDED", "INTERNAL", "NOT_FOUND", "UNAVAILABLE", "UNIMPLEMENTED",
           "UNKNOWN", "RpcError", "call"]

# gRPC status codes (grpc/doc/statuscodes.md)
OK, UNKNOWN, DEADLINE_EXCEEDED, NOT_FOUND = 0, 2, 4, 5
RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE = 8, 12, 13, 14
CODE_NAMES = {0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT",
              4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND", 6: "ALREADY_EXISTS",
              7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION",
              10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED", 13: "INTERNAL",
              14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED"}
#: the largest answer accepted (grpc-go's default receive limit is 4 MiB; a kubelet
#: listing every pod of a busy node stays far below this)
MAX_MESSAGE = 16 << 20
_CONNECT_PAUSE = 0.01
_WINDOW = 1 << 20  # receive window asked of the server: a List answer in few round trips


class RpcError(Exception):
    """A call that did not return a message: ``code`` is the gRPC status code."""

    def __init__(self, code: int, details: str) -> None:
        super().__init__(code, details)
        self.code = code
        self.details = details

    @property
    def name(self) -> str:
        return CODE_NAMES.get(self.code, str(self.code))


def call(path: str, method: str, request: bytes, timeout: float) -> bytes:
    """Send ``request`` (a serialized message) to ``method`` (``/pkg.Service/Method``)
    of the gRPC server on unix socket ``path``; return the serialized answer. Raises
    RpcError: DEADLINE_EXCEEDED past ``timeout`` seconds, UNAVAILABLE when the server
    cannot be reached or hangs up, the server's own status otherwise."""
    deadline = time.monotonic() + timeout
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        _connect(sock, path, deadline)
        return _exchange(sock, method, request, deadline)
    except TimeoutError:
        raise RpcError(DEADLINE_EXCEEDED, "deadline exceeded") from None
    except OSError as err:
        raise RpcError(UNAVAILABLE, f"{err.strerror or err}") from None
    finally:
        sock.close()


def _connect(sock: socket.socket, path: str, deadline: float) -> None:
    """Connect, again while the server's listen queue is full (EAGAIN: a busy kubelet),
    until the deadline."""
    while True:
        sock.settimeout(_remaining(deadline))
        try:
            sock.connect(path)
            return
        except BlockingIOError:
            time.sleep(min(_CONNECT_PAUSE, max(deadline - time.monotonic(), 0)))


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _exchange(sock: socket.socket, method: str, request: bytes, deadline: float) -> bytes:
    import h2.config
    import h2.connection
    import h2.exceptions
    import h2.settings

    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: _WINDOW})
    conn.increment_flow_control_window(_WINDOW)
    stream = conn.get_next_available_stream_id()
    millis = max(int(_remaining(deadline) * 1000), 1)
    conn.send_headers(stream, [
        (":method", "POST"), (":scheme", "http"), (":path", method),
        (":authority", "localhost"), ("content-type", "application/grpc"),
        ("te", "trailers"), ("grpc-timeout", f"{min(millis, 99_999_999)}m")])
    conn.send_data(stream, b"\0" + len(request).to_bytes(4, "big") + request, end_stream=True)
    answer = _Answer()
    try:
        sock.sendall(conn.data_to_send())
        while not answer.ended:
            sock.settimeout(_remaining(deadline))
            data = sock.recv(65536)
            if not data:
                raise RpcError(UNAVAILABLE, "the server closed the connection")
            for event in conn.receive_data(data):
                answer.take(conn, event)
            sock.sendall(conn.data_to_send())
    except h2.exceptions.H2Error as err:
        raise RpcError(INTERNAL, f"HTTP/2 protocol error: {err}") from None
    return answer.message()


class _Answer:
    """What the server said on our stream, event by event."""

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.body = bytearray()
        self.ended = False

    def take(self, conn: Any, event: Any) -> None:
        import h2.events as ev

        if isinstance(event, ev.ResponseReceived | ev.TrailersReceived):
            self.headers.update(_text(event.headers))
        elif isinstance(event, ev.DataReceived):
            self.body += event.data
            conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            if len(self.body) > MAX_MESSAGE + 5:
                raise RpcError(RESOURCE_EXHAUSTED, f"the answer exceeds {MAX_MESSAGE} bytes")
        elif isinstance(event, ev.StreamEnded):
            self.ended = True
        elif isinstance(event, ev.StreamReset):
            raise RpcError(UNAVAILABLE, f"the server reset the call (HTTP/2 error "
                           f"{event.error_code!s})")
        elif isinstance(event, ev.ConnectionTerminated):
            raise RpcError(UNAVAILABLE, f"the server ended the connection (HTTP/2 error "
                           f"{event.error_code!s})")

    def message(self) -> bytes:
        """The answer's one message, or RpcError with the server's status."""
        status = self.headers.get("grpc-status")
        if status is None:
            http = self.headers.get(":status", "?")
            raise RpcError(UNKNOWN if http == "200" else UNAVAILABLE,
                           f"no gRPC status in the answer (HTTP status {http})")
        code = int(status) if status.isdigit() else UNKNOWN
        if code != OK:
            raise RpcError(code, unquote(self.headers.get("grpc-message", "")))
        body = bytes(self.body)
        if len(body) < 5 or body[0] != 0 or int.from_bytes(body[1:5], "big") != len(body) - 5:
            raise RpcError(INTERNAL, "the answer is not one uncompressed gRPC message")
        return body[5:]


def _text(headers: Any) -> dict[str, str]:
    return {(k.decode("latin-1") if isinstance(k, bytes) else k):
            (v.decode("latin-1") if isinstance(v, bytes) else v) for k, v in headers}
