"""Rewriting a CNI config file that the primary CNI owns, without undoing its writes.

**Symlinks.** A conf dir entry may be a symlink (the primary keeps its file elsewhere
and links it in). The file rewritten is then the link's final target, in place: a temp
file in the target's own directory renamed over the target, so the link stays and the
primary's later writes to its file are still what the runtime reads. Chains are
followed (at most :data:`MAX_HOPS` links); absolute targets, and symlinks among the
directories of a target, are read under ``root``, the host's ``/`` as mounted here (a
DaemonSet sees the host's conf dir at /host/etc/cni/net.d). A dangling link, or a target
that cannot be written, is refused with one line naming the link: replacing the link
instead would cut the primary off.

**Conditional rewrite** (compare and swap). :func:`read` keeps the file open and
remembers its identity (device, inode, size, mtime, ctime) and bytes. :func:`replace`
writes and fsyncs the new content to a temp file, then, under a read lease on the open
file (refused while another process has it open for writing, broken by any later open
for writing or truncate; readers, such as the runtime, do not disturb it):

1. checks that the open file still holds those bytes (size, mtime, ctime, content) and
   that the path still names it (device, inode); otherwise CHANGED;
2. swaps the temp file and the path (RENAME_EXCHANGE) and checks that what came off the
   path is the file read, unchanged, with the lease unbroken. If not (the primary renamed
   a newer file in, or opened the old one, since step 1) it swaps back until the newest
   file is at the path again: CHANGED.

The caller reads and merges again after CHANGED, and after BUSY (lease refused: a
process has the file open for writing, in place) a moment later; content that does not
parse while a process has the file open for writing (:func:`being_written`: truncated,
half written) is BUSY too.

**A kill.** The temp file is renamed to its swap name (``leftovers.py``: our file's
inode and digest in it) before the first swap, so whatever a kill at any step leaves, the next
run's :func:`leftovers.recover`, before it reads the file again, tells apart: our file
not yet swapped (removed), the primary's file swapped off while ours is at the path
(swapped back: the path never keeps our file built on an older generation), or the
primary's file that a newer one of its own has replaced since (removed). The path
always holds a whole file, the primary's or ours; no temp name has a CNI extension.

What remains. Between a swap and its swap back (two system calls) a reader could see
our file built on the older generation; nothing is lost. An in-place writer whose
open() looked the path up before the swap and reached the file after the lease was let
go writes to the replaced file. Where leases are unavailable (some filesystems) a writer
that keeps the file open across the swap is not seen; without RENAME_EXCHANGE the swap
is a plain rename right after step 1.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import os
import stat
from dataclasses import dataclass

from rdma_cni.adapters import fsops
from rdma_cni.errors import ConfigError, IOFailure
from rdma_cni.regfile import NotRegularError, open_regular
from rdma_cni.store.atomic import fsync_dir, ioerr, unlink_quietly, write_temp
from rdma_cni.tools import leftovers

MAX_HOPS = 40  # the kernel's own limit on symlinks in one lookup
MAX_BYTES = 1 << 20
_MAX_SWAPS = 1000


class Outcome(enum.Enum):
    DONE = "done"  # rewritten
    CHANGED = "changed"  # the file changed since it was read: read it again
    BUSY = "busy"  # another process has it open: read it again a moment later


class Changed(Exception):  # noqa: N818 - a signal to read again, not a failure
    """The path changed under the read (it became a symlink): read it again."""


def link_chain(path: str, root: str = "/") -> list[str]:
    """``path`` and every path its symlinks lead to, in order, as seen here (relative
    targets from the link's directory, absolute ones under ``root``); the last one is
    not a symlink, and may not exist."""
    chain = [path]
    while len(chain) <= MAX_HOPS:
        try:
            target = os.readlink(chain[-1])
        except OSError as e:
            if e.errno in (errno.EINVAL, errno.ENOENT, errno.ENOTDIR):
                return chain  # not a link, or not there
            raise ConfigError(f"failed to read the symlink {chain[-1]}: "
                              f"{e.strerror or e}") from e
        if os.path.isabs(target):
            chain.append(_dir_in_root(os.path.join(root, target.lstrip("/")), root))
        else:
            chain.append(_dir_in_root(os.path.join(os.path.dirname(chain[-1]), target), root))
    raise ConfigError(f"failed to edit {path}: more than {MAX_HOPS} symlinks to follow")


def _dir_in_root(path: str, root: str) -> str:
    """``path`` with its directory's symlinks resolved under ``root`` (a directory the
    primary links through, ``/etc/vpc -> /opt/vpc``, is the host's ``/opt/vpc``, not
    this container's), where the kernel can (openat2); else ``path`` as it is."""
    top = root.rstrip("/")
    if not top or not path.startswith(top + "/"):
        return path  # no host root (it is /), or a conf dir outside it: as given
    directory, name = os.path.split(path)
    # the text as it is: ".." is the kernel's to resolve, after the symlinks before it,
    # and never above the root (RESOLVE_IN_ROOT)
    rel = directory[len(top) + 1:] or "."
    try:
        rfd = os.open(top, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = fsops.open_in_root(rfd, rel)
        finally:
            os.close(rfd)
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
    except (OSError, ValueError):
        # not there (a dangling link says so later), or no openat2: the text alone,
        # its ".." kept inside the root
        return os.path.join(top, os.path.normpath("/" + rel).lstrip("/"), name)
    return os.path.join(real, name)


def resolve(path: str, root: str = "/") -> str:
    """The file to rewrite for the conf dir entry ``path``: itself, or its link's final
    target; ConfigError naming the link when that does not exist."""
    chain = link_chain(path, root)
    if len(chain) > 1 and not os.path.lexists(chain[-1]):
        raise ConfigError(f"failed to edit {path}: a symlink to {chain[-1]}, which does "
                          "not exist (not replacing the link: the primary writes its target)")
    return chain[-1]


@dataclass
class Snapshot:
    """A file as read, still open: what :func:`replace` compares against."""

    path: str
    fd: int
    st: os.stat_result
    data: bytes

    def close(self) -> None:
        os.close(self.fd)


def read(path: str, shown: str | None = None) -> Snapshot:
    """Open and read ``path`` (not following a symlink: it is a link's resolved target);
    ``shown`` names it in errors (the conf dir entry)."""
    try:  # never waits: a FIFO there opens at once, and is refused
        fd, st = open_regular(path)
    except NotRegularError as e:
        if stat.S_ISLNK(e.mode):  # a symlink since it was resolved
            raise Changed(path) from e
        raise ConfigError(f"failed to read config {shown or path}: not a regular file") from e
    except OSError as e:
        raise ConfigError(f"failed to read config {shown or path}: {e.strerror or e}") from e
    try:
        data = os.pread(fd, MAX_BYTES + 1, 0)
    except BaseException:
        os.close(fd)
        raise
    return Snapshot(path, fd, st, data)


def being_written(snap: Snapshot) -> bool:
    """Whether another process has the file open for writing (its read lease refused):
    content that does not parse is then a write in progress, not the primary's file."""
    leased = fsops.take_read_lease(snap.fd)
    if leased:
        fsops.release_lease(snap.fd)
    return leased is False


def _holds(snap: Snapshot, ctime: bool = True) -> bool:
    """The open file still holds what was read (after our own swap its ctime moved)."""
    st = os.fstat(snap.fd)
    if (st.st_size, st.st_mtime_ns) != (snap.st.st_size, snap.st.st_mtime_ns):
        return False
    if ctime and st.st_ctime_ns != snap.st.st_ctime_ns:
        return False
    return os.pread(snap.fd, len(snap.data) + 1, 0) == snap.data


def _dev_ino(path: str) -> tuple[int, int] | None:
    return fsops.dev_ino(path, follow=False)


def replace(snap: Snapshot, data: bytes) -> Outcome:
    """Put ``data`` at ``snap.path`` if the file there is still the one read (see the
    module docstring); IOFailure if it cannot be written."""
    directory = os.path.dirname(snap.path) or "."
    name = os.path.basename(snap.path)
    tmp = write_temp(directory, name, data, mode=stat.S_IMODE(snap.st.st_mode),
                     suffix=leftovers.PART, prefix=leftovers.TMP)
    if (snap.st.st_uid, snap.st.st_gid) != (os.geteuid(), os.getegid()):
        with contextlib.suppress(OSError):  # the primary's file keeps its owner
            os.chown(tmp, snap.st.st_uid, snap.st.st_gid)
    try:
        tmp = leftovers.swap_name(tmp, name, data)  # a kill's leftover told by its name
    except OSError as e:
        unlink_quietly(tmp)
        raise ioerr("write", snap.path, e) from e
    leased = fsops.take_read_lease(snap.fd)
    try:
        if leased is False or not _unchanged(snap):
            unlink_quietly(tmp)
            return Outcome.BUSY if leased is False else Outcome.CHANGED
        outcome = _exchange(snap, tmp, leased)
    finally:
        if leased:
            fsops.release_lease(snap.fd)
    if outcome is Outcome.DONE:
        fsync_dir(directory)
    return outcome


def _unchanged(snap: Snapshot) -> bool:
    """Step 1: the file read is unchanged and still at its path (checked last, right
    before the swap)."""
    return _holds(snap) and _dev_ino(snap.path) == (snap.st.st_dev, snap.st.st_ino)


def _exchange(snap: Snapshot, tmp: str, leased: bool | None) -> Outcome:
    """Step 2: swap ``tmp`` (our file) onto the path and check what came off it, and
    that the lease (when ``leased``) was not broken meanwhile."""
    ours = _dev_ino(tmp)
    try:
        fsops.exchange(tmp, snap.path)
    except OSError as e:
        try:
            if e.errno not in fsops.UNSUPPORTED:
                raise
            os.rename(tmp, snap.path)
        except OSError as e2:
            unlink_quietly(tmp)
            raise ioerr("replace", snap.path, e2) from e2
        return Outcome.DONE
    took = _dev_ino(tmp) == (snap.st.st_dev, snap.st.st_ino) and _holds(snap, ctime=False)
    if took and (leased is None or fsops.lease_held(snap.fd)):
        unlink_quietly(tmp)  # the file replaced
        return Outcome.DONE
    _put_back(tmp, snap.path, ours)
    return Outcome.CHANGED


def _put_back(tmp: str, path: str, put: tuple[int, int] | None) -> None:
    """After a swap that took a newer file than the one read off ``path`` (it is at
    ``tmp`` now, ``put`` at ``path``): swap again until ``tmp`` holds what was put on
    ``path`` last, so the newest file is at ``path``; then remove that."""
    expect = put
    try:
        for _ in range(_MAX_SWAPS):
            put = _dev_ino(tmp)
            fsops.exchange(tmp, path)
            if _dev_ino(tmp) == expect:
                unlink_quietly(tmp)
                return
            expect = put
    except OSError as e:
        raise IOFailure(f"failed to put {path} back after a concurrent write: "
                        f"{e.strerror or e}; the newer file may be {tmp}") from e
    raise IOFailure(f"failed to put {path} back after a concurrent write: it kept being "
                    f"replaced ({_MAX_SWAPS} swaps); the newer file is {tmp}")
