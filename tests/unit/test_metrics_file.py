"""rdma_cni.store.metrics_file: the plugin's bounded, lock-safe operation counters."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from rdma_cni.store import metrics_file as mf


def _by_key(snap: mf.Snapshot) -> dict[tuple[str, int], mf.OpStat]:
    return {(op.command, op.code): op for op in snap.ops}


def test_missing_directory_records_nothing(tmp_path: Path) -> None:
    path = tmp_path / "run" / "rdma-cni" / "metrics"  # the DaemonSet makes /run/rdma-cni
    mf.record(str(path), "ADD", 0, 0.003)
    assert not path.parent.exists()


def test_record_then_read_counts_sums_and_buckets(tmp_path: Path) -> None:
    path = str(tmp_path / "metrics")
    mf.record(path, "ADD", 0, 0.003)
    mf.record(path, "ADD", 0, 0.2)
    mf.record(path, "add", 101, 120.0)  # beyond the last bucket: +Inf only
    mf.record(path, "DEL", 0, 0.01)
    ops = _by_key(mf.read(path))
    assert set(ops) == {("ADD", 0), ("ADD", 101), ("DEL", 0)}
    ok = ops[("ADD", 0)]
    assert ok.count == 2 and ok.result == "success"
    assert ok.sum == pytest.approx(0.203)
    assert ok.buckets[mf.BUCKETS.index(0.005)] == 1
    assert ok.buckets[mf.BUCKETS.index(0.25)] == 1
    assert sum(ok.buckets) == 2
    err = ops[("ADD", 101)]
    assert err.count == 1 and err.result == "error" and sum(err.buckets) == 0
    assert ops[("DEL", 0)].buckets[mf.BUCKETS.index(0.01)] == 1
    assert os.path.getsize(path) == mf.FILE_SIZE


def test_unknown_command_and_code_ranges(tmp_path: Path) -> None:
    path = str(tmp_path / "m")
    mf.record(path, "FROB", 7, 0.1)
    mf.record(path, "ADD", -3, float("nan"))
    mf.record(path, "ADD", 1 << 20, float("inf"))
    ops = _by_key(mf.read(path))
    assert ops[("OTHER", 7)].count == 1
    assert ops[("ADD", mf.OVERFLOW_CODE)].count == 2
    assert ops[("ADD", mf.OVERFLOW_CODE)].sum == 0.0


def test_missing_file_reads_empty(tmp_path: Path) -> None:
    snap = mf.read(str(tmp_path / "none"))
    assert snap.ops == [] and snap.corrupt_slots == 0


def test_file_stays_bounded_with_many_distinct_codes(tmp_path: Path) -> None:
    path = str(tmp_path / "m")
    for code in range(3 * mf.SLOTS):
        mf.record(path, "CHECK", code, 0.001)
    assert os.path.getsize(path) == mf.FILE_SIZE
    ops = mf.read(path).ops
    assert len(ops) == mf.SLOTS
    assert sum(op.count for op in ops) == 3 * mf.SLOTS  # nothing lost: overflow slot
    overflow = [op for op in ops if op.code == mf.OVERFLOW_CODE]
    assert overflow and overflow[0].command == "OTHER"
    assert overflow[0].count == 3 * mf.SLOTS - (mf.SLOTS - 1)


def test_a_file_not_ours_reads_empty_and_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "m"
    path.write_bytes(b"\xff" * 12345)
    assert mf.read(str(path)).ops == []
    mf.record(str(path), "ADD", 0, 0.1)
    assert path.read_bytes() == b"\xff" * 12345
    own = tmp_path / "own"  # one of ours cut short (a torn first write) starts afresh
    own.write_bytes(mf.MAGIC + b"\0" * 10)
    mf.record(str(own), "ADD", 0, 0.1)
    assert [(o.command, o.count) for o in mf.read(str(own)).ops] == [("ADD", 1)]
    os.link(own, tmp_path / "other")  # a hard link is never written through
    before = own.read_bytes()
    mf.record(str(own), "DEL", 0, 0.1)
    assert own.read_bytes() == before


def test_corrupt_slot_is_skipped_then_reset(tmp_path: Path) -> None:
    path = str(tmp_path / "m")
    mf.record(path, "ADD", 0, 0.1)
    mf.record(path, "DEL", 0, 0.1)
    with open(path, "r+b") as f:  # flip a byte of the first slot's count
        f.seek(len(mf.MAGIC) + 5)
        f.write(b"\x7f")
    snap = mf.read(path)
    assert [(o.command, o.count) for o in snap.ops] == [("DEL", 1)]
    assert snap.corrupt_slots == 1
    mf.record(path, "ADD", 0, 0.1)  # the torn slot is reused, counting from zero
    ops = _by_key(mf.read(path))
    assert ops[("ADD", 0)].count == 1 and ops[("DEL", 0)].count == 1
    assert mf.read(path).corrupt_slots == 0


def test_never_raises(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    mf.record(str(tmp_path / "dir"), "ADD", 0, 0.1)  # a directory
    mf.record("/proc/self/no/such/metrics", "ADD", 0, 0.1)  # cannot create
    mf.record(str(tmp_path / "m"), "ADD", "x", 0.1)  # type: ignore[arg-type]
    os.symlink(tmp_path / "target", tmp_path / "link")
    mf.record(str(tmp_path / "link"), "ADD", 0, 0.1)  # O_NOFOLLOW
    assert not (tmp_path / "target").exists()
    assert mf.read(str(tmp_path / "m")).ops == []


def test_busy_lock_skips_the_record_without_waiting(tmp_path: Path) -> None:
    path = str(tmp_path / "m")
    mf.record(path, "ADD", 0, 0.1)
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        start = time.monotonic()
        mf.record(path, "ADD", 0, 0.1)
        assert time.monotonic() - start < mf.LOCK_BUDGET + 0.5
    finally:
        os.close(fd)
    assert _by_key(mf.read(path))[("ADD", 0)].count == 1


def _hammer(path: str, n: int, code: int) -> None:
    for i in range(n):
        mf.record(path, "ADD" if i % 2 else "DEL", code, 0.001 * (i % 7))


def test_concurrent_writers_add_up_and_stay_bounded(tmp_path: Path) -> None:
    path = str(tmp_path / "m")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_hammer, args=(path, 300, c % 2)) for c in range(6)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + 60
    while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
        snap = mf.read(path)  # a concurrent reader never sees a torn slot
        assert snap.corrupt_slots == 0
        time.sleep(0.01)
    for p in procs:
        p.join(5)
        assert p.exitcode == 0
    ops = _by_key(mf.read(path))
    assert sum(op.count for op in ops.values()) == 6 * 300
    assert ops[("ADD", 0)].count == ops[("DEL", 1)].count == 3 * 150
    assert os.path.getsize(path) == mf.FILE_SIZE
