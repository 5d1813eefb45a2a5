"""A listening socket that accepts every connection and never says a word: a hung server
(the resident one, the Kubernetes API), for tests of what a caller does then."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def muted(listener: socket.socket) -> Iterator[socket.socket]:
    """Accept on ``listener`` (bound and listening) and hold every connection, until the
    block ends; then close them and the listener."""
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        listener.close()
