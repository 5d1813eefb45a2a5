"""The store's files: atomic writes (temp file, fsync, rename), exclusive creation
(hard link of a complete temp file), removal, directory scans that skip temp files
and delete orphaned ones, and bounded reads of JSON records.

Temp files are named ``.tmp-<pid namespace>.<pid>-<random>-<name>`` in the directory
of their final name; the writer holds the temp file's flock while writing. An orphan is
a temp file no writer holds whose writer is dead in our own PID namespace or, seen from
another one, that is older than a minute (:func:`is_orphan`). See
:mod:`rdma_cni.store.core` for the layout and the crash-safety argument."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import stat
import time
from contextlib import suppress
from typing import Any

from rdma_cni import jsondoc
from rdma_cni.errors import IOFailure
from rdma_cni.log import LazyLogger

log = LazyLogger(__name__)

TMP = ".tmp-"
_ORPHAN_AGE = 60.0
#: the largest record read: releases up to 0.1.0 wrote state without a bound
MAX_READ = 16 << 20


class Corrupt(Exception):
    """A record that is not a readable JSON object."""


def ioerr(action: str, path: str, e: OSError) -> IOFailure:
    return IOFailure(f"failed to {action} {path}: {e.strerror or e}")


def encode(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


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
    to the kernel's writeback (no fsync of the directory, which was half the fsyncs of
    an ADD). A process crash at any point cannot lose it: it is in the page cache. A
    power loss can, but only together with everything the record describes: pod
    netns, sub-interfaces, rules and routes do not survive a reboot and an exclusive NIC
    boots in the host netns, so a record lost that way names nothing that still exists.
    The record's data is still fsynced before the rename or link (``_write_temp``), so
    a record that does survive is whole. Removals keep their directory fsync: a removal
    lost by a power loss would bring back a stale record."""
    del directory


def ensure_dir(path: str, parents: bool = False) -> None:
    try:
        if parents:
            os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        return
    except OSError as e:
        raise ioerr("create directory", path, e) from e
    fsync_dir(os.path.dirname(path) or ".")


def write_temp(directory: str, name: str, data: bytes, *, mode: int = 0o600,
               suffix: str = "") -> str:
    """A complete, fsynced temp file for ``directory/name``; ``suffix`` ends its name
    (a file in a watched directory must not end in an extension the watcher reads)."""
    tag = f"{_writer_tag()}-{secrets.token_hex(4)}"
    tmp = os.path.join(directory, f"{TMP}{tag}-{name}{suffix}")
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
                 suffix: str = "", sync_dir: bool = False) -> None:
    """Replace ``directory/name`` by ``data`` (temp file, fsync, rename); ``sync_dir``
    also fsyncs the directory (the store's records need not: :func:`entry_written`)."""
    put_in_place(directory, name, write_temp(directory, name, data, mode=mode, suffix=suffix),
                 sync_dir=sync_dir)


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


def create_exclusive(directory: str, name: str, data: bytes) -> bool:
    """Create ``directory/name`` with ``data`` unless it exists; False if it does."""
    tmp = write_temp(directory, name, data)
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


def remove(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise ioerr("remove", path, e) from e
    return True


#: what changes whenever a file is replaced: device, inode, ctime, mtime (ns), size
Identity = tuple[int, int, int, int, int]


def _identity(st: os.stat_result) -> Identity | None:
    """The file's :data:`Identity`; None for anything but a regular file, and when its
    times are whole seconds (a filesystem with coarse timestamps, where a recycled inode
    could pass for the file it replaced)."""
    if not stat.S_ISREG(st.st_mode) or st.st_ctime_ns % 1_000_000_000 == 0:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns, st.st_mtime_ns, st.st_size


def identity_of(path: str) -> Identity | None:
    """:func:`_identity` of the file at ``path`` (one ``lstat``); None when missing."""
    try:
        return _identity(os.lstat(path))
    except OSError:
        return None


def read_record(path: str) -> dict[str, Any] | None:
    """The JSON object at ``path``; None if missing; :class:`Corrupt` if unparsable."""
    return read_identified(path)[0]


def read_identified(path: str) -> tuple[dict[str, Any] | None, Identity | None]:
    """:func:`read_record`, and the :data:`Identity` of the file read (from the same open
    file, so the two always belong together)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EISDIR):
            raise Corrupt(f"not a regular file: {e.strerror or e}") from e
        raise ioerr("read", path, e) from e
    try:
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            raw = f.read(MAX_READ + 1)
    except OSError as e:
        if e.errno == errno.EISDIR:
            raise Corrupt("is a directory") from e
        raise ioerr("read", path, e) from e
    try:
        rec: dict[str, Any] = jsondoc.decode(raw, MAX_READ, dict, "not a JSON object")
    except jsondoc.JsonRefused as e:
        raise Corrupt(f"record {e}") from None
    return rec, _identity(st)


_pidns: list[str] = []  # a process's own PID namespace never changes: read it once


def _pid_namespace() -> str:
    """This process's PID namespace (the inode of /proc/self/ns/pid), "" if unknown."""
    if not _pidns:
        try:
            _pidns.append(str(os.stat("/proc/self/ns/pid").st_ino))
        except OSError:
            return ""
    return _pidns[0]


def _writer_tag() -> str:
    """``<pid namespace>.<pid>``: which process writes a temp file, and in which PID view."""
    return f"{_pid_namespace()}.{os.getpid()}"


def _writer_in_our_view(name: str) -> bool | None:
    """Whether the temp file's writer still runs, when it shares our PID namespace; None
    when it does not.

    A PID means something only in the namespace it was taken in: a reader in another
    one (the agent in its container) learns nothing from it and leaves the call to
    the lock and the age (:func:`is_orphan`)."""
    tag = name[len(TMP):].split("-", 1)[0]
    ns, _, pid = tag.partition(".")
    if not ns or not pid.isdigit() or ns != _pid_namespace():
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
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
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


def _drop_if_orphan(directory: str, name: str) -> None:
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
            _drop_if_orphan(directory, n)


def scan(directory: str) -> list[str]:
    """Entry names of ``directory`` (missing: none), minus temp files; orphans are removed."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise ioerr("list", directory, e) from e
    out = []
    for name in sorted(names):
        if not name.startswith(TMP):
            out.append(name)
        else:
            _drop_if_orphan(directory, name)
    return out
