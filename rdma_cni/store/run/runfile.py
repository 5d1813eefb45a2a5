"""Reading a run file (what one of the node's components wrote for the others, in
``/run/rdma-cni`` or a container's health dir) without waiting on it.

A plain ``open()`` of a FIFO waits for a writer: a FIFO in a status file's place held
``rdma-cni ls``, ``doctor``, the agent's start and every scrape of the exporter forever.
The file is opened with ``O_NONBLOCK`` (a FIFO opens at once) and anything but a regular
file (symlinks followed: a ConfigMap's file is one) is refused. Stdlib only."""

from __future__ import annotations

import os
import stat
import sys

from rdma_cni.errors import escaped
from rdma_cni.store.files import kind

_said: set[str] = set()


class NotRegularError(OSError):
    """Something other than a regular file is at the path."""


def read_bytes(path: str, limit: int = -1) -> bytes:
    """The first ``limit`` + 1 bytes of the regular file at ``path`` (a negative ``limit``:
    all of it); OSError when it cannot be read, :class:`NotRegularError` when it is no regular
    file (its message says what it is)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:  # the mode before a file object: fdopen of a directory fails (EISDIR)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularError(f"{path} is {kind(mode)}, not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit + 1 if limit >= 0 else -1)
    finally:
        os.close(fd)


def read(path: str, limit: int = -1) -> bytes | None:
    """:func:`read_bytes`; None when there is no file or it cannot be read. Something that
    is no regular file is also said on stderr, one line, once per path in a process (the
    exporter reads at every scrape)."""
    try:
        return read_bytes(path, limit)
    except NotRegularError as e:
        if path not in _said:
            _said.add(path)
            sys.stderr.write(f"rdma-cni: ignoring {escaped(str(e))}\n")
            sys.stderr.flush()
        return None
    except OSError:
        return None

