"""The store's record files: their JSON encoding, bounded reads of JSON records with
the identity of the file read, directory creation, removal, and directory scans that
skip temp files and remove orphaned ones (:mod:`rdma_cni.store.orphans`). Records are
written by :mod:`rdma_cni.store.atomic`. See :mod:`rdma_cni.store.core` for the layout
and the crash-safety argument."""

from __future__ import annotations

import bisect
import json
import os
import stat
from typing import Any

from rdma_cni import jsondoc, regfile
from rdma_cni.errors import IOFailure
from rdma_cni.log import LazyLogger
from rdma_cni.store.atomic import TMP, fsync_dir, ioerr
from rdma_cni.store.orphans import drop_if_orphan

log = LazyLogger(__name__)

#: the largest record read: releases up to 0.1.0 wrote state without a bound
MAX_READ = 16 << 20


class Corrupt(Exception):
    """A record that is not a readable JSON object."""


def encode(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def ensure_dir(path: str, parents: bool = False) -> None:
    """Create the directory ``path`` (0700); one already there (or a link to one) is
    kept. Anything else in its place is an :class:`IOFailure`: the store never removes
    what it did not write, and a write under it would fail anyway."""
    try:
        if parents:
            os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not os.path.isdir(path):
            raise IOFailure(f"failed to create directory {path}: something that is not a "
                            "directory is in its place") from None
        return
    except OSError as e:
        raise ioerr("create directory", path, e) from e
    fsync_dir(os.path.dirname(path) or ".")


def remove(path: str) -> bool:
    try:
        os.unlink(path)
    except (FileNotFoundError, NotADirectoryError):  # ENOTDIR: its directory is not one
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


def identity_from(st: os.stat_result) -> Identity | None:
    """:func:`_identity` of a file's stat (taken of an open file, say)."""
    return _identity(st)


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
    try:  # never through a symlink, never waiting (a FIFO in a record's place opens at once)
        raw, st = regfile.read_stat(path, MAX_READ)
    except (FileNotFoundError, NotADirectoryError):  # ENOTDIR: its directory is not one
        return None, None
    except regfile.NotRegularError as e:
        raise Corrupt("is a directory" if stat.S_ISDIR(e.mode)
                      else f"not a regular file: {e.what}") from e
    except OSError as e:
        raise ioerr("read", path, e) from e
    try:
        rec: dict[str, Any] = jsondoc.decode(raw, MAX_READ, dict, "not a JSON object")
    except jsondoc.JsonRefused as e:
        raise Corrupt(f"record {e}") from None
    return rec, _identity(st)


def scan(directory: str) -> list[str]:
    """Entry names of ``directory``, sorted (missing: none), minus temp files; orphans
    are removed. Temp files share a prefix, so they sit together in the sorted names.
    Something that is not a directory holds no records: none, and a warning (only a
    hand put it there; whatever would write under it fails, :func:`ensure_dir`)."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        log.warning("%s is not a directory: it holds no records", directory)
        return []
    except OSError as e:
        raise ioerr("list", directory, e) from e
    first = end = bisect.bisect_left(names, TMP)
    while end < len(names) and names[end].startswith(TMP):
        drop_if_orphan(directory, names[end])
        end += 1
    del names[first:end]
    return names
