"""A deadline for a read that must never wait: SIGALRM ends a reader blocked on a FIFO's
open (a plain ``open()`` waits for a writer for ever), so the test fails instead of
hanging. The main thread only (pytest runs tests there)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any


class BlockedError(Exception):
    """A reader waited (not an OSError: the readers take those for a file they cannot
    read)."""


@contextlib.contextmanager
def within(seconds: int) -> Iterator[None]:
    """Raise :class:`BlockedError` in whatever still runs after ``seconds``."""
    def blocked(signum: int, frame: Any) -> None:
        raise BlockedError(f"the reader waited on the FIFO for {seconds} s")

    old = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
