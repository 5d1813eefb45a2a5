"""``serve`` stopping as a daemon does (SIGTERM: a DaemonSet rollout; SIGINT): it accepts
nothing more at once (the socket path goes: a new server may bind it, new requests go to
it or run in-process), refuses the connections whose request no thread has taken yet
(their callers run them in-process), and waits for the requests its threads are running
to finish and be answered: at most :data:`DRAIN_TIMEOUT` seconds (``serve
--drain-timeout``), or until told to stop a second time. Each process of ``serve --workers``
drains its own requests; the parent waits for its workers as long (and a moment more).
"""

from __future__ import annotations

import logging
import threading
import time

logger = logging.getLogger("rdma_cni")
#: seconds a stopping process waits for its running requests: under the DaemonSet's
#: terminationGracePeriodSeconds (30, conf/k8s/base/daemonset.yaml), past which the
#: kubelet kills the container, and under the client's own wait (25 s)
DRAIN_TIMEOUT = 20.0


class Running:
    """The requests this process has handed to its threads and not yet answered."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.count = 0
        self.hurry = threading.Event()  # told to stop again: wait no more

    def enter(self) -> None:
        with self._cond:
            self.count += 1

    def leave(self) -> None:
        with self._cond:
            self.count -= 1
            self._cond.notify_all()

    def drain(self, until: float) -> int:
        """Wait until no request runs, at most until ``until`` (monotonic) or until
        :attr:`hurry` is set; returns how many are left running (abandoned)."""
        with self._cond:
            if self.count:
                logger.info("resident server stopping: waiting for %d running request(s), "
                            "at most %.1f s", self.count, max(0.0, until - time.monotonic()))
            # short waits: the second signal's handler sets hurry without a notify
            while self.count and not self.hurry.is_set():
                left = until - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.1))
            left_over = self.count
        if left_over:
            why = "told to stop again" if self.hurry.is_set() else "drain timeout"
            logger.warning("resident server exits with %d request(s) still running, "
                           "abandoned (%s); their callers run them in-process", left_over, why)
        return left_over
