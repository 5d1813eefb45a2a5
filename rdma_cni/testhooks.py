"""Every test-only seam of the plugin, in one place. **Inert unless set**: none of
these variables is part of the configuration, and nothing reads them otherwise.

- ``RDMA_CNI_TEST_CRASH_AT_STEP=k``: ADD kills itself (SIGKILL) at the boundary before
  step k of the executor (k == number of steps: after the last), to prove that the
  following DEL cleans up whatever a crash leaves (issue 7).
- ``RDMA_CNI_TEST_FAIL_AT_STEP=k``: ADD raises an IOFailure at that boundary instead,
  so that the executor's rollback runs.
- ``RDMA_CNI_TEST_STOP_AT_STEP=k``: ADD stops its whole process (SIGSTOP) at that
  boundary, as a stalled resident server would; the test resumes it (SIGCONT).
- ``RDMA_CNI_TEST_STOP_IN_MOVE=1``: ADD stops its whole process (SIGSTOP) while an
  exclusive NIC is in the private netns on its way into the pod, between the step
  boundaries: the test changes the host or the pod under it, then resumes it.
- ``RDMA_CNI_TEST_FAIL_AFTER_MOVE=pod|host``: ADD raises an IOFailure right after an
  exclusive NIC has moved into the pod (``pod``: before its index there is read), or
  right after a rollback has brought it home (``host``: before it is restored), as a
  netlink error there would.
- ``RDMA_CNI_TEST_SLEEP_AT_STEP=k:seconds``: ADD's thread sleeps that long at that
  boundary (the rest of its process runs on): a request held in the middle of its
  netlink steps while ``serve`` is told to stop (its drain).
- ``RDMA_CNI_TEST_CRASH_IN_DEL=k``: DEL kills itself before its k-th teardown action
  (counted from 0: per interface, last first: rules, link; exclusive: host recovery;
  then the end of the teardown, before the caller purges the store).
- ``RDMA_CNI_TEST_LOG_FILE=path``: the log file of a request whose config names none or
  cannot be read (the plugin's and ``serve``'s; :func:`rdma_cni.logsetup.default_file`),
  instead of the node's ``/var/log/rdma-cni.log``: the tests feed undecodable configs
  without writing a node's log.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

from rdma_cni.errors import IOFailure

CRASH_AT_STEP = "RDMA_CNI_TEST_CRASH_AT_STEP"
FAIL_AT_STEP = "RDMA_CNI_TEST_FAIL_AT_STEP"
STOP_AT_STEP = "RDMA_CNI_TEST_STOP_AT_STEP"
STOP_IN_MOVE = "RDMA_CNI_TEST_STOP_IN_MOVE"
FAIL_AFTER_MOVE = "RDMA_CNI_TEST_FAIL_AFTER_MOVE"
SLEEP_AT_STEP = "RDMA_CNI_TEST_SLEEP_AT_STEP"
CRASH_IN_DEL = "RDMA_CNI_TEST_CRASH_IN_DEL"


def _number(var: str) -> int:
    return int(os.environ.get(var, "-1") or -1)


def _crash() -> None:
    os.kill(os.getpid(), 9)


def step_seams() -> Callable[[int], None]:
    """The ADD seams: a function to call at the executor's boundary before each step k
    (the variables read once, here: a no-op unless one is set)."""
    crash, stop, fail = (_number(v) for v in (CRASH_AT_STEP, STOP_AT_STEP, FAIL_AT_STEP))
    sleep, seconds = _sleep_at()
    if max(crash, stop, fail, sleep) < 0:
        return _inert

    def at_step(k: int) -> None:
        if k == crash:
            _crash()
        if k == stop:
            _stop()
        if k == sleep:
            time.sleep(seconds)
        if k == fail:
            raise IOFailure(f"injected failure at step {k}")

    return at_step


def _stop() -> None:
    # directed at this thread, so that it stops here (a signal to the process may be
    # taken by another thread while this one runs on for a moment)
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


def in_move() -> None:
    """The seam inside an exclusive NIC's move into the pod (see the module doc)."""
    if _number(STOP_IN_MOVE) > 0:
        _stop()


def after_move(where: str) -> None:
    """The seam right after an exclusive NIC's move into ``where`` (see the module doc)."""
    if os.environ.get(FAIL_AFTER_MOVE) == where:
        raise IOFailure(f"injected failure after the move into the {where}")


def _sleep_at() -> tuple[int, float]:
    """``RDMA_CNI_TEST_SLEEP_AT_STEP``: (step, seconds); (-1, 0) when unset."""
    step, _, seconds = os.environ.get(SLEEP_AT_STEP, "").partition(":")
    if not step:
        return -1, 0.0
    return int(step), float(seconds or 0)


def _inert(k: int) -> None:
    del k


def del_ticker() -> Callable[[], None]:
    """The DEL seam: a function to call before every teardown action."""
    target = _number(CRASH_IN_DEL)
    if target < 0:
        return lambda: None
    seen = [0]

    def tick() -> None:
        if seen[0] == target:
            _crash()
        seen[0] += 1

    return tick
