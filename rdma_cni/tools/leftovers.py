"""What install leaves in the conf dir and the bin dir when it is killed, named so that
it is ours by name, and how the next run puts it right.

Names (all start with ``.rdma-cni.``; no CNI extension, so no runtime reads them):

- ``.rdma-cni.tmp-<writer>-<name><suffix>``: a temp file not yet in place (a conflist's
  ``.part``, a backup's, ``nccl_env.sh``'s) or the plugin link's temp link
  (``.rdma-cni.tmp-<pid>``); a kill leaves it as garbage.
- ``.rdma-cni.swap-<inode>-<digest>-<name>.part``: our new version of the conf file
  ``<name>`` (``<inode>`` is its inode, ``<digest>`` the start of its bytes' SHA-256)
  while conffile swaps it with the file at ``<name>`` (RENAME_EXCHANGE; conffile.py).
  After a swap it holds what came off the path: the file read, or a newer one the
  primary renamed in; after a swap back, ours again.

:func:`recover`, before a conf file is read again (install, the watch, uninstall): a
swap file holding our own file is removed; one holding the primary's file while ours
is at the path (its inode and its bytes: the primary may have rewritten our inode in
place since, or renamed in a file that got our freed inode) is swapped back (the
primary's file, older or newer, is put back at its path, and the entry merged again or
removed); one holding the primary's file while the path holds anything else (the
primary's, written after our swap) is older: removed.
Every writer of ours in the conf dir holds the bin dir's lock (bundle.bin_lock), so a
name of ours seen under it belongs to a process that is gone.

:func:`sweep`: uninstall removes every name of ours left in a dir.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat

from rdma_cni.adapters import fsops
from rdma_cni.errors import IOFailure
from rdma_cni.regfile import read_regular
from rdma_cni.store.atomic import unlink_quietly

TMP = ".rdma-cni.tmp-"
SWAP = ".rdma-cni.swap-"
PART = ".part"
BACKUP_SUFFIX = ".rdma-cni.bak"
#: a conf file larger than this is not ours (conffile reads at most 1 MiB)
_MAX_OURS = 1 << 20


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def swap_name(tmp: str, name: str, data: bytes) -> str:
    """Rename the complete temp file ``tmp`` (holding ``data``) to the swap name of the
    conf file ``name`` (beside it); that path."""
    directory = os.path.dirname(tmp) or "."
    ino = os.lstat(tmp).st_ino
    dest = os.path.join(directory, f"{SWAP}{ino}-{digest(data)}-{name}{PART}")
    os.rename(tmp, dest)
    return dest


def _listing(directory: str) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def recover(path: str) -> None:
    """Put right what a killed run left for the conf file ``path`` (see the module
    docstring); IOFailure if a swap back fails."""
    directory, name = os.path.split(path)
    directory = directory or "."
    swap = re.compile(re.escape(SWAP) + r"([0-9]+)-([0-9a-f]{16})-" + re.escape(name + PART)
                      + r"\Z")
    for entry in _listing(directory):
        full = os.path.join(directory, entry)
        if entry.startswith(TMP) and entry.endswith((f"-{name}{PART}",
                                                     f"-{name}{BACKUP_SUFFIX}")):
            unlink_quietly(full)
            continue
        m = swap.match(entry)
        if m:
            _swap_back(full, path, int(m.group(1)), m.group(2))


def _ours_at(path: str, dev: int, ino: int, sha: str) -> bool:
    """Whether the file at ``path`` is still the one we swapped there: its inode and its
    bytes (an inode alone is the primary's after an in-place rewrite, or a reused one)."""
    if fsops.dev_ino(path, follow=False) != (dev, ino):
        return False
    try:
        data = read_regular(path, _MAX_OURS)
    except OSError:
        return False
    return len(data) <= _MAX_OURS and digest(data) == sha


def _swap_back(leftover: str, path: str, ours: int, sha: str) -> None:
    try:
        st = os.lstat(leftover)
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode) and st.st_ino != ours and \
            _ours_at(path, st.st_dev, ours, sha):
        try:  # our file at the path, the primary's here: the primary's back in place
            _put(leftover, path)
        except OSError as e:
            raise IOFailure(f"failed to put the primary's {path} back from {leftover}, "
                            f"where a killed install left it: {e.strerror or e}") from e
    unlink_quietly(leftover)


def _put(leftover: str, path: str) -> None:
    try:
        fsops.exchange(leftover, path)
    except OSError as e:
        if e.errno not in fsops.UNSUPPORTED:
            raise
        os.rename(leftover, path)


def sweep(directory: str) -> list[str]:
    """Remove every temp and swap name of ours in ``directory`` (uninstall, after
    :func:`recover` of each conf file); the names removed."""
    removed = []
    for entry in _listing(directory):
        if entry.startswith((TMP, SWAP)):
            full = os.path.join(directory, entry)
            with contextlib.suppress(OSError):
                os.unlink(full)
                removed.append(entry)
    return removed


def orphan_backups(directory: str) -> list[str]:
    """Remove the backups of ours whose file is gone; the names removed."""
    removed = []
    for entry in _listing(directory):
        base = entry[: -len(BACKUP_SUFFIX)]
        if entry.endswith(BACKUP_SUFFIX) and base and \
                not os.path.lexists(os.path.join(directory, base)):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, entry))
                removed.append(entry)
    return removed
