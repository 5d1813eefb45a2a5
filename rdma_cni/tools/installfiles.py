"""The install tools' file primitives: an atomic file write (the store's, with a
directory fsync) and the clean-up of what an interrupted step staged in the CNI bin
dir. Their one-line progress message is :func:`rdma_cni.cliargs.say`."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

from rdma_cni.errors import IOFailure
from rdma_cni.store.atomic import fsync_dir, unlink_quietly
from rdma_cni.store.atomic import write_atomic as _store_write_atomic
from rdma_cni.tools import leftovers

__all__ = ["fsync_dir", "reason", "staged", "write_atomic"]


def write_atomic(path: str, data: bytes, mode: int = 0o644) -> None:
    """Write ``path`` through a hidden temp file (no CNI extension, so a conf dir
    watcher never reads it; named as ours, so uninstall removes one a kill left:
    leftovers.py) and a rename, then fsync the directory."""
    d, base = os.path.split(path)
    _store_write_atomic(d or ".", base, data, mode=mode, suffix=leftovers.PART,
                        sync_dir=True, prefix=leftovers.TMP)


def reason(e: OSError) -> str:
    """An OSError's cause in a few words; for ``shutil.copytree``'s error (a list of
    per-file errors) the first file's cause and how many more failed."""
    errors = e.args[0] if isinstance(e, shutil.Error) and e.args else None
    if not isinstance(errors, list) or not errors:
        return str(e.strerror or e)
    first = errors[0]
    why = str(first[-1] if isinstance(first, tuple) else first)
    m = re.match(r"\[Errno \d+\] ([^:]+)", why)
    more = f" (and {len(errors) - 1} more files)" if len(errors) > 1 else ""
    return (m.group(1) if m else why) + more


def _hidden(directory: str, prefix: str) -> set[str]:
    try:
        return {n for n in os.listdir(directory) if n.startswith(prefix)}
    except OSError:
        return set()


@contextmanager
def staged(directory: str, prefix: str, what: str) -> Iterator[None]:
    """Run a block that stages ``prefix*`` entries in ``directory`` (temp copies renamed
    into place at its end). If it fails, the ones it left are removed, so an interrupted
    copy (a full disk) leaves nothing partial behind, and an OSError becomes one line,
    ``failed to <what>: <cause>``. Entries there before the block are left alone."""
    before = _hidden(directory, prefix)
    try:
        yield
    except BaseException as e:
        for name in _hidden(directory, prefix) - before:
            path = os.path.join(directory, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                unlink_quietly(path)
        if isinstance(e, OSError):
            raise IOFailure(f"failed to {what}: {reason(e)}") from None
        raise
