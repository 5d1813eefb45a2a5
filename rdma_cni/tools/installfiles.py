"""The install tools' file primitives: an atomic file write, a directory fsync and the
one-line progress message on stderr (shared by install, its conflist edits, the
bundle layout and ``--watch``)."""

from __future__ import annotations

import os
import sys

from rdma_cni.errors import IOFailure


def say(msg: str, cmd: str = "install") -> None:
    sys.stderr.write(f"rdma-cni {cmd}: {msg}\n")
    sys.stderr.flush()


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, mode: int = 0o644) -> None:
    """Write ``path`` through a hidden temp file (no CNI extension) and a rename."""
    d, base = os.path.split(path)
    tmp = os.path.join(d, f".{base}.rdma-cni.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        _fsync_dir(d or ".")
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise IOFailure(f"failed to write {path}: {e.strerror or e}") from e

