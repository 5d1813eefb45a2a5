"""The flock file lock: exclusion across processes and threads, deadline, errors."""

from __future__ import annotations

import multiprocessing as mp
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from rdma_cni.errors import Code, IOFailure, TryAgain
from rdma_cni.store.lock import FileLock, locked

SPAWN = mp.get_context("spawn")


def test_lock_file_created_0600_and_reusable(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    with locked(str(path), 1.0) as lk:
        assert lk.held
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not lk.held
    with locked(str(path), 1.0):
        pass


def test_second_holder_times_out_with_try_again(tmp_path: Path) -> None:
    path = str(tmp_path / "lock")
    with locked(path, 1.0):
        t0 = time.monotonic()
        with pytest.raises(TryAgain) as ei, locked(path, 0.1):
            pass
        waited = time.monotonic() - t0
    assert 0.1 <= waited < 1.0
    assert ei.value.code == Code.TRY_AGAIN_LATER == 11
    assert path in str(ei.value) and "timeout 0.1s" in str(ei.value)
    with locked(path, 0):  # free again: a zero timeout still gets a free lock
        pass


def test_open_errors_are_io_failures(tmp_path: Path) -> None:
    with pytest.raises(IOFailure) as ei, locked(str(tmp_path / "missing" / "lock"), 1):
        pass
    assert ei.value.code == 5 and "failed to open lock file" in str(ei.value)
    os.symlink(tmp_path / "elsewhere", tmp_path / "link")
    with pytest.raises(IOFailure), locked(str(tmp_path / "link"), 1):
        pass
    assert not (tmp_path / "elsewhere").exists()


def test_double_acquire_of_one_object_is_refused(tmp_path: Path) -> None:
    lk = FileLock(str(tmp_path / "lock"), 1)
    lk.acquire()
    try:
        with pytest.raises(IOFailure, match="already held"):
            lk.acquire()
    finally:
        lk.release()
    lk.release()  # releasing twice is harmless


def test_threads_exclude_each_other(tmp_path: Path) -> None:
    path = str(tmp_path / "lock")
    box = {"n": 0, "inside": 0, "max_inside": 0}

    def work() -> None:
        for _ in range(50):
            with locked(path, 10):
                box["inside"] += 1
                box["max_inside"] = max(box["max_inside"], box["inside"])
                n = box["n"]
                time.sleep(0)
                box["n"] = n + 1
                box["inside"] -= 1

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert box["n"] == 400 and box["max_inside"] == 1


def _increment(path: str, counter: str, rounds: int) -> None:
    for _ in range(rounds):
        with locked(path, 30):
            with open(counter) as f:
                n = int(f.read())
            os.sched_yield()
            with open(counter, "w") as f:
                f.write(str(n + 1))


def test_processes_exclude_each_other(tmp_path: Path) -> None:
    path, counter = str(tmp_path / "lock"), tmp_path / "counter"
    counter.write_text("0")
    procs = [SPAWN.Process(target=_increment, args=(path, str(counter), 100)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert counter.read_text() == "400"


def _hold(path: str, held: object, release: object) -> None:
    with locked(path, 5):
        held.set()  # type: ignore[attr-defined]
        release.wait(10)  # type: ignore[attr-defined]


def test_lock_held_by_another_process(tmp_path: Path) -> None:
    path = str(tmp_path / "lock")
    held, release = SPAWN.Event(), SPAWN.Event()
    p = SPAWN.Process(target=_hold, args=(path, held, release))
    p.start()
    try:
        assert held.wait(30)
        with pytest.raises(TryAgain), locked(path, 0.05):
            pass
        release.set()
        with locked(path, 10):  # waits for the holder to let go
            pass
    finally:
        release.set()
        p.join(30)
    assert p.exitcode == 0


def test_lock_of_a_dead_process_is_free(tmp_path: Path) -> None:
    path = str(tmp_path / "lock")
    held, release = SPAWN.Event(), SPAWN.Event()
    p = SPAWN.Process(target=_hold, args=(path, held, release))
    p.start()
    assert held.wait(30)
    p.kill()  # crash while holding: the kernel drops the flock
    p.join(30)
    with locked(path, 5):
        pass
