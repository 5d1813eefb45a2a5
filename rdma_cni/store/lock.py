"""An exclusive, deadline-bounded ``flock`` on a lock file.

Each :func:`locked` call opens its own file descriptor, so the lock excludes
other processes *and* other threads of this process (flock locks belong to the
open file description). It is not re-entrant: a second ``locked()`` on the same
path in the same thread waits for itself and times out (the store adds
re-entrancy on top, see :meth:`rdma_cni.store.core.Store.lock`).

Failures are never ignored: a wait past the deadline raises :class:`TryAgain`
(code 11), any OS error opening or locking the file raises :class:`IOFailure`, and so
does anything but a regular file in the lock file's place (opened without waiting: a
FIFO there never holds the caller).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
import time
from types import TracebackType

from rdma_cni.errors import IOFailure, TryAgain
from rdma_cni.regfile import kind

#: a waiter retries the flock after these pauses (doubling): a lock is held for a few
#: milliseconds (an fsync at most), so a pause much longer than that only leaves it idle
#: (32 pods at once: the next holder took up to 25 ms to notice, with 25 ms pauses)
_FIRST_POLL = 0.0002
_MAX_POLL = 0.002
_GUARDS: dict[str, threading.Lock] = {}
_GUARDS_LOCK = threading.Lock()


def _guard(path: str) -> threading.Lock:
    """The in-process queue for ``path``: threads of one process (the resident server)
    wait on it without polling; only the winner polls the flock against other processes.
    An absolute path is its own key (no normalisation on the way to every lock)."""
    guard = _GUARDS.get(path)
    if guard is not None:
        return guard
    with _GUARDS_LOCK:
        guard = _GUARDS.setdefault(os.path.abspath(path), threading.Lock())
        if os.path.isabs(path):
            _GUARDS.setdefault(path, guard)
        return guard


class FileLock:
    """Context manager holding ``LOCK_EX`` on ``path`` for the ``with`` body."""

    def __init__(self, path: str, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self._fd: int | None = None
        self._guard = _guard(path)

    @property
    def held(self) -> bool:
        return self._fd is not None

    @property
    def fd(self) -> int:
        """The locked file's descriptor, while held."""
        if self._fd is None:
            raise IOFailure(f"failed to use {self.path}: the lock is not held")
        return self._fd

    def acquire(self) -> None:
        if self._fd is not None:
            raise IOFailure(f"failed to lock {self.path}: this FileLock is already held")
        start = time.monotonic()
        guard = self._guard
        if not guard.acquire(timeout=max(self.timeout, 0.0)):
            raise TryAgain(f"failed to lock {self.path}: still held by another thread "
                           f"after waiting {time.monotonic() - start:.2f}s "
                           f"(timeout {self.timeout:g}s)")
        try:
            fd = self._open()
            try:
                self._wait(fd, start)
            except BaseException:
                os.close(fd)
                raise
        except BaseException:
            guard.release()
            raise
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError as e:
            raise IOFailure(f"failed to unlock {self.path}: {e.strerror or e}") from e
        finally:
            os.close(fd)
            self._guard.release()

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def _open(self) -> int:
        return open_lock(self.path)

    def _wait(self, fd: int, start: float) -> None:
        wait_flock(fd, self.path, start, self.timeout)


#: how a lock file is opened: never through a symlink, and without waiting (a FIFO in its
#: place opens at once, then is refused: it is no regular file)
_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK


def open_lock(path: str) -> int:
    """The lock file at ``path`` opened (created 0600 when missing). :class:`IOFailure`
    naming it when it cannot be, or when something else than a regular file is in its
    place (a directory, a FIFO, a symlink: only a hand puts one there; a lock on it
    would fail, or exclude no one)."""
    try:
        fd = os.open(path, _OPEN_FLAGS, 0o600)
    except OSError as e:
        why = _not_regular(path) or e.strerror or str(e)
        raise IOFailure(f"failed to open lock file {path}: {why}") from e
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise IOFailure(f"failed to open lock file {path}: {kind(mode)} is in its place, "
                        "not a regular file")
    return fd


def _not_regular(path: str) -> str | None:
    """What is wrong with what is at ``path`` when it is no regular file; else None."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else f"{kind(mode)} is in its place, not a regular file"


def wait_flock(fd: int, path: str, start: float, timeout: float) -> None:
    """Take ``LOCK_EX`` on ``fd`` (the file at ``path``), retrying until ``start`` +
    ``timeout`` (monotonic): :class:`TryAgain` past it, :class:`IOFailure` on any other
    error. The holder may be another process or, for a record's lock (each request opens
    its own descriptor), another thread of this one: the message says "request"."""
    deadline = start + max(timeout, 0.0)
    pause = _FIRST_POLL
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EINTR):
                raise IOFailure(f"failed to lock {path}: {e.strerror or e}") from e
        now = time.monotonic()
        if now >= deadline:
            raise TryAgain(
                f"failed to lock {path}: still held by another request "
                f"after waiting {now - start:.2f}s (timeout {timeout:g}s)"
            )
        time.sleep(min(pause, deadline - now))
        pause = min(pause * 2, _MAX_POLL)


def locked(path: str, timeout: float) -> FileLock:
    """Return a context manager that holds an exclusive flock on ``path``."""
    return FileLock(path, timeout)
