"""Two file operations the standard library lacks: swapping two paths atomically
(``renameat2(RENAME_EXCHANGE)``) and a write lease on an open file (``F_SETLEASE``).

A write lease is granted only while no other open file description of the file exists,
and any ``open`` or ``truncate`` of it by another process afterwards *breaks* it: the
opener waits (up to ``/proc/sys/fs/lease-break-time``) until the holder gives the lease
up, and the holder can tell by :func:`lease_held`. The break's signal is sent nowhere
(the file's owner is cleared; until then it is SIGURG, ignored by default), so a
holder is never killed by SIGIO.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import signal

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
#: what a filesystem or kernel without the operation answers
UNSUPPORTED = (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP)
_renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)


def exchange(a: str, b: str) -> None:
    """Atomically swap the paths ``a`` and ``b`` (both must exist); OSError with an errno
    in :data:`UNSUPPORTED` where the kernel or filesystem cannot."""
    if _renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 unavailable", a)
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), a)


def take_write_lease(fd: int) -> bool | None:
    """A write lease on ``fd``'s file: True when taken, False when another process has
    the file open (the lease is refused), None where leases are unavailable (the
    filesystem, leases disabled, no CAP_LEASE for another user's file)."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
    except OSError as e:
        return False if e.errno in (errno.EAGAIN, errno.EBUSY) else None
    fcntl.fcntl(fd, fcntl.F_SETOWN, 0)
    return True


def lease_held(fd: int) -> bool:
    """Whether the write lease on ``fd`` is still unbroken (nobody opened the file)."""
    return bool(fcntl.fcntl(fd, fcntl.F_GETLEASE) == fcntl.F_WRLCK)


def release_lease(fd: int) -> None:
    with contextlib.suppress(OSError):  # closing the file releases it as well
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
