"""serve's request threads (resident/pool.py): handed to a waiting thread, a new one only
when all are busy, extra idle ones ending."""

from __future__ import annotations

import threading
import time

from support.proc import wait_for

from rdma_cni.resident.pool import Pool

POLL = 0.005  # seconds between looks


def test_requests_one_after_another_reuse_one_thread() -> None:
    seen: list[str] = []
    pool = Pool(lambda n: seen.append(threading.current_thread().name + str(
        threading.get_ident())), keep=1)
    for i in range(50):
        pool.submit(i)
        wait_for(lambda i=i: len(seen) == i + 1, "the pool", 5.0, POLL)
    assert len(set(seen)) == 1 and pool.threads == 1


def test_a_stalled_request_does_not_hold_up_the_next() -> None:
    release = threading.Event()
    done: list[int] = []

    def run(n: int) -> None:
        if n == 0:
            release.wait(10)
        done.append(n)

    pool = Pool(run, keep=1)
    pool.submit(0)
    pool.submit(1)
    wait_for(lambda: done == [1], "the pool", 5.0, POLL)  # while request 0 still waits
    release.set()
    wait_for(lambda: sorted(done) == [0, 1], "the pool", 5.0, POLL)
    assert pool.threads == 2


def test_threads_beyond_keep_end_when_idle() -> None:
    gate = threading.Event()
    done: list[int] = []
    pool = Pool(lambda n: (gate.wait(10), done.append(n)), keep=1, linger=0.05)
    for i in range(4):
        pool.submit(i)
    gate.set()
    wait_for(lambda: len(done) == 4, "the pool", 5.0, POLL)
    wait_for(lambda: pool.threads == 1, "the pool", 5.0, POLL)
    pool.submit(9)  # the one kept still serves
    wait_for(lambda: 9 in done, "the pool", 5.0, POLL)


def test_no_request_is_lost_under_contention() -> None:
    done: list[int] = []
    lock = threading.Lock()

    def run(n: int) -> None:
        time.sleep(0.0005 * (n % 3))
        with lock:
            done.append(n)

    pool = Pool(run, keep=2, linger=0.01)
    for i in range(2000):
        pool.submit(i)
        if i % 100 == 0:
            time.sleep(0.02)  # let threads time out while others hand over
    wait_for(lambda: len(done) == 2000, "2000 requests done", 30, POLL)
    assert sorted(done) == list(range(2000))
