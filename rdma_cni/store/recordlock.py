"""The lock of one attachment's state record: ``LOCK_EX`` on the record's file, the one
in place when the lock is taken.

An ADD holds it around each of its steps and undos, and whatever takes an attachment
away from its ADD holds it while it does (a takeover by a later ADD or a DEL, a purge;
:mod:`rdma_cni.cni.commands.owner`): so no step of an ADD overlaps the moment its
attachment changes hands, while the steps of different attachments wait neither for
each other nor for the store lock (32 pods at once: about 12 % less wall than with
every step under the store lock, bench/README.md).

A record is only ever replaced whole (a rename or a swap puts a new file in its place)
or removed, so the lock is on an inode: taken on a file that is no longer in place when
the wait ends (a takeover replaced it meanwhile), it is let go and taken again on the
file in place. Order: a holder of the store lock may take a record's lock, never the
reverse (a step never takes the store lock). Not re-entrant: a second hold of the same
record in one thread waits for itself until its deadline (:class:`TryAgain`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rdma_cni.errors import IOFailure
from rdma_cni.store.files import Identity, identity_from
from rdma_cni.store.lock import wait_flock

#: O_NONBLOCK: a FIFO in a record's place opens at once (a reader quarantines it)
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@contextmanager
def record_locked(path: str, timeout: float) -> Iterator[Identity | None]:
    """Hold the lock of the record at ``path`` for the ``with`` body; its identity (see
    :func:`rdma_cni.store.files.identity_of`: the file in place, locked), or None when
    there is no record (nothing is held then)."""
    locked = _lock_in_place(path, time.monotonic(), timeout)
    if locked is None:
        yield None
        return
    fd, held = locked
    try:
        yield identity_from(held)
    finally:
        os.close(fd)  # lets the lock go


def _lock_in_place(path: str, start: float, timeout: float
                   ) -> tuple[int, os.stat_result] | None:
    """A descriptor of the record in place at ``path``, locked, and its stat; None when
    there is none."""
    while True:
        try:
            fd = os.open(path, _FLAGS)
        except (FileNotFoundError, NotADirectoryError):  # ENOTDIR: state/ is not a directory
            return None
        except OSError as e:
            raise IOFailure(f"failed to open state record {path}: {e.strerror or e}") from e
        try:
            wait_flock(fd, path, start, timeout)
            held = os.fstat(fd)
            if _in_place(held, path):
                return fd, held
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # replaced or removed while we waited: the file in place now


def _in_place(held: os.stat_result, path: str) -> bool:
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise IOFailure(f"failed to read state record {path}: {e.strerror or e}") from e
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)
