"""A corrupt state record moved aside into ``corrupt/`` (see :mod:`rdma_cni.store.core`),
and what is done when it cannot be moved: something that is not a directory is where
``corrupt/`` belongs (only a hand put it there), or the move fails. Then the record stays
where it is, reads as absent all the same, and its key counts as one with an unreadable
record for the rest of the request (:meth:`rdma_cni.store.core.Store.quarantined`): a
failed move must not fail a DEL of another container, or of this one (which tears down
by the alias mark and then removes the record)."""

from __future__ import annotations

import os
import time

from rdma_cni.errors import IOFailure
from rdma_cni.log import LazyLogger
from rdma_cni.store.files import ensure_dir

log = LazyLogger(__name__)


def move_aside(path: str, corrupt_dir: str, why: str) -> bool:
    """Move the corrupt record at ``path`` to ``corrupt_dir/<name>.<time>`` (the directory
    made if missing); True when moved or gone, False when it stays in place (logged)."""
    dest = os.path.join(corrupt_dir, f"{os.path.basename(path)}.{time.time_ns()}")
    try:
        ensure_dir(corrupt_dir)
        os.replace(path, dest)
    except FileNotFoundError:  # gone meanwhile (ensure_dir raises IOFailure only)
        return True
    except (IOFailure, OSError) as e:
        failed = e.msg if isinstance(e, IOFailure) else f"failed to move it to {dest}: " \
            f"{e.strerror or e}"
        log.warning("corrupt state record %s (%s) is left in place: %s", path, why, failed)
        return False
    log.warning("moved corrupt state record %s to %s: %s", path, dest, why)
    return True
