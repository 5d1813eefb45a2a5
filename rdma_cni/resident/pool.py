"""The threads that run ``serve``'s requests: a request is handed to a thread already
waiting for one (a futex wake-up) instead of a thread started for it; a new thread only
when every one is busy, so a request that waits (a stalled kubelet) never holds up the
next. Threads beyond ``keep`` that have been idle for ``linger`` seconds end. The
requests handed over and not yet done are counted (:attr:`Pool.running`: serve's drain).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from rdma_cni.resident.drain import Running


class Pool:
    def __init__(self, run: Callable[..., None], keep: int = 2, linger: float = 30.0) -> None:
        self._run, self._keep, self._linger = run, keep, linger
        self._queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._threads = 0
        self.running = Running()

    def submit(self, *args: Any) -> None:
        self.running.enter()
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._queue.put(args)  # under the lock: a thread timing out sees it
                return
            self._threads += 1
        try:
            threading.Thread(target=self._serve, args=(args,), name="request",
                             daemon=True).start()
        except BaseException:  # RuntimeError: no thread can be started (a pids limit)
            with self._lock:
                self._threads -= 1
            self.running.leave()
            raise

    def _serve(self, args: tuple[Any, ...]) -> None:
        while True:
            try:
                self._run(*args)
            finally:
                self.running.leave()
            with self._lock:
                self._idle += 1
            nxt = self._next()
            if nxt is None:
                return
            args = nxt

    def _next(self) -> tuple[Any, ...] | None:
        """The next request, or None when this thread ends (idle, and not needed)."""
        while True:
            try:
                return self._queue.get(timeout=self._linger)
            except queue.Empty:
                with self._lock:
                    try:
                        return self._queue.get_nowait()  # handed over as we timed out
                    except queue.Empty:
                        if self._threads > self._keep:
                            self._idle -= 1
                            self._threads -= 1
                            return None

    @property
    def threads(self) -> int:
        return self._threads
