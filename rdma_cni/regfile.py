"""Reading a file whose place someone else may have filled with something else (a store
record, a run file, a CNI config, the kubelet's config) without waiting on it.

A plain ``open()`` of a FIFO waits for a writer for ever, and of a symlink reaches
wherever it points. Here the file is opened with ``O_NONBLOCK`` (a FIFO opens at once),
not through a symlink unless ``follow``, and anything but a regular file is refused as
:class:`NotRegularError` (an ``OSError`` whose message says what is there) before a byte
is read. Each caller keeps its own answer to a missing file (``FileNotFoundError``, or
``NotADirectoryError`` when a directory of the path is none), to one that is no
regular file, and to one larger than it takes. Stdlib only: the CNI path reads its
records through it."""

from __future__ import annotations

import errno
import os
import stat

_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK


def kind(mode: int) -> str:
    """What a file of ``mode`` (``st_mode``) that is no regular file is, for a message."""
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISLNK, "a symbolic link"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "a device")


class NotRegularError(OSError):
    """Something other than a regular file is at ``path``: ``what`` says what (``kind``),
    ``mode`` is its ``st_mode`` (that of a symlink when one was refused unfollowed).
    ``str()`` names the path; ``strerror`` (no errno) does not, for a message that
    names it already (``f"... {path}: {e.strerror or e}"``)."""

    def __init__(self, path: str, mode: int) -> None:
        self.what = kind(mode)
        super().__init__(f"{path} is {self.what}, not a regular file")
        self.path, self.mode = path, mode
        self.strerror = f"{self.what}, not a regular file"


def open_nowait(path: str, *, follow: bool = False) -> int:
    """``path`` opened to read without waiting (a FIFO opens at once) and, unless
    ``follow``, not through a symlink (:class:`NotRegularError`). Whatever is there is
    opened: :func:`open_regular` refuses all but a regular file."""
    try:
        return os.open(path, _FLAGS if follow else _FLAGS | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise NotRegularError(path, stat.S_IFLNK) from e
        if e.errno == errno.EISDIR:
            raise NotRegularError(path, stat.S_IFDIR) from e
        raise


def open_regular(path: str, *, follow: bool = False) -> tuple[int, os.stat_result]:
    """:func:`open_nowait`, and the open file's stat; :class:`NotRegularError` (the file
    closed) when it is no regular file. The caller closes the descriptor."""
    fd = open_nowait(path, follow=follow)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularError(path, st.st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_stat(path: str, limit: int, *, follow: bool = False) -> tuple[bytes, os.stat_result]:
    """:func:`read_regular`, and the stat of the file read (taken of the open file, so
    the two always belong together)."""
    fd, st = open_regular(path, follow=follow)
    try:  # the mode before a file object: fdopen of a directory fails (EISDIR)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit + 1 if limit >= 0 else -1), st
    finally:
        os.close(fd)


def read_regular(path: str, limit: int, *, follow: bool = False) -> bytes:
    """The first ``limit`` + 1 bytes of the regular file at ``path`` (more than ``limit``:
    it is larger than the caller takes; a negative ``limit``: all of it). Never waits,
    never through a symlink unless ``follow``; :class:`NotRegularError` for anything but
    a regular file, another ``OSError`` when it cannot be read (``FileNotFoundError``:
    there is none)."""
    return read_stat(path, limit, follow=follow)[0]
