"""Atomic file writes: a complete temp file (written and fsynced under its flock) renamed
over its final name, or hard-linked to it for an exclusive creation; the failure of a
file operation as an :class:`~rdma_cni.errors.IOFailure`.

Temp files are named ``.tmp-<pid namespace>.<pid>-<random>-<name>`` in the directory
of their final name; the writer holds the temp file's flock while writing. Readers skip
them and remove the ones a dead writer left (:mod:`rdma_cni.store.orphans`). The store
(:mod:`rdma_cni.store.core`) and the install tools write through these."""

from __future__ import annotations

import errno
import fcntl
import os
from contextlib import suppress

from rdma_cni.errors import IOFailure

TMP = ".tmp-"


def ioerr(action: str, path: str, e: OSError) -> IOFailure:
    return IOFailure(f"failed to {action} {path}: {e.strerror or e}")


def fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise ioerr("sync directory", path, e) from e


def entry_written(directory: str) -> None:
    """After a record's rename or link into ``directory``: its directory entry is left
    to the kernel's writeback (no fsync of the directory). A process crash at any point
    cannot lose it: it is in the page cache. A power loss can, but only together with
    everything the record describes; the store writes its records' data without an
    fsync too, and removes what a power loss cuts at the next boot
    (:mod:`rdma_cni.store.boot`, where the whole argument is). Files outside the store
    (the install tools' ``write_atomic(..., sync_dir=True)``) keep both fsyncs."""
    del directory


def write_temp(directory: str, name: str, data: bytes, *, mode: int = 0o600,
               suffix: str = "", sync: bool = True, prefix: str = TMP) -> str:
    """A complete temp file for ``directory/name``, fsynced unless ``sync`` is False (the
    store's records: :mod:`rdma_cni.store.boot`); ``suffix`` ends its name (a file in a
    watched directory must not end in an extension the watcher reads), ``prefix`` starts
    it (outside the store: a name that says whose it is)."""
    tag = f"{_writer_tag()}-{os.urandom(4).hex()}"
    tmp = os.path.join(directory, f"{prefix}{tag}-{name}{suffix}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        fd = os.open(tmp, flags, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held while writing: see is_orphan
            if mode != 0o600:
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        unlink_quietly(tmp)
        raise ioerr("write", os.path.join(directory, name), e) from e
    return tmp


def unlink_quietly(path: str) -> None:
    with suppress(OSError):
        os.unlink(path)


def write_atomic(directory: str, name: str, data: bytes, *, mode: int = 0o600,
                 suffix: str = "", sync_dir: bool = False, prefix: str = TMP) -> None:
    """Replace ``directory/name`` by ``data`` (temp file, fsync, rename); ``sync_dir``
    also fsyncs the directory (the store's records need not: :func:`entry_written`)."""
    tmp = write_temp(directory, name, data, mode=mode, suffix=suffix, prefix=prefix)
    put_in_place(directory, name, tmp, sync_dir=sync_dir)


def put_in_place(directory: str, name: str, tmp: str, *, sync_dir: bool = False) -> None:
    """Rename the temp file ``tmp`` (from :func:`write_temp`) over ``directory/name``."""
    final = os.path.join(directory, name)
    try:
        os.replace(tmp, final)
    except OSError as e:
        unlink_quietly(tmp)
        raise ioerr("rename into place", final, e) from e
    if sync_dir:
        fsync_dir(directory)
    else:
        entry_written(directory)


def swap_in_place(directory: str, name: str, tmp: str) -> None:
    """:func:`put_in_place` for a record that is usually there already (an attachment's
    pending record, replaced by its final one): the two names swapped in one step
    (``renameat2(RENAME_EXCHANGE)``), then the old record, now at ``tmp``, removed.
    Readers see the old record or the new one, as with a rename; but ext4 flushes the
    new file's data to disk on a rename over an existing name (``auto_da_alloc``: 0.1 ms
    on this project's bench machine), not on an exchange. A missing target, or a
    filesystem that cannot swap, gets the rename. A crash before the removal leaves the
    old record under its temp name: an orphan (:mod:`rdma_cni.store.orphans`)."""
    from rdma_cni.adapters import fsops  # ctypes: only the commands that replace a record

    final = os.path.join(directory, name)
    try:
        fsops.exchange(tmp, final)
    except OSError as e:
        if e.errno == errno.ENOENT or e.errno in fsops.UNSUPPORTED:
            put_in_place(directory, name, tmp)
            return
        unlink_quietly(tmp)
        raise ioerr("rename into place", final, e) from e
    unlink_quietly(tmp)
    entry_written(directory)


def create_exclusive(directory: str, name: str, data: bytes, *, sync: bool = True) -> bool:
    """Create ``directory/name`` with ``data`` unless it exists; False if it does."""
    tmp = write_temp(directory, name, data, sync=sync)
    try:
        return link_exclusive(directory, name, tmp)
    finally:
        unlink_quietly(tmp)


def link_exclusive(directory: str, name: str, tmp: str) -> bool:
    """Create ``directory/name`` as a link of the complete temp file ``tmp`` (from
    :func:`write_temp`, in ``directory``) unless it exists; False if it does. ``tmp``
    stays: the caller removes it."""
    final = os.path.join(directory, name)
    try:
        os.link(tmp, final)
    except FileExistsError:
        return False
    except OSError as e:
        raise ioerr("create", final, e) from e
    entry_written(directory)
    return True




_pidns: list[str] = []  # a process's own PID namespace never changes: read it once


def pid_namespace() -> str:
    """This process's PID namespace (the inode of /proc/self/ns/pid), "" if unknown."""
    if not _pidns:
        try:
            _pidns.append(str(os.stat("/proc/self/ns/pid").st_ino))
        except OSError:
            return ""
    return _pidns[0]


def _writer_tag() -> str:
    """``<pid namespace>.<pid>``: which process writes a temp file, and in which PID view."""
    return f"{pid_namespace()}.{os.getpid()}"
