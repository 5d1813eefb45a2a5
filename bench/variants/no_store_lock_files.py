"""bench/ab.py variant, an upper bound (not safe): the store lock without its file, each
lock an in-process one only (one descriptor of the lock file kept open for the journal);
what the store lock's open, flock, unlock and close calls cost an ADD."""

from rdma_cni.store import lock

_real = (lock.FileLock.acquire, lock.FileLock.release)
_fds: dict[str, int] = {}


def _acquire(self: lock.FileLock) -> None:
    self._guard.acquire()
    fd = _fds.get(self.path)
    if fd is None:
        fd = _fds[self.path] = self._open()
    self._fd = fd


def _release(self: lock.FileLock) -> None:
    if self._fd is not None:
        self._fd = None
        self._guard.release()


def apply() -> None:
    lock.FileLock.acquire, lock.FileLock.release = _acquire, _release  # type: ignore[method-assign]


def revert() -> None:
    lock.FileLock.acquire, lock.FileLock.release = _real  # type: ignore[method-assign]
