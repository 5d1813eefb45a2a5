"""Heartbeats: small JSON files a long-running component writes after each pass, in
``RDMA_CNI_HEALTH_DIR`` (default ``/tmp``, the container's own), so ``rdma-cni probe``
in the same container reads what the process did last (:mod:`rdma_cni.tools.probe`).
Stdlib only."""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any

HEALTH_DIR_ENV = "RDMA_CNI_HEALTH_DIR"
DEFAULT_DIR = "/tmp"


def heartbeat_path(component: str, directory: str | None = None) -> str:
    """``component``'s heartbeat file in ``directory``, else ``RDMA_CNI_HEALTH_DIR``, else
    :data:`DEFAULT_DIR`."""
    where = directory or os.environ.get(HEALTH_DIR_ENV) or DEFAULT_DIR
    return os.path.join(where, f"rdma-cni-{component}.health")


def beat(component: str, period: float, **facts: Any) -> None:
    """Record that ``component`` finished a pass now (best effort, atomic)."""
    path = heartbeat_path(component)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            json.dump({"time": time.time(), "period": period, **facts}, f)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
