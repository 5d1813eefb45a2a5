"""Orphaned temp files: the ones a writer (:func:`rdma_cni.store.atomic.write_temp`)
left when it died between writing and renaming or linking. An orphan is a temp file no
writer holds whose writer is dead in our own PID namespace or, seen from another one,
that is older than a minute (:func:`is_orphan`). Readers remove them as they scan
(:func:`rdma_cni.store.files.scan`); an attachment's purge removes those of its state
record (:func:`remove_orphans_of`)."""

from __future__ import annotations

import fcntl
import os
import time

from rdma_cni.log import LazyLogger
from rdma_cni.regfile import open_nowait
from rdma_cni.store.atomic import TMP, pid_namespace, unlink_quietly

log = LazyLogger(__name__)

_ORPHAN_AGE = 60.0


def _writer_in_our_view(name: str) -> bool | None:
    """Whether the temp file's writer still runs, when it shares our PID namespace; None
    when it does not.

    A PID means something only in the namespace it was taken in: a reader in another
    one (the agent in its container) learns nothing from it and leaves the call to
    the lock and the age (:func:`is_orphan`)."""
    tag = name[len(TMP):].split("-", 1)[0]
    ns, _, pid = tag.partition(".")
    if not ns or not pid.isdigit() or ns != pid_namespace():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # EPERM: alive, not ours
    return True


def is_orphan(directory: str, name: str) -> bool:
    """A temp file no writer holds (its flock is free) whose writer is gone: dead in our
    own PID namespace, or, seen from another one, older than a minute.

    The flock is held on the file itself, so it holds across PID and mount namespaces
    sharing the data dir; the writer's PID counts only where we share its PID view."""
    path = os.path.join(directory, name)
    alive = _writer_in_our_view(name)
    if alive:  # the common case, a write in progress: no open
        try:
            if time.time() - os.lstat(path).st_mtime <= _ORPHAN_AGE:
                return False
        except OSError:
            return False
    try:
        fd = open_nowait(path)  # a flock on whatever is there: no read, no mode check
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        age = time.time() - os.fstat(fd).st_mtime
    except OSError:
        return False  # EWOULDBLOCK: a live writer holds it
    finally:
        os.close(fd)
    return alive is False or age > _ORPHAN_AGE  # False: its writer is dead in our view


def drop_if_orphan(directory: str, name: str) -> None:
    """Remove the temp file ``directory/name`` if it is an orphan."""
    if is_orphan(directory, name):
        log.info("removing orphaned temp file %s", os.path.join(directory, name))
        unlink_quietly(os.path.join(directory, name))


def remove_orphans_of(directory: str, name: str) -> None:
    """The orphaned temp files (:func:`is_orphan`) written for ``directory/name``."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    end = f"-{name}"
    for n in names:
        if n.startswith(TMP) and n.endswith(end):
            drop_if_orphan(directory, n)
