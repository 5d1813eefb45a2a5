"""The install tools' file primitives: an atomic file write (the store's, with a
directory fsync) and the one-line progress message on stderr (shared by install, its
conflist edits, the bundle layout and ``--watch``)."""

from __future__ import annotations

import os
import sys

from rdma_cni.store.files import fsync_dir
from rdma_cni.store.files import write_atomic as _store_write_atomic

__all__ = ["fsync_dir", "say", "write_atomic"]


def say(msg: str, cmd: str = "install") -> None:
    sys.stderr.write(f"rdma-cni {cmd}: {msg}\n")
    sys.stderr.flush()


def write_atomic(path: str, data: bytes, mode: int = 0o644) -> None:
    """Write ``path`` through a hidden temp file (no CNI extension, so a conf dir
    watcher never reads it) and a rename, then fsync the directory."""
    d, base = os.path.split(path)
    _store_write_atomic(d or ".", base, data, mode=mode, suffix=".part", sync_dir=True)
