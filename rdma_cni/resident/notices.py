"""Warnings of ``serve`` that may repeat under a flood (connections refused, closed,
declined): logged the first time, then once a minute per kind with a count."""

from __future__ import annotations

import logging
import threading
import time

logger = logging.getLogger("rdma_cni")
NOTICE_EVERY = 60.0


class Notices:
    """Warnings that may repeat under a flood: the first one, then one a minute."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, int]] = {}

    def warn(self, kind: str, text: str) -> None:
        now = time.monotonic()
        with self._lock:
            last, count = self._seen.get(kind, (-NOTICE_EVERY, 0))
            if now - last < NOTICE_EVERY:
                self._seen[kind] = (last, count + 1)
                return
            self._seen[kind] = (now, 0)
        more = f" ({count} more since the last such line)" if count else ""
        logger.warning("%s%s", text, more)
