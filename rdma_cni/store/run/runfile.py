"""Reading a run file (what one of the node's components wrote for the others, in
``/run/rdma-cni`` or a container's health dir) without waiting on it.

A plain ``open()`` of a FIFO waits for a writer: a FIFO in a status file's place held
``rdma-cni ls``, ``doctor``, the agent's start and every scrape of the exporter forever.
It is read by :func:`rdma_cni.regfile.read_regular`: opened with ``O_NONBLOCK`` (a FIFO
opens at once), and anything but a regular file (symlinks followed: a ConfigMap's file
is one) is refused. Stdlib only."""

from __future__ import annotations

import sys

from rdma_cni.errors import escaped
from rdma_cni.regfile import NotRegularError, read_regular

__all__ = ["NotRegularError", "read", "read_bytes"]

_said: set[str] = set()


def read_bytes(path: str, limit: int = -1) -> bytes:
    """The first ``limit`` + 1 bytes of the regular file at ``path`` (a negative ``limit``:
    all of it; symlinks followed); OSError when it cannot be read, :class:`NotRegularError`
    when it is no regular file (its message says what it is)."""
    return read_regular(path, limit, follow=True)


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

