"""File operations the standard library lacks: swapping two paths atomically
(``renameat2(RENAME_EXCHANGE)``), a path resolved inside a directory taken as its root
in one system call (``openat2(RESOLVE_IN_ROOT)``) and a read lease on an open file
(``F_SETLEASE``).

A read lease is granted only while no process has the file open for writing, and any
later ``open`` for writing or ``truncate`` of it *breaks* it: the writer waits (up to
``/proc/sys/fs/lease-break-time``) until the holder gives the lease up, and the holder
can tell by :func:`lease_held`. Readers do not touch it. The break's signal is sent
nowhere (the file's owner is cleared; until then it is SIGURG, ignored by default), so
a holder is never killed by SIGIO.
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
_libc = ctypes.CDLL(None, use_errno=True)
_renameat2 = getattr(_libc, "renameat2", None)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
#: openat2(2)'s number, the same on every architecture (Linux 5.6)
_SYS_OPENAT2 = 437
_RESOLVE_NO_MAGICLINKS, _RESOLVE_IN_ROOT = 0x02, 0x10


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


def exchange(a: str, b: str) -> None:
    """Atomically swap the paths ``a`` and ``b`` (both must exist); OSError with an errno
    in :data:`UNSUPPORTED` where the kernel or filesystem cannot."""
    if _renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 unavailable", a)
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), a)


def open_in_root(root: int, path: str) -> int:
    """An ``O_PATH`` descriptor of ``path`` resolved inside the directory ``root`` as if it
    were ``/`` (absolute symbolic links and ``..`` stay inside it), magic links refused:
    OSError when any component is missing, on such a link, or where the kernel lacks
    ``openat2`` (ENOSYS)."""
    raw = os.fsencode(path)
    if b"\0" in raw:
        raise ValueError("embedded null byte")
    how = _OpenHow(os.O_PATH | os.O_CLOEXEC, 0, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
    fd = _syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(root), raw, ctypes.byref(how),
                  ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


def take_read_lease(fd: int) -> bool | None:
    """A read lease on ``fd``'s file (opened read-only): True when taken, False when a
    process has the file open for writing (refused), None where leases are unavailable
    (the filesystem, leases disabled, no CAP_LEASE for another user's file)."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except OSError as e:
        return False if e.errno in (errno.EAGAIN, errno.EBUSY) else None
    fcntl.fcntl(fd, fcntl.F_SETOWN, 0)
    return True


def lease_held(fd: int) -> bool:
    """Whether the read lease on ``fd`` is unbroken (nobody opened the file to write)."""
    return bool(fcntl.fcntl(fd, fcntl.F_GETLEASE) == fcntl.F_RDLCK)


def release_lease(fd: int) -> None:
    with contextlib.suppress(OSError):  # closing the file releases it as well
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)


def dev_ino(target: str | int, follow: bool = True) -> tuple[int, int] | None:
    """(st_dev, st_ino) of a path (``follow``: through its last symlink, else of the link)
    or of an open descriptor; None when it cannot be read."""
    try:
        st = os.fstat(target) if isinstance(target, int) else \
            os.stat(target) if follow else os.lstat(target)
    except OSError:
        return None
    return st.st_dev, st.st_ino
