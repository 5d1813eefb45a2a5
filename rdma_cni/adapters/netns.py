"""Network namespaces: open and validate a netns path, enter one for a block of
work, and make a private throwaway netns. The only module that calls setns/unshare.

setns(2) changes the calling thread only; the plugin does its netlink work on one
thread, and sockets keep the netns they were created in.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from rdma_cni.errors import EnvError, IOFailure

CLONE_NEWNET = 0x40000000
_NSFS_MAGIC = 0x6E736673
_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def setns(fd: int) -> None:
    _check(_libc.setns(fd, CLONE_NEWNET), "setns")


class NetnsGone(Exception):
    """The netns path no longer exists (the pod's sandbox is gone)."""


def open_netns(path: str) -> int:
    """Open ``path`` as a network namespace; EnvError if it is something else. The path
    is first opened ``O_PATH`` (nothing of the file's own runs: a FIFO cannot block, a
    device is not opened) and only an nsfs file is opened for real."""
    try:
        probe = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NetnsGone(path) from None
    except OSError as exc:
        raise EnvError(f"failed to open CNI_NETNS {path}: {exc.strerror or exc}") from None
    try:
        if stat.S_ISDIR(os.fstat(probe).st_mode):
            raise EnvError(f"CNI_NETNS {path} is a directory, not a network namespace")
        if not _is_nsfs(probe):
            raise EnvError(f"CNI_NETNS {path} is not a network namespace")
        fd = os.open(f"/proc/self/fd/{probe}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise EnvError(f"failed to open CNI_NETNS {path}: {exc.strerror or exc}") from None
    finally:
        os.close(probe)
    try:
        _verify(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def adopt_netns(fd: int, path: str) -> int:
    """A private duplicate of a netns descriptor handed over by a client, verified."""
    own = os.dup(fd)
    try:
        _verify(own, path)
    except BaseException:
        os.close(own)
        raise
    return own


def _is_nsfs(fd: int) -> bool:
    buf = (ctypes.c_long * 16)()
    return bool(_libc.fstatfs(fd, buf) == 0 and buf[0] == _NSFS_MAGIC)


def _verify(fd: int, path: str) -> None:
    if not _is_nsfs(fd):
        raise EnvError(f"CNI_NETNS {path} is not a network namespace")
    host = host_fd()
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise EnvError(f"CNI_NETNS {path} is not a network namespace: {os.strerror(err)}")
        _check(_libc.setns(host, CLONE_NEWNET), "setns back to the host netns")
    finally:
        os.close(host)


def same_netns(fd_a: int, fd_b: int) -> bool:
    a, b = os.fstat(fd_a), os.fstat(fd_b)
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def host_fd() -> int:
    """The calling thread's netns (the host's: threads leave it only inside ``entered``)."""
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


@contextmanager
def entered(fd: int, home: int) -> Iterator[None]:
    """Run the block with the calling thread in netns ``fd``; return to ``home`` after."""
    try:
        setns(fd)
    except OSError as exc:
        raise IOFailure(f"failed to enter network namespace: {exc.strerror or exc}") from None
    try:
        yield
    finally:
        setns(home)


def private_netns(home: int) -> int:
    """A fresh, unnamed netns that lives as long as the returned fd is open."""
    try:
        _check(_libc.unshare(CLONE_NEWNET), "unshare")
    except OSError as exc:
        reason = exc.strerror or exc
        raise IOFailure(f"failed to create a private network namespace: {reason}") from None
    try:
        return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        setns(home)


def is_gone(exc: BaseException) -> bool:
    return isinstance(exc, NetnsGone) or (
        isinstance(exc, OSError) and exc.errno in (errno.ENOENT, errno.ESRCH)
    )
