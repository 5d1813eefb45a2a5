"""``serve``'s default number of processes: one per CPU it may run on, at most 4."""

from __future__ import annotations

import os
import threading

import pytest

from rdma_cni.resident.workers import default_count


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_the_default_count_is_the_cpus_serve_may_run_on() -> None:
    """A server kept to one CPU (a container's cpuset) runs one process, whatever the
    node's CPU count. sched_setaffinity(0) is the calling thread's: a thread of its own."""
    got: list[int] = []

    def one_cpu() -> None:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        got.append(default_count())

    t = threading.Thread(target=one_cpu)
    t.start()
    t.join()
    assert got == [1]
    assert default_count() == min(len(os.sched_getaffinity(0)), 4)
